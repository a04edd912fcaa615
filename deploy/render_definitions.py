"""Write the rules and playbooks ConfigMaps of deploy/base from the shipped definitions.

    python deploy/render_definitions.py            # rewrite deploy/base/definitions-*.yaml
    python deploy/render_definitions.py --check    # exit 1 if they differ from the shipped files

The sources are the directories the controller loads by default (remediator/bundled/rules and
remediator/bundled/playbooks); every *.yaml / *.yml file directly inside becomes one ConfigMap key.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "remediator" / "bundled"
BASE = Path(__file__).resolve().parent / "base"
KINDS = ("rules", "playbooks")
LABELS = {
    "app.kubernetes.io/name": "gpu-remediator",
    "app.kubernetes.io/component": "controller",
    "app.kubernetes.io/part-of": "gpu-remediator",
}


def _literal_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, _literal_str)


def source_files(kind: str, bundled: Path = BUNDLED) -> dict[str, str]:
    """File name -> text for the definition files of one kind (empty when the directory is absent)."""
    directory = bundled / kind
    if not directory.is_dir():
        return {}
    nested = [
        path.name for path in directory.iterdir() if path.is_dir() and not path.name.startswith((".", "_"))
    ]
    if nested:
        raise SystemExit(f"{directory}: a ConfigMap holds no subdirectories, found {nested}")
    return {
        path.name: path.read_text()
        for path in sorted(directory.iterdir())
        if path.is_file() and path.suffix in (".yaml", ".yml")
    }


def configmap(kind: str, files: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"gpu-remediator-{kind}", "labels": dict(LABELS)},
        "data": dict(files),
    }


def render(kind: str, bundled: Path = BUNDLED) -> str:
    doc = configmap(kind, source_files(kind, bundled))
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def target(kind: str) -> Path:
    return BASE / f"definitions-{kind}.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for kind in KINDS:
        text = render(kind)
        path = target(kind)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path}: out of date; run python deploy/render_definitions.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
