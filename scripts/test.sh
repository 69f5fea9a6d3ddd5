#!/usr/bin/env bash
# Install tickflow with its test extras into .venv (made if missing), check its types, and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/python -m mypy  # the settings are in pyproject.toml
# The tests spend much of their time waiting on servers, syncs and screens: a worker per core (at most 4, so
# a big machine does not start dozens of servers at once) roughly halves the run. TEST_WORKERS=0 runs them in
# this process (pytest-xdist's -n 0), as does giving -n yourself.
workers=${TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
case " $* " in
    *" -n "*|*" --numprocesses"*) exec .venv/bin/python -m pytest "$@" ;;
    *) exec .venv/bin/python -m pytest -n "$workers" "$@" ;;
esac
