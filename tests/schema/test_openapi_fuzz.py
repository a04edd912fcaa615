"""schemathesis against the controller's own OpenAPI schema: no generated input gets a 5xx."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.settings import Settings

TOKEN = "fuzz-token"
_WORKDIR = Path(tempfile.mkdtemp(prefix="remediator-fuzz-"))
_SETTINGS = Settings(database_url=f"sqlite+aiosqlite:///{_WORKDIR / 'fuzz.db'}", webhook_token=[TOKEN])
_RUNTIME, _ENGINE = asyncio.run(build_runtime(_SETTINGS, connect_kube=False))
APP = create_app(_SETTINGS, runtime=_RUNTIME, run_worker=False)

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error])
