"""Write rules.yml (a plain Prometheus rules file) from the PrometheusRule in prometheus-rules.yaml.

    python deploy/monitoring/render_rules.py            # rewrite rules.yml
    python deploy/monitoring/render_rules.py --check    # exit 1 if rules.yml differs

prometheus-rules.yaml is the one to edit; rules.yml carries the same groups for Prometheus servers
that read rule files instead of PrometheusRule objects.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "prometheus-rules.yaml"
TARGET = HERE / "rules.yml"


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


def render(source: Path = SOURCE) -> str:
    doc = yaml.safe_load(source.read_text())
    return yaml.dump(rule_groups(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET}: out of date; run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
