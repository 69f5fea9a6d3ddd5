#!/usr/bin/env bash
# Install what the browser tests (tests/test_web*.py) and the page's book rules (tests/test_book_rules.py)
# need: Debian's chromium, firefox-esr and nodejs, and Playwright for Python in .venv.
#
#   scripts/ci-browser.sh    # as root: apt-get what is missing; always: pip install playwright into .venv
#
# Playwright drives /usr/bin/chromium; it never downloads a browser of its own (no `playwright install`).
# Firefox is driven over WebDriver BiDi by tests/test_web_firefox.py itself. As root, or in CI (CI=true),
# anything still missing at the end fails this script: in CI those tests must run, and a skip there fails
# the test run anyway (tests/conftest.py, tests/skips_allowed.toml). Without root outside CI, a missing
# browser makes its tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."

missing_now() {
    missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    command -v firefox-esr >/dev/null 2>&1 || command -v firefox >/dev/null 2>&1 || missing+=(firefox-esr)
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
}
strict=false
{ [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; } && strict=true

missing_now
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q "${missing[@]}"
        missing_now
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        if $strict; then
            echo "ci-browser: FAILED: ${missing[*]} still missing (root: $([ "$(id -u)" = 0 ] && echo yes || echo no));" \
                 "the browser and book-rule tests cannot run" >&2
            exit 1
        fi
        echo "ci-browser: missing ${missing[*]} and not root: those browser tests will skip" >&2
    fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q 'playwright>=1.50,<2'
if $strict && ! /usr/bin/chromium --version >/dev/null 2>&1; then
    echo "ci-browser: FAILED: /usr/bin/chromium is there but does not run" >&2
    exit 1
fi
echo "ci-browser: $(/usr/bin/chromium --version 2>/dev/null || echo 'no chromium');" \
     "$(firefox-esr --version 2>/dev/null || echo 'no firefox-esr');" \
     "node $(node --version 2>/dev/null || echo 'missing');" \
     "playwright $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))')"
