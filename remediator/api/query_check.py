"""Query parameters a list endpoint does not take are refused, not ignored.

A misspelt or unsupported filter (`?gpu_uuid=`, `?nodes=`) used to be dropped silently, so the answer was the
whole list (or an empty one) and looked like a real result. `KnownQuery` answers 422 naming every such
parameter and the ones the endpoint takes; it reads them from the route's own declaration, so a filter added
to an endpoint is accepted without touching this list.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Depends, HTTPException, Request
from fastapi.dependencies.models import Dependant

__all__ = ["KnownQuery", "known_query"]


def _query_names(dependant: Dependant) -> Iterator[str]:
    for param in dependant.query_params:
        yield param.alias
    for sub in dependant.dependencies:
        yield from _query_names(sub)


async def known_query(request: Request) -> None:
    """422 when the request carries a query parameter its route does not declare."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if not isinstance(dependant, Dependant):
        return
    known = sorted(set(_query_names(dependant)))
    unknown = sorted({name for name in request.query_params if name not in known})
    if unknown:
        takes = ", ".join(known) if known else "none"
        raise HTTPException(
            422, f"unknown query parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; this endpoint "
                 f"takes: {takes}",
        )


KnownQuery = Depends(known_query)
