"""The image recipe: slim base, non-root user matching the manifests, `remediator` as the entry point."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib

from remediator.api.routes.docs import INSTALLED_DOCS
from tests.deploy.helpers import OVERLAYS, ROOT, only, rendered


def instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def ignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").removeprefix("**/")
        if (
            fnmatch.fnmatch(path, pattern)
            or fnmatch.fnmatch(path.split("/")[-1], pattern)
            or path.startswith(pattern.rstrip("/") + "/")
        ):
            result = not negate
    return result


def test_every_stage_builds_from_python_311_slim() -> None:
    stages = [rest.split()[0] for keyword, rest in instructions() if keyword == "FROM"]
    assert stages and all(image == "python:3.11-slim" for image in stages)


def test_runs_as_the_non_root_user_the_manifests_expect() -> None:
    users = [rest for keyword, rest in instructions() if keyword == "USER"]
    assert users, "no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric non-root UID, so runAsNonRoot can verify it"
    deployment = only(rendered(OVERLAYS["single"]), "Deployment")
    context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert context["runAsUser"] == int(uid)
    assert context["runAsGroup"] == int(gid or uid)


def test_installs_the_package_and_enters_through_the_cli() -> None:
    steps = instructions()
    assert any(k == "RUN" and re.search(r"\bpip install \.(\s|$)", rest) for k, rest in steps)
    (entrypoint,) = [rest for k, rest in steps if k == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["remediator"]


def test_build_context_leaves_out_local_state_and_keeps_the_package() -> None:
    for path in (
        ".git/config",
        ".venv/bin/python",
        "remediator.db",
        "tests/conftest.py",
        "remediator/__pycache__/cli.cpython-311.pyc",
    ):
        assert ignored(path), path
    for path in ("pyproject.toml", "README.md", "remediator/cli/main.py", "remediator/settings.py"):
        assert not ignored(path), path


def test_the_image_installs_the_operator_docs_its_runbook_links_open() -> None:
    """The UI's state badges link to /docs/operations.md#state-<state>: the image must carry docs/*.md where the
    controller looks. The build context keeps them, `pip install .` puts them in the venv's
    share/gpu-remediator/docs (pyproject.toml's data-files), and the final stage copies that venv whole."""
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert any(p.name == "operations.md" for p in docs)
    for path in docs:
        assert not ignored(f"docs/{path.name}"), f".dockerignore leaves docs/{path.name} out of the build"
    assert ignored("docs/scenarios/random-faults.yaml"), "only the markdown pages are needed"
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    assert data_files == {"/".join(INSTALLED_DOCS): ["docs/*.md"]}

    steps = instructions()
    stages = [i for i, (k, _) in enumerate(steps) if k == "FROM"]
    build, final = steps[stages[0]:stages[-1]], steps[stages[-1]:]
    venv = next(rest.split()[-1] for k, rest in build if k == "RUN" and " -m venv " in rest)
    assert any(k == "COPY" and rest.split() == [".", "."] for k, rest in build), "the build stage copies the context"
    assert any(k == "RUN" and re.search(rf"{re.escape(venv)}/bin/pip install \.(\s|$)", rest) for k, rest in build)
    assert ("COPY", f"--from=build {venv} {venv}") in final, "the final stage must copy the whole venv, share/ too"
