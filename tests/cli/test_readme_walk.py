"""The README's newcomer path, walked on a fresh copy of the checkout: the Set-up commands, `remediator serve`,
the first-alert curls and `remediator get remediations`, `describe ID`, `revert ID`, each run in a shell as
the README gives it, and what each prints checked against what the README says it prints (the state names, the
table, the steps `describe` lists, `revert`'s answer). The commands and the expectations are read from
README.md itself, so the test breaks when the README drifts from what the commands do.

The only departures from the README, each named where it is made: the install reuses the dependencies already
installed beside the tests instead of the network, the controller listens on a free port (the README's own
`--port`, and `REMEDIATOR_SERVER` for the CLI, as docs/cli.md documents), `serve` runs in the background,
and the test waits for the plan before the next command, as a person reading the answer would.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.controller_process import free_port

REPO = Path(__file__).resolve().parents[2]
README_PORT = "127.0.0.1:8080"  # where the README's commands expect the controller
T = TypeVar("T")


@dataclass(frozen=True)
class Ran:
    command: str
    output: str  # stdout and stderr as the terminal shows them
    rc: int

    def ok(self) -> str:
        """The output, once the command exited 0 without a traceback or an authentication refusal."""
        said = f"$ {self.command}\n{self.output}"
        assert self.rc == 0, f"exit {self.rc}:\n{said}"
        assert "Traceback" not in self.output, said
        assert not re.search(r"\b401\b|Unauthorized", self.output), said
        return self.output


# --- reading the README -----------------------------------------------------------------------------------


def section(readme: str, title: str) -> str:
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert found, f"README.md has no '## {title}' section"
    return found.group(1)


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def commands(block: str) -> list[str]:
    """The block's commands: a line, or several while a quote is open or a line ends with a backslash."""
    out: list[str] = []
    pending = ""
    for line in block.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if not pending.strip() or pending.endswith("\\"):
            continue
        try:
            shlex.split(pending)
        except ValueError:  # a quote still open: the command goes on
            continue
        out.append(pending)
        pending = ""
    assert not pending, f"unfinished command in the README: {pending!r}"
    return out


def prose(text: str) -> str:
    return " ".join(text.split())


def table(block: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in block.strip().splitlines()]


# --- running commands as a person at a terminal would ---------------------------------------------------


def newcomer_env(home: Path) -> dict[str, str]:
    """A shell of someone who has not installed the project: no directory on PATH holds a `remediator` (the
    test runner's own venv is usually first on it), no active venv, no REMEDIATOR_* settings, an empty home
    (no ~/.config/remediator/config.yaml)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REMEDIATOR_") and k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME",
                                                            "XDG_CONFIG_HOME", "PIP_CONFIG_FILE"}}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "remediator").exists()]
    env["PATH"] = os.pathsep.join(path)
    env["HOME"] = str(home)
    return env


def in_one_shell(cmds: Sequence[str], env: Mapping[str, str], cwd: Path,
                 timeout: float = 120) -> tuple[list[Ran], dict[str, str]]:
    """Run the commands one after another in one bash, as typed at a prompt (no `set -e`: a failing command
    is reported, not hidden), and return what each printed with its exit code, and the shell's environment
    afterwards (what `. .venv/bin/activate` left for the next commands)."""
    mark = f"@@walk-{secrets.token_hex(6)}"
    env_file = cwd.parent / f"{mark}.env"
    script: list[str] = []
    for i, cmd in enumerate(cmds):
        script += [f"echo {mark}:begin:{i}", cmd, f"__rc=$?; echo; echo {mark}:end:{i}:$__rc"]
    script.append(f"env -0 > {shlex.quote(str(env_file))}")
    done = subprocess.run(["bash", "-c", "\n".join(script)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=dict(env), cwd=cwd, timeout=timeout)
    ran: list[Ran] = []
    for i, cmd in enumerate(cmds):
        part = re.search(rf"^{mark}:begin:{i}\n(.*?)^{mark}:end:{i}:(\d+)$", done.stdout, re.M | re.S)
        assert part, f"no trace of `{cmd}` in the shell's output:\n{done.stdout}"
        ran.append(Ran(cmd, part.group(1).rstrip("\n"), int(part.group(2))))
    after = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
    env_file.unlink()
    return ran, after


def fresh_copy(dest: Path) -> None:
    """The checkout as git sees it: tracked files plus new files not ignored (in a clean clone, exactly the
    tracked ones; here, also a module a modified file already imports), never .venv, databases or builds."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        if name.split("/", 1)[0] == ".venv":
            continue  # a .venv that is a link (not matched by a `.venv/` ignore rule) would install into the real one
        src, dst = REPO / name, dest / name
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the working tree, not yet in git
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))  # rules/ and playbooks/ are links into remediator/bundled
        else:
            shutil.copy2(src, dst)


def installed_offline(line: str, venv: Path) -> str | None:
    """The README's install commands, made to work without the network; None for any other line."""
    if line.strip() == "python3 -m venv .venv":
        # The interpreter the tests run on (the project's Python) instead of whatever `python3` is on PATH,
        # without pip of its own (the one installed beside the tests does the install below), and able to
        # import the dependencies installed there: a path line in a .pth file, which adds that directory but
        # none of its own .pth files (so not the project's editable install the tests import).
        site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
        deps = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
        return (f"{shlex.quote(sys.executable)} -m venv --without-pip .venv && "
                f"mkdir -p {shlex.quote(str(site))} && "
                f"printf '%s\\n' {' '.join(shlex.quote(d) for d in deps)} > {shlex.quote(str(site / 'deps.pth'))}")
    if line.strip() == "pip install .":
        # The checkout installed as the README says (a real, non-editable install of this copy), with the
        # dependencies and build backend already there: no index, no build isolation, no dependency resolution;
        # by the venv's own interpreter, so a README that forgot to activate it installs nothing elsewhere (its
        # bare `remediator` commands then fail, as they would for a person).
        return (".venv/bin/python -m pip install --quiet --no-deps --no-build-isolation --no-index --ignore-installed "
                "--disable-pip-version-check .")
    return None


@contextmanager
def serving(command: str, env: Mapping[str, str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], env=dict(env), cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_until(what: str, check: Callable[[], T | None], timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# --- the walk ------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_the_readme_set_up_and_first_alert_work_as_written(tmp_path: Path) -> None:
    checkout = tmp_path / "gpu-remediator"
    fresh_copy(checkout)
    readme = (checkout / "README.md").read_text()
    version = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["version"]
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    server = f"127.0.0.1:{port}"

    # Set-up: every command before `remediator serve` in one shell; serve is the block's last command.
    setup = commands(blocks(section(readme, "Set-up"), "sh")[0])
    assert setup[-1].strip() == "remediator serve", setup
    assert "pip install ." in setup and "python3 -m venv .venv" in setup, setup
    typed = [installed_offline(c, checkout / ".venv") or c for c in setup[:-1]]
    ran, shell = in_one_shell(typed, newcomer_env(home), checkout)
    for step in ran:
        step.ok()
    assert "remediator --version" in setup
    assert ran[setup.index("remediator --version")].output.strip() == f"remediator {version}"
    site = Path(sysconfig.get_path("purelib", vars={"base": str(checkout / ".venv"),
                                                    "platbase": str(checkout / ".venv")}))
    assert (site / "remediator" / "bundled" / "rules").is_dir(), "the checkout was not installed into .venv"

    # `remediator serve`, in the background, on a free port through the README's own `--port`.
    log = tmp_path / "serve.log"
    with serving(f"{setup[-1].strip()} --port {port}", shell, checkout, log) as proc:
        def ready() -> bool:
            assert proc.poll() is None, f"remediator serve exited {proc.returncode}:\n{log.read_text()}"
            return httpx.get(f"http://{server}/readyz", timeout=2).status_code == 200
        wait_until("remediator serve to answer /readyz", ready)
        assert "PLAN-ONLY" in log.read_text(), log.read_text()  # "runs plan-only and says so on start"

        # Your first alert: the curls, pointed at the free port.
        first = section(readme, "Your first alert")
        curls = commands(blocks(first, "sh")[0])
        assert all(README_PORT in c for c in curls), curls
        curls = [c.replace(README_PORT, server) for c in curls]
        (posted,), _ = in_one_shell(curls[:1], shell, checkout)
        assert '"status":"stored"' in posted.ok().replace(" ", ""), posted.output
        # The webhook is answered once the alert is stored; the plan follows in the background. A person
        # reads that answer before typing the next command; the test waits until the plan is there.
        listed = wait_until("the remediation to be planned", lambda: [
            r for r in httpx.get(f"http://{server}/api/v1/remediations", timeout=5).json()
            if r["state"] not in {"pending", "running"}])
        ran, _ = in_one_shell(curls[1:], shell, checkout)
        outputs = [step.ok() for step in ran]

        # What the README says the list shows: the state, playbook and target of its `get` table.
        shown = table(blocks(first, "text")[0])
        assert len(shown) == 2, shown
        header, row = shown
        readme_state = row[header.index("STATE")]
        assert f"its state: `{readme_state}` without a cluster" in prose(first)
        remediations = json.loads(outputs[0])
        assert listed and len(remediations) == 1, remediations
        rem = remediations[0]
        assert (rem["state"], rem["playbook"], rem["target"]) == (
            readme_state, row[header.index("PLAYBOOK")], row[header.index("TARGET")])
        audit = json.loads(outputs[1])
        assert audit and {e["remediation_id"] for e in audit} == {rem["id"]}
        assert f"state.{readme_state}" in {e["kind"] for e in audit}

        # The CLI in a second shell with the venv active (the set-up shell's environment), the server given
        # by REMEDIATOR_SERVER (docs/cli.md) since it is not on the default port.
        cli = commands(blocks(first, "sh")[1])
        assert cli == ["remediator get remediations", "remediator describe ID", "remediator revert ID"], cli
        cli_shell = {**shell, "REMEDIATOR_SERVER": f"http://{server}"}
        (got,), _ = in_one_shell(cli[:1], cli_shell, checkout)
        printed = table(got.ok())
        assert printed[0] == header, got.output
        assert len(printed) == 2, got.output
        short_id = printed[1][0]
        assert short_id == rem["id"][:8], got.output
        for column in ("STATE", "PLAYBOOK", "TARGET", "REASON"):
            assert printed[1][header.index(column)] == row[header.index(column)], (column, got.output)
        assert re.fullmatch(r"\d+[smhd](\d+[smh])?", printed[1][header.index("AGE")]), got.output

        # describe and revert with the ID `get` printed (the README: "the ID or its first 8 characters").
        said = prose(first)
        steps = re.search(r"its steps \(((?:`[\w-]+`, )+)\.\.\. each `(\w+)`\)", said)
        answer = re.search(r"`revert ID` undoes a finished one \(`([^`]+)`", said)
        assert steps and answer, "README.md no longer says what describe and revert print"
        (described, reverted), _ = in_one_shell([c.replace(" ID", f" {short_id}") for c in cli[1:]],
                                                cli_shell, checkout)
        text = described.ok()
        assert re.search(rf"^State:\s+{readme_state}$", text, re.M), text
        assert rem["id"] in text
        for name in re.findall(r"`([\w-]+)`", steps.group(1)):
            assert re.search(rf"^\s*forward\s+\d+\s+{name}\s+\S+\s+{steps.group(2)}\s", text, re.M), (name, text)
        assert answer.group(1) in reverted.ok() and rem["id"] in reverted.output, reverted.output

        # "here the undo is planned too": it ends reverted, every undo step planned, nothing failed.
        def undone() -> dict[str, Any] | None:
            detail: dict[str, Any] = httpx.get(f"http://{server}/api/v1/remediations/{rem['id']}",
                                                  timeout=5).json()
            return detail if detail["state"] not in {"planned", "reverting"} else None
        detail = wait_until("the revert to finish", undone)
        assert detail["state"] == "reverted", detail
        undo = [s for s in detail["steps"] if s["phase"] == "revert"]
        assert undo and {s["status"] for s in undo} == {"planned"}, undo
    assert "Traceback" not in log.read_text(), log.read_text()
