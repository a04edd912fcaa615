"""Read rules/, playbooks/ and the data files into a checked DefinitionSet, or report every problem at once.

Each problem is a DefinitionError carrying `file:line` and a field path, e.g.
`rules/gpu-xid.yaml:12: unknown playbook 'foo' (rules[2].playbook)`. The controller loads with
`load_definitions`; `remediator check` uses `check_paths`, which accepts any mix of files and directories
and tells rule files, playbook files, the Xid catalog and the alert-kind map apart by name and content.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ValidationError

from remediator.definitions.conditions import compile_condition
from remediator.definitions.datafiles import (
    ALERT_KINDS_FILE,
    XID_CATALOG_FILE,
    parse_alert_kinds,
    parse_xid_catalog,
)
from remediator.definitions.models import Playbook, Rule, Step
from remediator.definitions.params import check_params, deprecated_params
from remediator.definitions.source import Document, Problems, format_path, parse_yaml
from remediator.definitions.source import Path as DocPath
from remediator.definitions.templates import check_template
from remediator.definitions.xid import XidCatalog
from remediator.errors import ConditionError, DefinitionError, DefinitionSetError, TemplateProblem

__all__ = ["BUNDLED_PLAYBOOKS", "BUNDLED_RULES", "DefinitionSet", "check_paths", "load_definitions"]

BUNDLED_RULES = Path(__file__).resolve().parent.parent / "bundled" / "rules"
BUNDLED_PLAYBOOKS = Path(__file__).resolve().parent.parent / "bundled" / "playbooks"
_SUFFIXES = (".yaml", ".yml")
_M = TypeVar("_M", bound=BaseModel)
MAX_FILE_BYTES = 1024 * 1024  # a definition file larger than this is refused unread (setting definition_max_file_bytes)
log = logging.getLogger(__name__)
Role = Literal["rules", "playbooks", "auto"]
KnownActions = Mapping[str, type[BaseModel]]


@dataclass(frozen=True)
class DefinitionSet:
    """Everything the engine needs from the definition files, checked and typed."""

    rules: tuple[Rule, ...]
    playbooks: dict[str, Playbook]
    xid: XidCatalog
    alert_kinds: dict[str, str]
    version: str
    sources: dict[str, str] = field(default_factory=dict)


# -- pydantic errors -> document paths ---------------------------------------------------------------


def _doc_path(base: DocPath, data: object, loc: Sequence[int | str]) -> DocPath:
    """Follow a pydantic error location through the data, skipping union tags that are not in the file."""
    path = list(base)
    cur = data
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and part in cur:  # noqa: SIM114 - two branches, so each narrows `cur` for mypy
            path.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            path.append(part)
            cur = cur[part]
        elif i == len(loc) - 1 and isinstance(part, str) and isinstance(cur, dict):
            path.append(part)
    return tuple(path)


def _message(err: Mapping[str, object]) -> str:
    loc = err.get("loc", ())
    name = loc[-1] if isinstance(loc, tuple | list) and loc else ""
    if err["type"] == "missing":
        return f"missing required field {name!r}"
    if err["type"] == "extra_forbidden":
        return f"unknown field {name!r}"
    if err["type"] == "literal_error" and name == "off":
        return "revert must be false or a mapping {action, params}"
    return str(err["msg"]).removeprefix("Value error, ")


def _validate(model: type[_M], data: object, doc: Document, base: DocPath, problems: Problems) -> _M | None:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            problems.add(doc, _doc_path(base, data, err["loc"]), _message(err))
        return None


# -- files ---------------------------------------------------------------------------------------------


def _yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in _SUFFIXES)


def _strings(value: object, path: DocPath) -> Iterable[tuple[DocPath, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(v, (*path, str(k)))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i))


def _classify(doc: Document) -> Literal["rules", "playbooks"] | None:
    data = doc.data
    if isinstance(data, dict):
        if "rules" in data:
            return "rules"
        if "steps" in data or "playbooks" in data:
            return "playbooks"
        if "match" in data:
            return "rules"
        return None
    if isinstance(data, list) and data and all(isinstance(i, dict) for i in data):
        if all("steps" in i for i in data):
            return "playbooks"
        if all("match" in i or "playbook" in i for i in data):
            return "rules"
    return None


@dataclass
class _RuleAt:
    rule: Rule
    doc: Document
    path: DocPath


class _Builder:
    """Accumulates files, their typed contents and every problem found."""

    def __init__(self, known_actions: KnownActions, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.known_actions = known_actions
        self.max_file_bytes = max_file_bytes
        self.problems = Problems()
        self.rules: list[_RuleAt] = []
        self.playbooks: dict[str, Playbook] = {}
        self.playbook_at: dict[str, tuple[Document, DocPath]] = {}
        self.broken_playbooks: set[str] = set()
        self.saw_playbook_file = False
        self.catalog: XidCatalog | None = None
        self.kinds: dict[str, str] | None = None
        self.sources: dict[str, str] = {}

    # reading

    def add_file(self, path: Path, display: str, role: Role, source_name: str) -> None:
        try:
            size = path.stat().st_size
            if size > self.max_file_bytes:
                self.problems.add_at(display, 0, f"file is {size} bytes, larger than the {self.max_file_bytes} allowed")
                return
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.problems.add_at(display, 0, f"cannot read file: {exc}")
            return
        self.sources[source_name] = text
        doc = parse_yaml(text, display, self.problems)
        if doc is None:
            return
        if path.name == XID_CATALOG_FILE and role != "playbooks":
            self.catalog = parse_xid_catalog(doc, self.problems)
        elif path.name == ALERT_KINDS_FILE and role != "playbooks":
            self.kinds = {**(self.kinds or {}), **parse_alert_kinds(doc, self.problems)}
        else:
            kind = role if role != "auto" else _classify(doc)
            if kind == "rules":
                self._rules(doc)
            elif kind == "playbooks":
                self._playbooks(doc)
            elif doc.data is not None:
                self.problems.add(
                    doc,
                    (),
                    "cannot tell what this file is: a rule file has `rules` or `match`, "
                    "a playbook has `steps`",
                )

    def add_dir(self, directory: Path, display: str, role: Role, prefix: str) -> None:
        if not directory.is_dir():
            self.problems.add_at(display, 0, "directory not found")
            return
        for path in _yaml_files(directory):
            self.add_file(path, f"{display.rstrip('/')}/{path.name}", role, f"{prefix}/{path.name}")

    # rules

    def _rules(self, doc: Document) -> None:
        data = doc.data
        if data is None:
            return
        base: DocPath = ()
        if isinstance(data, dict) and "rules" in data:
            for key in data:
                if key != "rules":
                    self.problems.add(doc, (key,), f"unknown field {key!r} in a rule file (expected `rules`)")
            data, base = data["rules"], ("rules",)
        elif isinstance(data, dict):
            self._rule(doc, data, ())
            return
        if not isinstance(data, list):
            self.problems.add(doc, base, "a rule file holds a list of rules, or {rules: [...]}")
            return
        for index, item in enumerate(data):
            self._rule(doc, item, (*base, index))

    def _rule(self, doc: Document, item: object, path: DocPath) -> None:
        if not isinstance(item, dict):
            self.problems.add(doc, path, "a rule must be a mapping with name, match and playbook")
            return
        rule = _validate(Rule, item, doc, path, self.problems)
        if isinstance(rule, Rule):
            self.rules.append(_RuleAt(rule, doc, path))

    # playbooks

    def _playbooks(self, doc: Document) -> None:
        self.saw_playbook_file = True
        data = doc.data
        if data is None:
            return
        if isinstance(data, dict) and "playbooks" in data and "steps" not in data:
            for key in data:
                if key != "playbooks":
                    self.problems.add(doc, (key,), f"unknown field {key!r} (expected `playbooks`)")
            items, base = data["playbooks"], ("playbooks",)
            if not isinstance(items, list):
                self.problems.add(doc, base, "`playbooks` must be a list")
                return
            for index, item in enumerate(items):
                self._playbook(doc, item, (*base, index))
        elif isinstance(data, dict):
            self._playbook(doc, data, ())
        elif isinstance(data, list):
            for index, item in enumerate(data):
                self._playbook(doc, item, (index,))
        else:
            self.problems.add(doc, (), "a playbook file holds one playbook, or a list of them")

    def _playbook(self, doc: Document, item: object, path: DocPath) -> None:
        if not isinstance(item, dict):
            self.problems.add(doc, path, "a playbook must be a mapping with name and steps")
            return
        playbook = _validate(Playbook, item, doc, path, self.problems)
        raw_steps = item.get("steps")
        steps: list[tuple[int, Step]] = []
        if isinstance(playbook, Playbook):
            steps = list(enumerate(playbook.steps))
        elif isinstance(raw_steps, list):
            for index, raw in enumerate(raw_steps):
                try:
                    steps.append((index, Step.model_validate(raw)))
                except ValidationError:
                    continue  # already reported by the playbook validation
        self._check_steps(doc, path, steps)
        raw_gate = item.get("return_gate")
        gate: list[tuple[int, Step]] = []
        if isinstance(playbook, Playbook):
            gate = list(enumerate(playbook.return_gate))
        elif isinstance(raw_gate, list):
            for index, raw in enumerate(raw_gate):
                try:
                    gate.append((index, Step.model_validate(raw)))
                except ValidationError:
                    continue  # already reported by the playbook validation
        self._check_steps(doc, path, gate, key="return_gate", taken={s.name: f"steps[{i}]" for i, s in steps})
        if not isinstance(playbook, Playbook):
            if isinstance(item.get("name"), str):
                self.broken_playbooks.add(item["name"])
            return
        if playbook.name in self.playbooks:
            first_doc, first_path = self.playbook_at[playbook.name]
            first = f"{first_doc.file}:{first_doc.line(first_path)}"
            message = f"playbook {playbook.name!r} is defined twice (first at {first})"
            self.problems.add(doc, (*path, "name"), message)
            return
        self.playbooks[playbook.name] = playbook
        self.playbook_at[playbook.name] = (doc, path)

    def _check_steps(
        self, doc: Document, path: DocPath, steps: list[tuple[int, Step]], *, key: str = "steps",
        taken: Mapping[str, str] | None = None,
    ) -> None:
        seen: dict[str, str] = dict(taken or {})
        for index, step in steps:
            at: DocPath = (*path, key, index)
            if step.name in seen:
                message = f"duplicate step name {step.name!r} (also {seen[step.name]})"
                self.problems.add(doc, (*at, "name"), message)
            else:
                seen[step.name] = f"{key}[{index}]"
            self._check_action(doc, at, step.action, step.params)
            self._check_templates(doc, (*at, "params"), step.params)
            if step.revert is not None and step.revert is not False:
                self._check_action(doc, (*at, "revert"), step.revert.action, step.revert.params)
                self._check_templates(doc, (*at, "revert", "params"), step.revert.params)
            if step.when is not None:
                try:
                    compile_condition(step.when)
                except ConditionError as exc:
                    where = (*at, "when")
                    line = doc.line(where) + exc.line - 1
                    self.problems.add_at(doc.file, line, str(exc), format_path(where))

    def _check_action(self, doc: Document, at: DocPath, action: str, params: Mapping[str, object]) -> None:
        model = self.known_actions.get(action)
        if model is None:
            known = ", ".join(sorted(self.known_actions)) or "none"
            self.problems.add(doc, (*at, "action"), f"unknown action {action!r} (known: {known})")
            return
        for sub, message in check_params(action, model, params):
            self.problems.add(doc, (*at, "params", *sub), message)
        for sub, message in deprecated_params(action, model, params):
            self.problems.warn(doc, (*at, "params", *sub), message)

    def _check_templates(self, doc: Document, at: DocPath, params: Mapping[str, object]) -> None:
        for path, text in _strings(params, at):
            try:
                check_template(text)
            except TemplateProblem as exc:
                self.problems.add_at(doc.file, doc.line(path) + exc.line - 1, str(exc), format_path(path))

    # cross-file checks

    def finish(self, check_refs: bool) -> tuple[list[Rule], dict[str, str]]:
        names: dict[str, _RuleAt] = {}
        kinds: dict[str, str] = dict(self.kinds or {})
        kind_from: dict[str, _RuleAt] = {}
        for at in self.rules:
            rule = at.rule
            if rule.name in names:
                first = names[rule.name]
                where = f"{first.doc.file}:{first.doc.line(first.path)}"
                message = f"rule {rule.name!r} is defined twice (first at {where})"
                self.problems.add(at.doc, (*at.path, "name"), message)
            else:
                names[rule.name] = at
            if check_refs:
                self._check_rule_playbook(at)
            if rule.kind is not None:
                for alertname in rule.equality_alertnames():
                    other = kind_from.get(alertname)
                    if other is not None and other.rule.kind != rule.kind:
                        self.problems.add(
                            at.doc,
                            (*at.path, "kind"),
                            f"alert {alertname!r} is kind {other.rule.kind!r} in rule {other.rule.name!r}, "
                            f"{rule.kind!r} here",
                        )
                        continue
                    kind_from[alertname] = at
                    kinds[alertname] = rule.kind
        ordered = sorted(self.rules, key=lambda a: -a.rule.priority)
        return [a.rule for a in ordered], kinds

    def _check_rule_playbook(self, at: _RuleAt) -> None:
        playbook = self.playbooks.get(at.rule.playbook)
        if playbook is None:
            if at.rule.playbook not in self.broken_playbooks:
                self.problems.add(at.doc, (*at.path, "playbook"), f"unknown playbook {at.rule.playbook!r}")
            return
        if playbook.target == "gpu_instance" and not _requires_label(at.rule, _INSTANCE_LABEL):
            self.problems.warn(
                at.doc, (*at.path, "match"),
                f"playbook {playbook.name!r} targets a gpu_instance, but rule {at.rule.name!r} does not require a "
                f"{_INSTANCE_LABEL} label: its alerts without one target the whole GPU (add "
                f'{_INSTANCE_LABEL}=~"[0-9]+" to its match)',
            )
        for key in at.rule.params:
            if key not in playbook.params:
                declared = ", ".join(sorted(playbook.params)) or "none"
                self.problems.add(
                    at.doc,
                    (*at.path, "params", key),
                    f"playbook {playbook.name!r} has no parameter {key!r} (declared: {declared})",
                )


# The alert label naming a MIG GPU instance (the node detector's `GPU-I:NN`; engine/gpu_instance.py reads it).
_INSTANCE_LABEL = "gpu_instance"


def _requires_label(rule: Rule, label: str) -> bool:
    """Does every alert the rule matches carry `label` (a matcher on it that a missing label fails)?"""
    return any(m.name == label and not m.matches({}) for m in rule.match)


def _version(sources: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(sources[name].encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def _with_bundled_data(builder: _Builder, rules_dir: Path) -> None:
    """A rules directory without its own Xid catalog or alert-kind map uses the bundled ones."""
    if builder.catalog is None and not (rules_dir / XID_CATALOG_FILE).exists():
        builder.add_file(
            BUNDLED_RULES / XID_CATALOG_FILE,
            str(BUNDLED_RULES / XID_CATALOG_FILE),
            "rules",
            f"bundled/{XID_CATALOG_FILE}",
        )
    if builder.kinds is None and not (rules_dir / ALERT_KINDS_FILE).exists():
        builder.add_file(
            BUNDLED_RULES / ALERT_KINDS_FILE,
            str(BUNDLED_RULES / ALERT_KINDS_FILE),
            "rules",
            f"bundled/{ALERT_KINDS_FILE}",
        )


def load_definitions(
    rules_dir: Path | str, playbooks_dir: Path | str, known_actions: KnownActions,
    *, max_file_bytes: int = MAX_FILE_BYTES,
) -> DefinitionSet:
    """Load and check everything; raise DefinitionSetError listing every problem found."""
    rules_path, playbooks_path = Path(rules_dir), Path(playbooks_dir)
    builder = _Builder(known_actions, max_file_bytes)
    builder.add_dir(rules_path, str(rules_dir), "rules", "rules")
    builder.add_dir(playbooks_path, str(playbooks_dir), "playbooks", "playbooks")
    if rules_path.is_dir():
        _with_bundled_data(builder, rules_path)
    rules, kinds = builder.finish(check_refs=True)
    if builder.problems:
        raise DefinitionSetError(builder.problems.errors)
    for warning in builder.problems.warnings:
        log.warning("definitions: %s: warning: %s", f"{warning.file}:{warning.line}", warning.message)
    return DefinitionSet(
        rules=tuple(rules),
        playbooks=dict(builder.playbooks),
        xid=builder.catalog or XidCatalog(),
        alert_kinds=kinds,
        version=_version(builder.sources),
        sources=dict(builder.sources),
    )


def check_paths(
    paths: Sequence[Path],
    known_actions: KnownActions,
    warnings: list[DefinitionError] | None = None,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> list[DefinitionError]:
    """Check files and directories (`remediator check`); rule -> playbook references are checked when
    at least one playbook file is among them. Warnings (deprecated spellings) go to `warnings` if given."""
    builder = _Builder(known_actions, max_file_bytes)
    for path in paths:
        if path.is_dir():
            for file in _yaml_files(path):
                builder.add_file(file, str(file), "auto", str(file))
        elif path.is_file():
            builder.add_file(path, str(path), "auto", str(path))
        else:
            builder.problems.add_at(str(path), 0, "no such file or directory")
    builder.finish(check_refs=builder.saw_playbook_file)
    if warnings is not None:
        warnings.extend(builder.problems.warnings)
    return list(builder.problems.errors)
