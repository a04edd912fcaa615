"""The end-to-end stack: a dcgm-exporter stand-in, real Prometheus and Alertmanager, `remediator serve`.

Every address is on 127.0.0.0/8. The exporter, a bare webhook receiver and the fake Kubernetes API server
(FakeKube) run in the caller's event loop, so callers must keep awaiting while the stack works; Prometheus,
Alertmanager, the controller and the optional node sidecar are subprocesses whose output goes to log files
in the work directory. The shipped rule file and Alertmanager receiver are used as they are, except for the
timings: every `for:` is shortened and the routes flush at once (see `shorten_rules`, `alertmanager_overlay`).
The same stack serves tests/e2e and bench/e2e.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import grpc
import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from remediator.sidecar.proto import api_pb2_grpc
from tests.fakekube.server import FakeKube
from tests.sidecar.conftest import TOKEN as SIDECAR_TOKEN
from tests.sidecar.conftest import SidecarEnv, SidecarProcess, free_port, make_env
from tests.sidecar.fakenvml import build as build_fake_nvml

__all__ = [
    "SIDECAR_TOKEN",
    "WEBHOOK_TOKEN",
    "DcgmExporter",
    "MissingBinary",
    "Stack",
    "WebhookReceiver",
    "alertmanager_overlay",
    "eventually",
    "shorten_rules",
]

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_RULES = ROOT / "deploy" / "monitoring" / "rules.yml"
SHIPPED_ALERTMANAGER = ROOT / "deploy" / "monitoring" / "alertmanager.yml"
CONTROLLER_RECEIVER = "gpu-remediator"
BARE_RECEIVER = "bare"
WEBHOOK_TOKEN = "e2e-webhook-token"

T = TypeVar("T")


class MissingBinary(RuntimeError):
    """A monitoring binary the end-to-end tests need is not installed."""


def find_binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise MissingBinary(
        f"{' or '.join(names)} not found on PATH: the end-to-end tests need the Debian packages prometheus and "
        "prometheus-alertmanager (apt-get install -y --no-install-recommends prometheus prometheus-alertmanager; "
        "scripts/test.sh installs them)"
    )


async def eventually(
    check: Callable[[], T | Awaitable[T]], *, timeout: float, what: str, interval: float = 0.02
) -> T:
    """Call `check` until it returns something truthy; fail naming `what` once `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


# ---------------------------------------------------------------------------------------------- configs


# Range windows shortened in the end-to-end copy of the rules: the thermal settling time (10 minutes
# shipped) becomes seconds so a test can walk a GPU through cap, hold and restore.
SHORT_WINDOWS: dict[str, dict[str, str]] = {"GPUTemperatureHigh": {"[10m]": "[6s]"}}


def shorten_rules(
    source: Path, dest: Path, hold: str = "0s", windows: Mapping[str, Mapping[str, str]] = SHORT_WINDOWS
) -> Path:
    """Copy a Prometheus rule file with every `for:` set to `hold` and the range windows of `windows`
    (alertname -> {shipped: shortened}) replaced; everything else stays as shipped."""
    doc = yaml.safe_load(source.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = hold
            for shipped, short in windows.get(rule.get("alert", ""), {}).items():
                if shipped not in rule["expr"]:
                    raise ValueError(f"{source}: {rule['alert']} has no {shipped} to shorten")
                rule["expr"] = rule["expr"].replace(shipped, short)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def alertmanager_overlay(
    source: Path,
    dest: Path,
    *,
    controller_url: str,
    token_file: Path,
    bare_url: str,
    group_interval: str = "200ms",
    repeat_interval: str = "1s",
    resolve_timeout: str = "1m",
) -> Path:
    """The shipped alertmanager.yml with test timings, the controller's URL and token file, and a bare receiver.

    The bare receiver gets the same alerts through a second route (the shipped controller route has
    `continue: true`), so its arrival times show what Prometheus and Alertmanager alone cost.
    """
    doc = yaml.safe_load(source.read_text())
    doc.setdefault("global", {})["resolve_timeout"] = resolve_timeout
    root = doc["route"]
    routes = root.setdefault("routes", [])
    ours = [r for r in routes if r.get("receiver") == CONTROLLER_RECEIVER]
    if len(ours) != 1 or not ours[0].get("continue"):
        raise ValueError(f"{source}: expected one route to {CONTROLLER_RECEIVER} with continue: true")
    routes.append({
        "receiver": BARE_RECEIVER,
        "matchers": list(ours[0]["matchers"]),
        "group_by": list(ours[0].get("group_by", root.get("group_by", []))),
        "continue": True,
    })
    for route in (root, *routes):
        route.update(group_wait="0s", group_interval=group_interval, repeat_interval=repeat_interval)
    receiver = next(r for r in doc["receivers"] if r["name"] == CONTROLLER_RECEIVER)
    for hook in receiver["webhook_configs"]:
        hook["url"] = controller_url
        hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    doc["receivers"].append(
        {"name": BARE_RECEIVER, "webhook_configs": [{"url": bare_url, "send_resolved": True, "max_alerts": 0}]}
    )
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def prometheus_config(
    dest: Path, *, exporter: str, alertmanager: str, rules: Path, sidecar: str | None = None
) -> Path:
    doc: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            {"job_name": "dcgm-exporter", "honor_labels": True, "static_configs": [{"targets": [exporter]}]}
        ],
    }
    if sidecar is not None:  # the node sidecar's detector series, as the shipped PodMonitor scrapes them
        doc["scrape_configs"].append({"job_name": "gpu-remediator-sidecar", "static_configs": [{"targets": [sidecar]}]})
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def kubeconfig(dest: Path, server: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": {"token": "e2e-fake-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


# ---------------------------------------------------------------------------------------------- exporter

# name -> (type, help, default); defaults raise no alert (busy, cool, ECC clean, well under the power limit)
DCGM_FIELDS: dict[str, tuple[str, str, float]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C).", 40),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered.", 0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC errors.", 0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors.", 0),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", 80),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB).", 40_000),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB).", 100_000),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", 300),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("gauge", "Power management limit (in W).", 700),
}


# dcgm-exporter's err_msg texts (internal/pkg/collector/xid_errors.go) for the codes the tests use.
XID_MESSAGES = {
    0: "No Error",
    13: "Graphics Engine Exception",
    48: "Double Bit ECC Error",
    79: "GPU has fallen off the bus",
}


@dataclass
class Gpu:
    host: str
    index: int
    uuid: str
    pci_bus_id: str
    model: str = "NVIDIA H200"
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    # "legacy": dcgm-exporter before 3.3.6 (the Xid gauge has no err_code); "err_code": 3.3.6 and later
    err_shape: str = "legacy"
    # "Hostname" (released versions) or "hostname" (dcgm-exporter's main branch)
    host_label: str = "Hostname"
    hidden: bool = False  # the exporter is restarting: no series for this GPU
    values: dict[str, float] = field(default_factory=lambda: {k: v[2] for k, v in DCGM_FIELDS.items()})

    def labels(self) -> dict[str, str]:
        labels = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "device": f"nvidia{self.index}",
            "modelName": self.model,
            self.host_label: self.host,
            "DCGM_FI_DRIVER_VERSION": "580.159.04",
        }
        if self.pod:
            labels.update(container=self.container or "main", namespace=self.namespace or "default", pod=self.pod)
        return labels

    def series_labels(self, name: str) -> dict[str, str]:
        """The labels of one series; from 3.3.6 the Xid gauge carries err_code and err_msg (attributes last)."""
        labels = self.labels()
        if name == "DCGM_FI_DEV_XID_ERRORS" and self.err_shape == "err_code":
            code = int(self.values[name])
            labels.update(err_code=str(code), err_msg=XID_MESSAGES.get(code, "Unknown Error"))
        return labels


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Server:
    """An aiohttp app on 127.0.0.1 with a free port, in the running event loop."""

    def __init__(self, app: aiohttp.web.Application) -> None:
        self._runner = aiohttp.web.AppRunner(app, access_log=None)
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self.port:
            await self._runner.cleanup()
            self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class DcgmExporter:
    """Serves dcgm-exporter's text format for the GPUs added; values change at runtime with `set`."""

    def __init__(self) -> None:
        self.gpus: dict[tuple[str, int], Gpu] = {}
        self.scrapes = 0
        app = aiohttp.web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._server = _Server(app)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()

    @property
    def address(self) -> str:
        return self._server.address

    def add_gpu(self, host: str, index: int, uuid: str, **kw: Any) -> Gpu:
        gpu = Gpu(host, index, uuid, pci_bus_id=f"00000000:{0x18 + index:02X}:00.0", **kw)
        self.gpus[(host, index)] = gpu
        return gpu

    def set(self, host: str, index: int, metric: str, value: float) -> float:
        """Change one series; returns the moment of the change (time.monotonic())."""
        if metric not in DCGM_FIELDS:
            raise KeyError(metric)
        self.gpus[(host, index)].values[metric] = value
        return time.monotonic()

    async def restart(self, host: str, *, scrapes: int = 3) -> None:
        """An exporter restart on `host`: its series vanish for `scrapes` scrapes and come back with the Xid
        gauge at 0 (a restarted embedded hostengine has seen no Xid yet); counters keep their totals."""
        gpus = [g for (h, _), g in self.gpus.items() if h == host]
        for gpu in gpus:
            gpu.hidden = True
        await self.scraped(scrapes)
        for gpu in gpus:
            gpu.values["DCGM_FI_DEV_XID_ERRORS"] = 0
            gpu.hidden = False

    def render(self) -> str:
        lines: list[str] = []
        for name, (kind, help_text, _default) in DCGM_FIELDS.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for gpu in self.gpus.values():
                if gpu.hidden:
                    continue
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in gpu.series_labels(name).items())
                lines.append(f"{name}{{{labels}}} {gpu.values[name]:g}")
        return "\n".join(lines) + "\n"

    async def _metrics(self, _request: aiohttp.web.Request) -> aiohttp.web.Response:
        self.scrapes += 1
        return aiohttp.web.Response(text=self.render(), content_type="text/plain", charset="utf-8")

    async def scraped(self, times: int = 1, timeout: float = 15.0) -> None:
        """Wait until Prometheus has read the current series `times` more times."""
        target = self.scrapes + times
        await eventually(lambda: self.scrapes >= target, timeout=timeout, what=f"{times} scrape(s) of the exporter")


# ---------------------------------------------------------------------------------------------- receiver


@dataclass(frozen=True)
class Arrival:
    at: float  # time.monotonic()
    payload: dict[str, Any]

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        return [
            a for a in self.payload.get("alerts", [])
            if all(a.get("labels", {}).get(k) == v for k, v in labels.items())
        ]


class WebhookReceiver:
    """A bare Alertmanager webhook endpoint that records what arrives and when."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        app = aiohttp.web.Application()
        app.router.add_post("/hook", self._hook)
        self._server = _Server(app)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop()

    @property
    def url(self) -> str:
        return f"http://{self._server.address}/hook"

    async def _hook(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        at = time.monotonic()
        self.arrivals.append(Arrival(at, await request.json()))
        return aiohttp.web.Response(text="ok")

    def first(self, *, status: str = "firing", since: float = 0.0, **labels: str) -> Arrival | None:
        """The first arrival after `since` carrying an alert with `status` and `labels`."""
        for arrival in self.arrivals:
            if arrival.at >= since and any(a.get("status") == status for a in arrival.alerts(**labels)):
                return arrival
        return None


# ---------------------------------------------------------------------------------------------- processes


class Process:
    """A subprocess whose stdout and stderr a thread copies into `log` (a pipe, never a file it writes)."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log: Path, cwd: Path = ROOT) -> None:
        self.name = name
        self.args = args
        self.env = dict(env)
        self.log = log
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.args, env=self.env, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self._pump = threading.Thread(target=self._copy, args=(self.proc,), daemon=True, name=f"log-{self.name}")
        self._pump.start()

    def _copy(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with self.log.open("ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        if self._pump is not None:
            await asyncio.to_thread(self._pump.join, 5)
        self.proc = None


async def wait_http(proc: Process, url: str, *, timeout: float, ok: Callable[[httpx.Response], bool] | None = None,
                    what: str = "") -> None:
    """Wait until `url` answers (and `ok` accepts the answer); fail with the process's log if it exits."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        async def ready() -> bool:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited during start-up; log:\n{proc.tail()}")
            try:
                response = await client.get(url)
            except httpx.TransportError:
                return False
            return response.status_code == 200 and (ok is None or ok(response))

        try:
            await eventually(ready, timeout=timeout, what=what or f"{proc.name} at {url}", interval=0.05)
        except AssertionError as exc:
            raise RuntimeError(f"{exc}; {proc.name} log:\n{proc.tail()}") from None


class NodeSidecar(SidecarProcess):
    """The sidecar of one fake node: bound to the node's InternalIP on the port the controller dials."""

    def __init__(self, workdir: Path, env: dict[str, str], host: str, port: int) -> None:
        super().__init__(workdir, env)
        self.host = host
        self.port = port
        self.process = Process(
            f"sidecar-{host}",
            [sys.executable, "-c",
             "import sys\n"
             "from remediator.sidecar.app import serve\n"
             "from remediator.sidecar.settings import SidecarSettings\n"
             "serve(SidecarSettings(), sys.argv[1], int(sys.argv[2]))\n",
             host, str(port)],
            env, workdir / "sidecar.log",
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start_async(self) -> None:
        self.process.start()
        await wait_http(self.process, self.url + "/healthz", timeout=30)

    async def stop_async(self) -> None:
        await self.process.stop()


# ---------------------------------------------------------------------------------------------- the stack


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATOR_") and k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@dataclass
class Stack:
    """Exporter -> Prometheus -> Alertmanager -> `remediator serve` -> FakeKube (and a node sidecar)."""

    workdir: Path
    controller_env: dict[str, str] = field(default_factory=dict)
    sidecar_ip: str | None = None
    group_interval: str = "200ms"
    repeat_interval: str = "1s"
    fake: FakeKube = field(default_factory=lambda: FakeKube(clock_scale=0.001))
    exporter: DcgmExporter = field(default_factory=DcgmExporter)
    bare: WebhookReceiver = field(default_factory=WebhookReceiver)
    sidecar: SidecarEnv | None = None
    controller_port: int = 0
    controller: Process | None = None
    alertmanager_url: str = ""
    prometheus_url: str = ""
    processes: list[Process] = field(default_factory=list)
    _fake_serving: bool = False
    _kubelet: grpc.Server | None = None
    _http: httpx.AsyncClient | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        prometheus = find_binary("prometheus")
        alertmanager = find_binary("alertmanager", "prometheus-alertmanager")
        self.workdir.mkdir(parents=True, exist_ok=True)
        await self.fake.__aenter__()
        self._fake_serving = True
        await self.exporter.start()
        await self.bare.start()
        sidecar_port = free_port()
        if self.sidecar_ip is not None:
            await self._start_sidecar(sidecar_port)
        await self._start_controller(sidecar_port)
        am_port = await self._start_alertmanager(alertmanager)
        await self._start_prometheus(prometheus, am_port)

    async def stop(self) -> None:
        for proc in reversed(self.processes):
            await proc.stop()
        if self.sidecar is not None:
            assert isinstance(self.sidecar.sidecar, NodeSidecar)
            await self.sidecar.sidecar.stop_async()
        if self._kubelet is not None:
            self._kubelet.stop(grace=None)
        if self._http is not None:
            await self._http.aclose()
        await self.bare.stop()
        await self.exporter.stop()
        if self._fake_serving:
            self._fake_serving = False
            await self.fake.__aexit__(None, None, None)

    def _process(self, name: str, args: list[str], env: Mapping[str, str]) -> Process:
        proc = Process(name, args, env, self.workdir / f"{name}.log")
        self.processes.append(proc)
        proc.start()
        return proc

    async def _start_sidecar(self, port: int) -> None:
        assert self.sidecar_ip is not None
        env = make_env(self.workdir / "sidecar", build_fake_nvml())
        node_sidecar = NodeSidecar(env.dir, env.sidecar.env, self.sidecar_ip, port)
        self.sidecar = dataclasses.replace(env, sidecar=node_sidecar)
        self._kubelet = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(env.kubelet, self._kubelet)
        self._kubelet.add_insecure_port(f"unix://{env.kubelet.socket_path}")
        self._kubelet.start()
        self.sidecar.reset()
        await node_sidecar.start_async()

    async def _start_controller(self, sidecar_port: int) -> None:
        self.controller_port = free_port()
        env = _clean_env({
            "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{self.workdir / 'controller.db'}",
            "REMEDIATOR_KUBECONFIG": str(kubeconfig(self.workdir / "kubeconfig", self.fake.url)),
            "REMEDIATOR_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "REMEDIATOR_SIDECAR_PORT": str(sidecar_port),
            "REMEDIATOR_SIDECAR_TOKEN": SIDECAR_TOKEN,
            "REMEDIATOR_PUBLIC_URL": f"http://127.0.0.1:{self.controller_port}",
            **self.controller_env,
        })
        proc = self._process(
            "controller",
            [sys.executable, "-m", "remediator.cli", "serve", "--host", "127.0.0.1", "--port",
             str(self.controller_port)],
            env,
        )
        self.controller = proc
        self._http = httpx.AsyncClient(
            base_url=self.controller_url, timeout=10.0, headers={"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
        )
        await wait_http(proc, f"{self.controller_url}/readyz", timeout=60)

    async def _start_alertmanager(self, binary: str) -> int:
        port = free_port()
        token_file = self.workdir / "webhook-token"
        token_file.write_text(WEBHOOK_TOKEN + "\n")
        config = alertmanager_overlay(
            SHIPPED_ALERTMANAGER, self.workdir / "alertmanager.yml",
            controller_url=f"{self.controller_url}/api/v1/alerts", token_file=token_file, bare_url=self.bare.url,
            group_interval=self.group_interval, repeat_interval=self.repeat_interval,
        )
        self.alertmanager_url = f"http://127.0.0.1:{port}"
        proc = self._process(
            "alertmanager",
            [binary, f"--config.file={config}", f"--storage.path={self.workdir / 'alertmanager-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
             f"--web.external-url={self.alertmanager_url}"],
            _clean_env({}),
        )
        await wait_http(proc, f"{self.alertmanager_url}/-/ready", timeout=30)
        return port

    async def _start_prometheus(self, binary: str, am_port: int) -> None:
        port = free_port()
        rules = shorten_rules(SHIPPED_RULES, self.workdir / "rules.yml")
        config = prometheus_config(
            self.workdir / "prometheus.yml", exporter=self.exporter.address, alertmanager=f"127.0.0.1:{am_port}",
            rules=rules, sidecar=self._sidecar_address(),
        )
        self.prometheus_url = f"http://127.0.0.1:{port}"
        proc = self._process(
            "prometheus",
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--web.external-url={self.prometheus_url}",
             # an alert's new value/annotations reach Alertmanager at the next resend (default 1m)
             "--rules.alert.resend-delay=1s"],
            _clean_env({}),
        )
        await wait_http(proc, f"{self.prometheus_url}/-/ready", timeout=30)

        def scraping(r: httpx.Response) -> bool:
            targets = r.json()["data"]["activeTargets"]
            return any(t["health"] == "up" for t in targets)

        def discovered(r: httpx.Response) -> bool:
            return bool(r.json()["data"]["activeAlertmanagers"])

        await wait_http(proc, f"{self.prometheus_url}/api/v1/targets", timeout=30, ok=scraping,
                        what="Prometheus's first scrape of the exporter")
        await wait_http(proc, f"{self.prometheus_url}/api/v1/alertmanagers", timeout=30, ok=discovered,
                        what="Prometheus to discover Alertmanager")

    def _sidecar_address(self) -> str | None:
        if self.sidecar is None:
            return None
        return f"{self.sidecar.sidecar.host}:{self.sidecar.sidecar.port}"

    # -- the controller ----------------------------------------------------------------------------

    @property
    def controller_url(self) -> str:
        return f"http://127.0.0.1:{self.controller_port}"

    def controller_log(self) -> str:
        return self.controller.tail() if self.controller is not None else ""

    @property
    def api(self) -> httpx.AsyncClient:
        assert self._http is not None
        return self._http

    async def remediations(self, **query: str) -> list[dict[str, Any]]:
        response = await self.api.get("/api/v1/remediations", params=query)
        response.raise_for_status()
        return list(response.json())

    async def remediation(self, rem_id: str) -> dict[str, Any]:
        response = await self.api.get(f"/api/v1/remediations/{rem_id}")
        response.raise_for_status()
        return dict(response.json())

    async def remediation_in(self, node: str, states: set[str], timeout: float = 30.0) -> dict[str, Any]:
        """Wait for the only remediation of `node` to reach one of `states`; returns its detail."""

        async def check() -> dict[str, Any] | None:
            rems = await self.remediations(node=node)
            assert len(rems) <= 1, f"more than one remediation for {node}: {rems}"
            return await self.remediation(rems[0]["id"]) if rems and rems[0]["state"] in states else None

        try:
            return await eventually(check, timeout=timeout, what=f"a remediation of {node} in {sorted(states)}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; remediations: {await self.remediations(node=node)}; "
                                 f"controller log:\n{self.controller_log()}") from None

    async def controller_metric(self, name: str, **labels: str) -> float:
        """Sum of the controller's /metrics samples called `name` that carry `labels`."""
        response = await self.api.get("/metrics")
        return _sum_samples(response.text, name, labels)

    async def alertmanager_metric(self, name: str, **labels: str) -> float:
        async with httpx.AsyncClient(timeout=5.0) as client:
            response = await client.get(f"{self.alertmanager_url}/metrics")
        return _sum_samples(response.text, name, labels)

    @contextlib.contextmanager
    def store_unavailable(self) -> Iterator[None]:
        """The controller's disk refuses writes (RLIMIT_FSIZE 0 on its process) until the block ends.

        SQLite then fails every commit with an I/O error, which the controller reports as its store being
        unavailable (503); reads and the process itself are untouched, so nothing restarts.
        """
        assert self.controller is not None
        pid = self.controller.pid
        soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, hard))
        try:
            yield
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))

    # -- the cluster ---------------------------------------------------------------------------------

    def taints(self, node: str) -> list[dict[str, Any]]:
        obj = self.fake.node(node) or {}
        return [
            {k: t.get(k) for k in ("key", "value", "effect")} for t in obj.get("spec", {}).get("taints") or []
        ]

    def cordoned(self, node: str) -> bool:
        return bool((self.fake.node(node) or {}).get("spec", {}).get("unschedulable"))


def _sum_samples(text: str, name: str, labels: Mapping[str, str]) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
