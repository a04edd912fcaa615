"""The sidecar's HTTP API: app factory, routes, auth and error answers.

Routes stay thin: each hands one blocking function to the NVML thread (inventory, power, reset) or
awaits the kubelet client, and turns `Problem`/`NvmlError` into JSON answers. `create_app` takes the
NVML wrapper and the PodResources client as arguments so tests can swap either; `serve` is what
`remediator sidecar` runs.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, TypeVar

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from remediator.domain.json_values import JsonObject
from remediator.errors import GpuNotFound
from remediator.sidecar.bugreport import BugReporter
from remediator.sidecar.checkpoint import read_device_owners
from remediator.sidecar.detector_service import DetectorService
from remediator.sidecar.gate import Gate
from remediator.sidecar.identity import read_identity
from remediator.sidecar.inventory import find_handle, identities, snapshot, snapshot_all
from remediator.sidecar.metrics import SidecarMetrics
from remediator.sidecar.nvml import Nvml, NvmlError
from remediator.sidecar.podresources import PodResourcesClient
from remediator.sidecar.pods import PodQuery, gpu_pods
from remediator.sidecar.power import restore_power_limit, set_power_limit
from remediator.sidecar.problems import Problem, from_nvml
from remediator.sidecar.reset import ResetConfig, reset_gpu
from remediator.sidecar.schemas import (
    DiagnosticsReport,
    DiagnosticsRequest,
    DryRunRequest,
    GpuIdentity,
    GpuInventory,
    GpuPods,
    GpuSnapshot,
    Health,
    PowerLimitAnswer,
    PowerLimitRequest,
    PowerRestoreAnswer,
    ProblemAnswer,
    ResetAnswer,
    ResetRequest,
    ValidateRequest,
    ValidationReport,
)
from remediator.sidecar.settings import SidecarSettings
from remediator.sidecar.state import PowerStateStore
from remediator.sidecar.worker import NvmlWorker
from remediator.validation_errors import invalid_request

__all__ = ["UUID_PATTERN", "create_app", "serve"]

log = logging.getLogger(__name__)

T = TypeVar("T")

UUID_PATTERN = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,64}$")


@dataclass
class Sidecar:
    """Everything the routes share."""

    settings: SidecarSettings
    nvml: Nvml
    worker: NvmlWorker
    store: PowerStateStore
    podresources: PodResourcesClient
    metrics: SidecarMetrics
    reset: ResetConfig
    pods: PodQuery
    gate: Gate
    bug_reports: BugReporter
    # Tells the node detector that a reset of a GPU (by UUID) succeeded; set once the detector exists.
    reset_succeeded: Callable[[str], None] | None = None

    async def call(self, what: str, work: Callable[[Nvml], T]) -> T:
        """Run `work` on the NVML thread (initialising NVML first if needed), mapping its errors."""

        def run() -> T:
            if not self.nvml.initialized:
                self.nvml.init()
            return work(self.nvml)

        try:
            return await self.worker.run(run)
        except NvmlError as exc:
            raise from_nvml(exc, what) from None
        except GpuNotFound as exc:
            raise Problem(404, f"no GPU with UUID {exc} on this node") from None


def _sidecar(request: Request) -> Sidecar:
    sidecar: Sidecar = request.app.state.sidecar
    return sidecar


SidecarDep = Annotated[Sidecar, Depends(_sidecar)]


def _authorize(request: Request, sidecar: SidecarDep) -> None:
    """Bearer token: always for mutations (refused outright when no token is configured), for reads
    whenever a token is configured."""
    token = sidecar.settings.sidecar_token
    mutation = request.method not in ("GET", "HEAD")
    if token is None:
        if mutation:
            raise Problem(401, "mutations are disabled: REMEDIATOR_SIDECAR_TOKEN is not set on this sidecar")
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Problem(401, "missing or wrong bearer token")


def _valid_uuid(uuid: str) -> str:
    if not UUID_PATTERN.fullmatch(uuid):
        raise Problem(422, f"not a GPU or MIG UUID: {uuid[:80]!r} (expected GPU-... or MIG-...)")
    return uuid


Uuid = Annotated[str, Depends(_valid_uuid)]


def _valid_gpu(gpu: str) -> str:
    """A GPU UUID or a decimal GPU index."""
    if gpu.isdigit() and len(gpu) <= 4:
        return gpu
    if not UUID_PATTERN.fullmatch(gpu) or gpu.startswith("MIG-"):
        raise Problem(422, f"not a GPU UUID or index: {gpu[:80]!r} (expected GPU-... or 0, 1, ...)")
    return gpu


GpuId = Annotated[str, Depends(_valid_gpu)]


def _routes() -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(_authorize)])
    # Answers carry the fields their route set, no others (remediator.sidecar.schemas).

    @router.get("/gpus", response_model_exclude_unset=True)
    async def list_gpus(sidecar: SidecarDep) -> GpuInventory:
        def work(nvml: Nvml) -> tuple[str, str, list[JsonObject]]:
            return nvml.driver_version(), nvml.nvml_version(), snapshot_all(nvml)

        driver_version, nvml_version, gpus = await sidecar.call("read GPU inventory", work)
        originals = sidecar.store.load()
        for gpu in gpus:
            saved = originals.get(str(gpu.get("uuid", "")))
            gpu["power_limit_original_watts"] = None if saved is None else saved / 1000
        sidecar.metrics.observe_gpus(gpus)
        return GpuInventory.model_validate(
            {"driver_version": driver_version, "nvml_version": nvml_version, "gpus": gpus}
        )

    @router.get("/gpus/{uuid}", response_model_exclude_unset=True)
    async def one_gpu(uuid: Uuid, sidecar: SidecarDep) -> GpuSnapshot:
        gpu = await sidecar.call(f"read GPU {uuid}", lambda nvml: snapshot(nvml, find_handle(nvml, uuid)))
        saved = sidecar.store.original_mw(uuid)
        gpu["power_limit_original_watts"] = None if saved is None else saved / 1000
        return GpuSnapshot.model_validate(gpu)

    @router.get("/gpus/{uuid}/pods", response_model_exclude_unset=True)
    async def pods_of_gpu(
        uuid: Uuid, sidecar: SidecarDep, gpu_instance: Annotated[int | None, Query(ge=0, le=255)] = None
    ) -> GpuPods:
        """Pods of a GPU or MIG device; with `gpu_instance` (a GPU's UUID and the `GPU-I` id an Xid line
        names), only those of that GPU instance's MIG device."""
        allocations = await sidecar.podresources.list()

        def work(nvml: Nvml) -> GpuPods:
            for gpu in identities(nvml):
                if uuid == gpu.uuid or uuid in gpu.mig_uuids:
                    handle = nvml.handle_by_index(gpu.index)
                    wanted = uuid
                    if gpu_instance is not None:
                        mig = nvml.mig_device_of_instance(handle, gpu_instance) if uuid == gpu.uuid else None
                        if mig is None:
                            raise Problem(404, f"GPU {uuid} has no MIG device of GPU instance {gpu_instance}")
                        wanted = mig
                    processes = nvml.compute_processes(handle)
                    owners = read_device_owners(sidecar.settings.device_checkpoint)
                    return GpuPods.model_validate(
                        gpu_pods(sidecar.pods, gpu, wanted, allocations, owners, processes)
                    )
            raise GpuNotFound(uuid)

        return await sidecar.call(f"map pods of {uuid}", work)

    @router.post("/gpus/{uuid}/power-limit", response_model_exclude_unset=True)
    async def power_limit(uuid: Uuid, body: PowerLimitRequest, sidecar: SidecarDep) -> PowerLimitAnswer:
        return await sidecar.call(
            f"set power limit of {uuid}", lambda nvml: set_power_limit(nvml, sidecar.store, uuid, body)
        )

    @router.post("/gpus/{uuid}/power-limit/restore", response_model_exclude_unset=True)
    async def power_limit_restore(
        uuid: Uuid, sidecar: SidecarDep, body: DryRunRequest | None = None
    ) -> PowerRestoreAnswer:
        dry_run = body.dry_run if body else False
        return await sidecar.call(
            f"restore power limit of {uuid}",
            lambda nvml: restore_power_limit(nvml, sidecar.store, uuid, dry_run),
        )

    @router.post("/gpus/{uuid}/reset", response_model_exclude_unset=True)
    async def reset(uuid: Uuid, sidecar: SidecarDep, body: ResetRequest | None = None) -> ResetAnswer:
        dry_run = body.dry_run if body else False
        persistence_off = body.persistence_off if body else False
        answer = await sidecar.call(
            f"reset {uuid}",
            lambda nvml: reset_gpu(nvml, sidecar.reset, uuid, dry_run, persistence_off=persistence_off),
        )
        if answer.changed and answer.healthy and sidecar.reset_succeeded is not None:
            sidecar.reset_succeeded(uuid)  # the driver initialised the GPU again: an earlier init failure is past
        return answer

    @router.get("/gpus/{gpu}/identity")
    async def identity(gpu: GpuId, sidecar: SidecarDep) -> GpuIdentity:
        return await sidecar.call(f"read the identity of GPU {gpu}", lambda nvml: read_identity(nvml, gpu))

    @router.post("/gpus/{gpu}/validate")
    async def validate(gpu: GpuId, sidecar: SidecarDep, body: ValidateRequest | None = None) -> ValidationReport:
        return await sidecar.gate.validate(sidecar.call, gpu, body or ValidateRequest())

    @router.post("/diagnostics")
    async def diagnostics(sidecar: SidecarDep, body: DiagnosticsRequest | None = None) -> DiagnosticsReport:
        return await sidecar.bug_reports.collect(body or DiagnosticsRequest())

    return router


def _install_handlers(app: FastAPI, metrics: SidecarMetrics) -> None:
    @app.exception_handler(Problem)
    async def problem(request: Request, exc: Problem) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body().model_dump(mode="json"), status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Names the field; NaN/Infinity in the echoed input are text, so this answer always encodes.
        body = ProblemAnswer.model_validate({"nvml_error": None, **invalid_request(jsonable_encoder(exc.errors()))})
        return JSONResponse(body.model_dump(mode="json"), status_code=422)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.latency.labels(request.method, route).observe(time.perf_counter() - start)
        metrics.requests.labels(request.method, route, str(response.status_code)).inc()
        return response


def create_app(
    settings: SidecarSettings,
    nvml: Nvml | None = None,
    podresources: PodResourcesClient | None = None,
) -> FastAPI:
    """The sidecar app; `nvml` and `podresources` default to the real ones built from `settings`."""
    metrics = SidecarMetrics()
    sidecar = Sidecar(
        settings=settings,
        nvml=nvml or Nvml(observer=metrics.observe_nvml),
        worker=NvmlWorker(),
        store=PowerStateStore(settings.state_file),
        podresources=podresources
        or PodResourcesClient(settings.podresources_socket, timeout=settings.podresources_timeout),
        metrics=metrics,
        reset=ResetConfig(
            method=settings.reset_method,
            nvidia_smi=settings.nvidia_smi,
            timeout=settings.reset_timeout,
            proc_root=settings.proc_root,
            settle_seconds=settings.reset_settle_seconds,
        ),
        pods=PodQuery(
            strategy=settings.device_id_strategy,
            resource_prefix=settings.gpu_resource_prefix,
            proc_root=settings.proc_root,
        ),
        gate=Gate(settings.dcgmi, settings.dcgm_diag_timeout),
        bug_reports=BugReporter(
            settings.nvidia_bug_report,
            settings.diagnostics_dir,
            settings.diagnostics_timeout,
            settings.diagnostics_max_bytes,
        ),
    )

    detector = DetectorService(settings, sidecar.nvml, sidecar.worker, sidecar.podresources, metrics)
    sidecar.gate.init_failure = detector.detector.init_failure
    sidecar.reset_succeeded = detector.detector.reset_succeeded

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await sidecar.worker.run(sidecar.nvml.init)
        except NvmlError as exc:
            log.error("NVML is not available (%s); /healthz answers 503 until it is", exc)
        await detector.start()
        yield
        await detector.stop()
        await sidecar.podresources.close()
        try:
            await sidecar.worker.run(sidecar.nvml.shutdown)
        except NvmlError as exc:
            log.warning("NVML shutdown failed: %s", exc)
        sidecar.worker.close()

    app = FastAPI(title="gpu-remediator sidecar", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.sidecar = sidecar
    app.state.detector = detector
    _install_handlers(app, metrics)
    app.include_router(_routes())

    @app.get("/healthz")
    async def healthz() -> Health:
        # Any NVML failure here means NVML is not usable: 503, whatever status the same error gets on the
        # API routes (an unclassified one is a 502 there); the body still names the NVML error.
        try:
            count = await sidecar.call("NVML health", lambda n: n.device_count())
        except Problem as exc:
            raise Problem(503, exc.error, nvml_error=exc.nvml_error, details=exc.details) from None
        return Health(status="ok", gpus=count)

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        try:
            gpus = await sidecar.call("read GPU inventory", snapshot_all)
            metrics.observe_gpus(gpus)
        except Problem as exc:
            log.warning("metrics: inventory unavailable: %s", exc.error)
        await detector.refresh()
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


def serve(settings: SidecarSettings, host: str, port: int) -> None:
    """Run the sidecar until interrupted (what `remediator sidecar` calls)."""
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")
