"""Load-time checks of a step's parameters against its action's pydantic `Params` model.

The action models are injected by the caller (definitions import no action code). Keys the model does not
know and required fields that are absent are always errors; a literal value is validated by the model now,
while a value holding a template can only be validated after rendering, at run time.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from remediator.definitions.source import Path
from remediator.definitions.templates import is_template

__all__ = ["ParamProblem", "check_params", "deprecated_params"]

ParamProblem = tuple[Path, str]


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """Accepted key (name or alias) -> field name."""
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        names[name] = name
        if info.alias:
            names[info.alias] = name
        if isinstance(info.validation_alias, str):
            names[info.validation_alias] = name
    for old_key, (new_key, _why) in _deprecated_keys(model).items():
        if new_key in model.model_fields:
            names.setdefault(old_key, new_key)
    return names


def _deprecated_keys(model: type[BaseModel]) -> dict[str, tuple[str, str]]:
    """A Params model's `deprecated_keys`: old key -> (the key now, why it was renamed)."""
    keys = getattr(model, "deprecated_keys", None)
    return dict(keys) if isinstance(keys, Mapping) else {}


def deprecated_params(action: str, model: type[BaseModel], params: Mapping[str, object]) -> list[ParamProblem]:
    """Warnings as (path below `params`, message) for old parameter names that still work."""
    warnings: list[ParamProblem] = []
    for old_key, (new_key, why) in _deprecated_keys(model).items():
        if old_key in params:
            message = f"parameter {old_key!r} of action {action!r} is deprecated: write {new_key!r} ({why})"
            warnings.append(((old_key,), message))
    return warnings


def check_params(action: str, model: type[BaseModel], params: Mapping[str, object]) -> list[ParamProblem]:
    """Problems as (path below `params`, message); empty when the parameters fit the model."""
    problems: list[ParamProblem] = []
    accepted = _field_names(model)
    for key in params:
        if key not in accepted:
            known = ", ".join(sorted(model.model_fields)) or "none"
            message = f"unknown parameter {key!r} for action {action!r} (known: {known})"
            problems.append(((str(key),), message))
    given = {accepted[k] for k in params if k in accepted}
    for name, info in model.model_fields.items():
        if info.is_required() and name not in given:
            problems.append(((name,), f"missing required parameter {name!r} for action {action!r}"))
    templated = {str(k) for k, v in params.items() if is_template(v)}
    literal = {str(k): v for k, v in params.items() if k in accepted and str(k) not in templated}
    if not literal:
        return problems
    try:
        model.model_validate(literal)
    except ValidationError as exc:
        for err in exc.errors():
            loc = err.get("loc", ())
            if not loc or err["type"] in ("missing", "extra_forbidden"):
                continue  # reported above, or a whole-model check that needs the templated values too
            key = str(loc[0])
            if key not in literal:
                continue
            message = str(err["msg"]).removeprefix("Value error, ")
            path: Path = tuple(p if isinstance(p, int) else str(p) for p in loc)
            problems.append((path, f"invalid value for {action} parameter {key!r}: {message}"))
    return problems
