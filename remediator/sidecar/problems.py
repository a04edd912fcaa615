"""HTTP answers for everything the sidecar can refuse or fail at, as `{error, nvml_error, ...}` JSON.

NVML failures arrive as `NvmlError` codes; `from_nvml` turns each into the status a caller can act on
(501 cannot, 403 not allowed, 410 GPU lost, 503 NVML not there), so no NVML failure is a bare 500.
"""

from __future__ import annotations

from remediator.domain.json_values import JsonObject
from remediator.errors import RemediatorError
from remediator.sidecar.nvml import NvmlError
from remediator.sidecar.schemas import ProblemAnswer

__all__ = ["Problem", "from_nvml", "status_for_nvml"]

_STATUS_BY_NVML_NAME = {
    "NOT_SUPPORTED": 501,
    "FUNCTION_NOT_FOUND": 501,
    "NO_PERMISSION": 403,
    "GPU_IS_LOST": 410,
    "NOT_FOUND": 404,
    "GPU_NOT_FOUND": 404,
    "INVALID_ARGUMENT": 422,
    "ARGUMENT_VERSION_MISMATCH": 422,
    "IN_USE": 409,
    "RESET_REQUIRED": 409,
    "UNINITIALIZED": 503,
    "LIBRARY_NOT_FOUND": 503,
    "DRIVER_NOT_LOADED": 503,
    "LIB_RM_VERSION_MISMATCH": 503,
    "NOT_READY": 503,
    "TIMEOUT": 504,
}


class Problem(RemediatorError):
    """An answer other than 2xx, with a JSON body that says why."""

    def __init__(
        self, status: int, error: str, *, nvml_error: str | None = None, details: JsonObject | None = None
    ) -> None:
        self.status = status
        self.error = error
        self.nvml_error = nvml_error
        self.details = details or {}
        super().__init__(error)

    def body(self) -> ProblemAnswer:
        return ProblemAnswer(error=self.error, nvml_error=self.nvml_error, **self.details)


def status_for_nvml(exc: NvmlError) -> int:
    """The HTTP status for an NVML failure (502: the device answered with an error we cannot classify)."""
    return _STATUS_BY_NVML_NAME.get(exc.name, 502)


def from_nvml(exc: NvmlError, what: str) -> Problem:
    """A Problem for an NVML failure while doing `what`."""
    return Problem(status_for_nvml(exc), f"{what}: {exc}", nvml_error=exc.name)
