#!/usr/bin/env bash
# Install what the browser tests (tests/test_web*.py) need: Debian's chromium and firefox-esr, and
# Playwright for Python in .venv.
#
#   scripts/ci-browser.sh    # as root: apt-get what is missing; always: pip install playwright into .venv
#
# Playwright drives /usr/bin/chromium; it never downloads a browser of its own (no `playwright install`).
# Firefox is driven over WebDriver BiDi by tests/test_web_firefox.py itself. Without root, a missing browser
# makes its tests skip and say why; nothing here fails the run for that.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || missing+=(firefox-esr)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q "${missing[@]}"
    else
        echo "ci-browser: missing ${missing[*]} and not root: those browser tests will skip" >&2
    fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q 'playwright>=1.50,<2'
echo "ci-browser: $(/usr/bin/chromium --version 2>/dev/null || echo 'no chromium');" \
     "$(firefox-esr --version 2>/dev/null || echo 'no firefox-esr');" \
     "playwright $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))')"
