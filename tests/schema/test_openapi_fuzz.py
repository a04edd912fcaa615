"""schemathesis against the controller's own OpenAPI schema: no generated input gets a 5xx.

The app (and its SQLite database) is built per module by a fixture in pytest's temporary directory, so
collecting the tests builds nothing and leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.settings import Settings

TOKEN = "fuzz-token"


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[schemathesis.schemas.BaseSchema]:
    import asyncio

    workdir: Path = tmp_path_factory.mktemp("fuzz")
    config = Settings(database_url=f"sqlite+aiosqlite:///{workdir / 'fuzz.db'}", webhook_token=[TOKEN])
    runtime, engine = asyncio.run(build_runtime(config, connect_kube=False))
    app = create_app(config, runtime=runtime, run_worker=False)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    asyncio.run(engine.dispose())


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error])
