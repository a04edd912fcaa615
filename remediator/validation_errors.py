"""422 answers for requests that fail validation, naming the field and safe to encode whatever was sent.

Python's JSON parser accepts `NaN`, `Infinity` and `-Infinity`, which strict JSON cannot encode; an error
answer that echoes such an input fails in its own handler (a 500, or a reset connection). The controller
API and the node sidecar build their 422 bodies here: every failing field is named, and every non-finite
number in the echoed details is replaced by its text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from remediator.domain.json_values import JsonObject, JsonValue

__all__ = ["field_of", "invalid_request", "json_safe"]

_LOCATIONS = ("body",)


def json_safe(value: object) -> JsonValue:
    """`value` with NaN/Infinity replaced by "NaN"/"Infinity"/"-Infinity" (already JSON-encodable otherwise:
    anything else that is not JSON is written as its string)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)


def field_of(loc: Sequence[object]) -> str:
    """`("body", "watts")` -> `watts`; `("query", "limit")` -> `query.limit`; list indexes as `[0]`."""
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS and len(parts) > 1:
        parts = parts[1:]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _loc(error: Mapping[str, object]) -> Sequence[object]:
    loc = error.get("loc")
    return loc if isinstance(loc, list | tuple) else ()


def invalid_request(errors: Sequence[Mapping[str, object]], limit: int = 20) -> JsonObject:
    """`{error, errors: [{field, message, type}], detail}` for a list of pydantic/FastAPI errors.

    `errors` should already be JSON-encodable apart from non-finite numbers (FastAPI's `jsonable_encoder`).
    """
    named: list[JsonValue] = [
        {"field": field_of(_loc(e)), "message": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in list(errors)[:limit]
    ]
    first = errors[0] if errors and limit > 0 else None
    error = (f"invalid request: {field_of(_loc(first))}: {first.get('msg', '')}" if first is not None
             else "invalid request")
    return {"error": error, "errors": named, "detail": json_safe(list(errors)[:limit])}
