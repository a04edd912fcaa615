"""The controller's HTTP client for the node sidecars (remediator.sidecar.app).

One `httpx.AsyncClient` is injected (tests swap its transport); the sidecar address is built from the
node's InternalIP with `settings.sidecar_url_template` and `settings.sidecar_port`, and every request
carries the bearer `settings.sidecar_token`. Connection failures and 5xx are retried with backoff
(remediator.retrying's `attempts_with_backoff`); 4xx are final. httpx's exceptions are mapped in one place
(`map_exceptions`), and every non-2xx answer leaves as a `remediator.errors` class via `error_for_status`,
keeping the sidecar's JSON body (e.g. the process list of a 409) as `details`.
Reads take `attempts=1` where a caller has a fallback and would rather not wait (context gathering).
`for_settings` builds a client that owns its `httpx.AsyncClient`; `aclose` closes it.
Requests are built and answers parsed with the sidecar's own wire models (`remediator.sidecar.schemas`), so
every method takes and returns typed values; an answer that does not fit its model is an error here, not a
KeyError in an action.
The node address must be an IP address and a GPU UUID must look like one (GPU-... or MIG-...) before
either becomes part of a URL: anything else is refused as Invalid and never sent.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from remediator.adapters.mutations import Mutation, MutationRecorder
from remediator.domain.json_values import JsonObject
from remediator.errors import ActionError, Invalid, ServiceUnavailable, TemporaryError, error_for_status
from remediator.kube.object_names import gpu_uuid_problem
from remediator.retrying import attempts_with_backoff
from remediator.settings import Settings
from remediator.sidecar.schemas import (
    DiagnosticsReport,
    DiagnosticsRequest,
    DryRunRequest,
    GpuIdentity,
    GpuInventory,
    GpuPods,
    PowerLimitAnswer,
    PowerLimitRequest,
    PowerRestoreAnswer,
    ProblemAnswer,
    ResetAnswer,
    ResetRequest,
    ValidateRequest,
    ValidationReport,
)

__all__ = ["DEFAULT_TIMEOUT", "SidecarClient", "gpu_path", "map_exceptions"]

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)
DEPENDENCY = "node agent"  # how waiting remediations name this peer (remediator.retrying)
# A reset drains, detaches and rediscovers the GPU, then waits for it: allow minutes, not seconds.
RESET_TIMEOUT = httpx.Timeout(180.0, connect=3.0)
# What the sidecar may need beyond a DCGM diagnostic's or bug report's own time bound (NVML checks, hashing).
BOUNDED_RUN_MARGIN = 60.0

Answer = TypeVar("Answer", bound=BaseModel)


def _retry_any(exc: BaseException) -> bool:
    return isinstance(exc, ServiceUnavailable)


def _retry_unsent(exc: BaseException) -> bool:
    """For calls that must not run twice: retry only when the request never reached the sidecar."""
    return (
        isinstance(exc, ServiceUnavailable)
        and isinstance(exc.details, dict)
        and exc.details.get("sent") is False
    )


def _classified(error: ActionError) -> ActionError:
    """The one place this client classifies a failure (remediator.retrying): connection failures, timeouts,
    429 and 5xx are transient and name the node agent as the dependency; other 4xx are permanent."""
    if isinstance(error, TemporaryError):
        error.dependency = DEPENDENCY
    return error


@contextmanager
def map_exceptions(url: str) -> Iterator[None]:
    """The one place this client maps httpx's exceptions onto remediator.errors (httpx's own
    `_transports/default.py` `map_exceptions` is the model). A connection never made (refused, or timed out
    while connecting) is ServiceUnavailable with details `sent: False`, safe to send again even when the call
    must not run twice; any other transport failure is ServiceUnavailable `sent: True`. Both name the node
    agent as the dependency they wait for; the message keeps httpx's."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _classified(
            ServiceUnavailable(f"sidecar {url} unreachable: {exc!r}", details={"sent": False})
        ) from exc
    except httpx.TransportError as exc:
        raise _classified(
            ServiceUnavailable(f"sidecar {url} failed mid-request: {exc!r}", details={"sent": True})
        ) from exc


def _retry_after(raw: str | None) -> float | None:
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds > 0 else None


def _said(document: Mapping[str, object], status: int) -> str:
    """What a refusal says went wrong (a body that is not the sidecar's: its status)."""
    try:
        error = ProblemAnswer.model_validate(document).error
    except ValidationError:
        error = None
    return error or f"sidecar answered {status}"


class SidecarClient:
    """Typed calls to one node's sidecar, addressed by the node's InternalIP."""

    def __init__(
        self,
        settings: Settings,
        http: httpx.AsyncClient,
        *,
        attempts: int = 3,
        backoff_seconds: float = 0.5,
    ) -> None:
        self._settings = settings
        self._http = http
        self.recorder: MutationRecorder | None = None
        self._attempts = attempts
        self._backoff = backoff_seconds

    @classmethod
    def for_settings(cls, settings: Settings) -> SidecarClient:
        """A client with its own connection pool and the default timeouts (closed by `aclose`)."""
        return cls(settings, httpx.AsyncClient(timeout=DEFAULT_TIMEOUT))

    async def aclose(self) -> None:
        """Close the underlying HTTP client (its connections to every node's sidecar)."""
        await self._http.aclose()

    def base_url(self, ip: str) -> str:
        try:
            address = ipaddress.ip_address(ip.strip("[]"))
        except ValueError:
            raise Invalid(f"not a node IP address: {ip[:80]!r}; the sidecar is reached by InternalIP") from None
        host = f"[{address}]" if address.version == 6 else str(address)
        return self._settings.sidecar_url_template.format(ip=host, port=self._settings.sidecar_port)

    def address(self, ip: str) -> str:
        """`host:port` of the node's sidecar, as a person names it (e.g. in a page about an unreachable agent)."""
        return urlsplit(self.base_url(ip)).netloc

    def _headers(self) -> dict[str, str]:
        token = self._settings.sidecar_token
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def _once(
        self, method: str, url: str, body: BaseModel | None, limits: httpx.Timeout
    ) -> JsonObject:
        sent = None if body is None else body.model_dump(mode="json", exclude_none=True)
        with map_exceptions(url):
            response = await self._http.request(
                method, url, json=sent, headers=self._headers(), timeout=limits
            )
        try:
            document = response.json()
        except ValueError:
            document = {"error": response.text[:500]}
        if not isinstance(document, dict):
            document = {"result": document}
        if response.is_success:
            return document
        error = _classified(error_for_status(
            response.status_code, f"{method} {url}: {_said(document, response.status_code)}", details=document
        ))
        if isinstance(error, TemporaryError):
            error.retry_after = _retry_after(response.headers.get("Retry-After"))
        raise error

    async def _request(
        self,
        answer: type[Answer],
        method: str,
        ip: str,
        path: str,
        body: BaseModel | None = None,
        limits: httpx.Timeout = DEFAULT_TIMEOUT,
        idempotent: bool = True,
        attempts: int | None = None,
    ) -> Answer:
        """Send `body`, parse the answer into `answer`."""
        url = self.base_url(ip) + path
        try:
            result = await self._with_retries(method, url, body, limits, idempotent, attempts)
        except ActionError as exc:
            await self._report(method, ip, path, body, exc.status or 0, exc.message)
            raise
        await self._report(method, ip, path, body, 200, None)
        return answer.model_validate(result)

    async def _report(
        self, method: str, ip: str, path: str, body: BaseModel | None, status: int, error: str | None
    ) -> None:
        """Tell the recorder about a write (not reads, not dry runs)."""
        if self.recorder is None or method == "GET" or getattr(body, "dry_run", False):
            return
        await self.recorder(Mutation(method.lower(), f"sidecar{path}", None, ip, status, error))

    async def _with_retries(
        self,
        method: str,
        url: str,
        body: BaseModel | None,
        limits: httpx.Timeout,
        idempotent: bool,
        attempts: int | None,
    ) -> JsonObject:
        retrying = attempts_with_backoff(
            attempts or self._attempts, self._backoff, _retry_any if idempotent else _retry_unsent
        )
        async for attempt in retrying:
            with attempt:
                return await self._once(method, url, body, limits)
        raise ActionError(f"{method} {url}: no attempt made")  # pragma: no cover

    @staticmethod
    def _gpu(uuid: str) -> str:
        problem = gpu_uuid_problem(uuid)
        if problem is not None:
            raise Invalid(f"refused before calling the sidecar: {problem}", details={"field": "gpu_uuid"})
        return "/v1/gpus/" + quote(uuid, safe="")

    async def gpus(self, ip: str, *, attempts: int | None = None) -> GpuInventory:
        """The node's inventory: driver and NVML versions and every GPU."""
        return await self._request(GpuInventory, "GET", ip, "/v1/gpus", attempts=attempts)

    async def gpu_pods(
        self, ip: str, uuid: str, *, gpu_instance: int | None = None, attempts: int | None = None
    ) -> GpuPods:
        """Pods allocated the GPU (or MIG device), with `active` marking those running on it; with
        `gpu_instance`, only those of the MIG device of that GPU instance of the GPU `uuid`."""
        query = "" if gpu_instance is None else f"?gpu_instance={int(gpu_instance)}"
        return await self._request(GpuPods, "GET", ip, self._gpu(uuid) + "/pods" + query, attempts=attempts)

    async def set_power_limit(
        self,
        ip: str,
        uuid: str,
        *,
        watts: float | None = None,
        percent_of_default: float | None = None,
        dry_run: bool = False,
    ) -> PowerLimitAnswer:
        """Set the power limit (exactly one of watts / percent_of_default: a ValueError before anything is
        sent otherwise); answers previous/new watts."""
        body = PowerLimitRequest(dry_run=dry_run, watts=watts, percent_of_default=percent_of_default)
        return await self._request(PowerLimitAnswer, "POST", ip, self._gpu(uuid) + "/power-limit", body)

    async def restore_power_limit(self, ip: str, uuid: str, *, dry_run: bool = False) -> PowerRestoreAnswer:
        """Put back the limit remembered before the first change."""
        path = self._gpu(uuid) + "/power-limit/restore"
        return await self._request(PowerRestoreAnswer, "POST", ip, path, DryRunRequest(dry_run=dry_run))

    async def reset(self, ip: str, uuid: str, *, dry_run: bool = False, persistence_off: bool = False) -> ResetAnswer:
        """Reset the GPU (409 -> Conflict with details["processes"] while it is in use).

        Retried only when the request never reached the sidecar: a reset is not run twice by accident.
        """
        return await self._request(
            ResetAnswer,
            "POST",
            ip,
            self._gpu(uuid) + "/reset",
            ResetRequest(dry_run=dry_run, persistence_off=persistence_off),
            limits=RESET_TIMEOUT,
            idempotent=False,
        )

    async def validate(self, ip: str, gpu: str, request: ValidateRequest) -> ValidationReport:
        """Run the validation gate on one GPU (UUID or index); the answer says pass or fail and why.

        Waits as long as the DCGM diagnostic may take (`request.dcgm_timeout_seconds`, which the caller
        should set: the sidecar's own default is not known here) plus a margin. Retried only when the
        request never reached the sidecar: a level 2 diagnostic loads the GPU for minutes.
        """
        wait = (request.dcgm_timeout_seconds or 900.0) + BOUNDED_RUN_MARGIN
        return await self._request(
            ValidationReport,
            "POST",
            ip,
            gpu_path(gpu) + "/validate",
            request,
            limits=httpx.Timeout(wait, connect=3.0),
            idempotent=False,
        )

    async def identity(self, ip: str, gpu: str, *, attempts: int | None = None) -> GpuIdentity:
        """Serial, board part number, VBIOS, driver, remapped rows of one GPU (UUID or index); fields NVML
        could not read are null and named in `unreadable`."""
        if not (gpu.isdigit() and len(gpu) <= 4) and gpu_uuid_problem(gpu) is not None:
            raise Invalid(f"refused before calling the sidecar: not a GPU UUID or index: {gpu[:80]!r}",
                          details={"field": "gpu"})
        return await self._request(GpuIdentity, "GET", ip, gpu_path(gpu) + "/identity", attempts=attempts)

    async def collect_diagnostics(self, ip: str, request: DiagnosticsRequest) -> DiagnosticsReport:
        """Have the node run nvidia-bug-report.sh and keep the report; answers where it lies, or why not."""
        wait = (request.timeout_seconds or 600.0) + BOUNDED_RUN_MARGIN
        return await self._request(
            DiagnosticsReport,
            "POST",
            ip,
            "/v1/diagnostics",
            request,
            limits=httpx.Timeout(wait, connect=3.0),
            idempotent=False,
        )


def gpu_path(gpu: str) -> str:
    """`/v1/gpus/<gpu>` with the UUID or index quoted for a path."""
    return "/v1/gpus/" + quote(gpu, safe="")
