#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run every check and every test.
# Exits non-zero when any check or test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v alertmanager >/dev/null 2>&1 || command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)  # bench/ingest.py's smoke form
command -v curl >/dev/null 2>&1 || need_apt+=(curl)  # tests/cli/test_readme_walk.py runs the README's curl commands
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)  # tests/deploy render the overlays with it
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check remediator tests bench scripts
echo "== mypy (strict)"; mypy remediator
echo "== import-linter"; lint-imports
echo "== remediator check (shipped definitions)"; remediator check
echo "== pytest"; pytest -q "$@"
