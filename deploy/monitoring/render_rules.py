"""Write rules.yml (a plain Prometheus rules file) from the PrometheusRule in prometheus-rules.yaml, and render
either with the install's docs URL in every `runbook_url` annotation.

    python deploy/monitoring/render_rules.py            # rewrite rules.yml
    python deploy/monitoring/render_rules.py --check    # exit 1 if rules.yml differs
    python deploy/monitoring/render_rules.py --docs-url https://gpu-remediator.example.com/docs -o rules.yml
    python deploy/monitoring/render_rules.py --docs-url URL --prometheus-rule -o prometheus-rules.yaml
    python deploy/monitoring/render_rules.py --docs-url URL --kustomize my-monitoring/

prometheus-rules.yaml is the one to edit; rules.yml carries the same groups for Prometheus servers
that read rule files instead of PrometheusRule objects. Both point `runbook_url` at DEFAULT_DOCS_URL, the
controller's Service inside the cluster (the controller serves docs/ at /docs); `--docs-url` puts the URL
people open instead (REMEDIATOR_PUBLIC_URL + /docs, or wherever REMEDIATOR_DOCS_URL points) in front of
`/operations.md#alert-<name>`. `--kustomize DIR` writes a kustomize overlay of deploy/monitoring into DIR
(kustomization.yaml and runbook-urls.yaml, a JSON patch that checks each rule's name before replacing its
URL, so a rule moved upstream fails the build instead of getting another rule's link).
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "prometheus-rules.yaml"
TARGET = HERE / "rules.yml"
DEFAULT_DOCS_URL = "http://gpu-remediator.gpu-remediator.svc:8080/docs"
PATCH_FILE = "runbook-urls.yaml"
_RUNBOOK = re.compile(r"^(?P<base>.+)/(?P<page>operations\.md#[\w-]+)$")


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


def rule_groups(prometheus_rule: dict[str, Any]) -> dict[str, Any]:
    """The `groups` of a PrometheusRule as a rules file."""
    if prometheus_rule.get("kind") != "PrometheusRule":
        raise ValueError(f"{SOURCE.name}: expected kind PrometheusRule, got {prometheus_rule.get('kind')!r}")
    return {"groups": prometheus_rule["spec"]["groups"]}


def docs_url(value: str) -> str:
    """An absolute http(s) URL of the docs folder, without a trailing slash; ValueError saying why not."""
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(f"--docs-url {value!r}: give an absolute http(s) URL of the docs folder, e.g. "
                         "https://gpu-remediator.example.com/docs (people open it from a notification)")
    if parts.query or parts.fragment:
        raise ValueError(f"--docs-url {value!r}: no query or fragment; the page and anchor are added to it")
    return url


def runbook_rules(prometheus_rule: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(JSON pointer of the rule, rule) for every rule with a `runbook_url` annotation."""
    found = []
    for g, group in enumerate(prometheus_rule["spec"]["groups"]):
        for r, rule in enumerate(group["rules"]):
            if "runbook_url" in (rule.get("annotations") or {}):
                found.append((f"/spec/groups/{g}/rules/{r}", rule))
    return found


def rebased(url: str, base: str) -> str:
    match = _RUNBOOK.match(url)
    if match is None:
        raise ValueError(f"runbook_url {url!r} is not <docs URL>/operations.md#<anchor>")
    return f"{base}/{match.group('page')}"


def with_docs_url(prometheus_rule: dict[str, Any], base: str | None) -> dict[str, Any]:
    """The PrometheusRule with every `runbook_url` on `base` (unchanged for None)."""
    out = copy.deepcopy(prometheus_rule)
    if base is not None:
        for _, rule in runbook_rules(out):
            rule["annotations"]["runbook_url"] = rebased(rule["annotations"]["runbook_url"], base)
    return out


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def load(source: Path = SOURCE) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(source.read_text())
    rule_groups(doc)
    return doc


def render(source: Path = SOURCE, base: str | None = None) -> str:
    """The rules file; with `base`, every runbook_url on that docs URL."""
    return _dump(rule_groups(with_docs_url(load(source), base)))


def render_prometheus_rule(source: Path = SOURCE, base: str | None = None) -> str:
    return _dump(with_docs_url(load(source), base))


def kustomize_patch(source: Path, base: str) -> list[dict[str, Any]]:
    """JSON patch (RFC 6902) of the PrometheusRule: per rule, a `test` of its alert name, then a `replace` of
    its runbook_url; kustomize refuses the patch when a test fails."""
    ops: list[dict[str, Any]] = []
    for pointer, rule in runbook_rules(load(source)):
        ops.append({"op": "test", "path": f"{pointer}/alert", "value": rule["alert"]})
        ops.append({"op": "replace", "path": f"{pointer}/annotations/runbook_url",
                    "value": rebased(rule["annotations"]["runbook_url"], base)})
    return ops


def write_overlay(directory: Path, base: str, source: Path = SOURCE) -> None:
    """DIR/kustomization.yaml (deploy/monitoring as its base, the patch applied) and DIR/runbook-urls.yaml.
    `bases` and `patchesJson6902`, as the shipped overlays, so kubectl from 1.20 (kustomize 2.0) up renders it."""
    doc = load(source)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / PATCH_FILE).write_text(
        f"# Written by deploy/monitoring/render_rules.py --docs-url {base}: every runbook_url on that docs URL.\n"
        + _dump(kustomize_patch(source, base)))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "bases": [os.path.relpath(source.resolve().parent, directory.resolve())],
        "patchesJson6902": [{
            "target": {"group": "monitoring.coreos.com", "version": "v1", "kind": "PrometheusRule",
                       "name": doc["metadata"]["name"]},
            "path": PATCH_FILE,
        }],
    }
    (directory / "kustomization.yaml").write_text(
        "# Written by deploy/monitoring/render_rules.py --kustomize: deploy/monitoring with the runbook links\n"
        f"# on {base}. Apply with `kubectl apply -k {directory}`; run the command again after an upgrade.\n"
        + _dump(kustomization))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift of rules.yml instead of writing")
    parser.add_argument("--docs-url", metavar="URL",
                        help="the docs folder people open (REMEDIATOR_PUBLIC_URL + /docs): every runbook_url "
                             "becomes URL/operations.md#alert-<name>")
    parser.add_argument("--prometheus-rule", action="store_true", help="write the PrometheusRule, not a rules file")
    parser.add_argument("-o", "--output", metavar="FILE", help="where to write ('-': standard output)")
    parser.add_argument("--kustomize", metavar="DIR", type=Path,
                        help="write a kustomize overlay of deploy/monitoring with the runbook links on --docs-url")
    args = parser.parse_args(argv)
    base = None
    if args.docs_url is not None:
        try:
            base = docs_url(args.docs_url)
        except ValueError as exc:
            parser.error(str(exc))
    if args.check and (base or args.output or args.kustomize or args.prometheus_rule):
        parser.error("--check compares the shipped rules.yml; give it alone")
    if args.kustomize is not None:
        if base is None:
            parser.error("--kustomize needs --docs-url")
        if args.output or args.prometheus_rule:
            parser.error("--kustomize writes its own files; leave out -o and --prometheus-rule")
        write_overlay(args.kustomize, base)
        print(f"wrote {args.kustomize / 'kustomization.yaml'} and {args.kustomize / PATCH_FILE}")
        return 0
    text = render_prometheus_rule(base=base) if args.prometheus_rule else render(base=base)
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET}: out of date; run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    output = args.output or ("-" if base or args.prometheus_rule else str(TARGET))
    if output == "-":
        sys.stdout.write(text)
    else:
        Path(output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
