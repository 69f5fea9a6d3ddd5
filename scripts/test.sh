#!/usr/bin/env bash
# Install tickflow with its test extras into .venv (made if missing), check its types, and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/python -m mypy  # the settings are in pyproject.toml
exec .venv/bin/python -m pytest "$@"
