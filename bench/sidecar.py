"""Benchmark: GET /v1/gpus through the sidecar for 8 fake GPUs, next to the raw NVML reads it makes.

Builds the fake libnvidia-ml.so.1 (tests/sidecar/fakenvml), re-executes itself with LD_LIBRARY_PATH
pointing at it (the loader reads that variable only at start), then in one process times
`inventory.snapshot_all` on the real pynvml bindings and GET /v1/gpus on a sidecar served by uvicorn on
127.0.0.1 in a thread. Measures only; prints JSON.

    .venv/bin/python bench/sidecar.py [--gpus 8] [--requests 500]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._machine import describe  # noqa: E402
from tests.sidecar.fakenvml import FakeNvml, build, h200_state  # noqa: E402


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1], 3),
        "p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 3),
        "min_ms": round(ordered[0], 3),
    }


def measure(gpus: int, requests: int) -> dict[str, object]:
    import httpx
    import uvicorn

    from remediator.sidecar.app import create_app
    from remediator.sidecar.inventory import snapshot_all
    from remediator.sidecar.nvml import Nvml
    from remediator.sidecar.settings import SidecarSettings

    nvml = Nvml()
    nvml.init()
    for _ in range(20):
        snapshot_all(nvml)
    raw = []
    for _ in range(requests):
        start = time.perf_counter()
        snapshot_all(nvml)
        raw.append((time.perf_counter() - start) * 1e3)

    tmp = Path(tempfile.mkdtemp())
    settings = SidecarSettings(
        sidecar_token="bench", state_file=tmp / "state.json", podresources_socket=tmp / "none"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    http = []
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer bench"}
    ) as client:
        for _ in range(20):
            assert len(client.get("/v1/gpus").json()["gpus"]) == gpus
        for _ in range(requests):
            start = time.perf_counter()
            client.get("/v1/gpus").raise_for_status()
            http.append((time.perf_counter() - start) * 1e3)
    server.should_exit = True
    thread.join(timeout=10)
    return {
        "gpus": gpus,
        "requests": requests,
        "raw_nvml_snapshot_all": summary(raw),
        "http_get_v1_gpus": summary(http),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    lib_dir = str(build())
    if os.environ.get("LD_LIBRARY_PATH") != lib_dir:
        state = Path(tempfile.mkdtemp()) / "nvml-state.txt"
        FakeNvml(state).write(h200_state(args.gpus))
        # Described before the fake library is on the loader's path, so nvidia-smi reports the real GPUs.
        env = {**os.environ, "LD_LIBRARY_PATH": lib_dir, "FAKE_NVML_STATE": str(state),
               "BENCH_MACHINE": json.dumps(describe().as_dict())}
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    machine = json.loads(os.environ["BENCH_MACHINE"])
    print(json.dumps({"machine": machine, **measure(args.gpus, args.requests)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
