#!/usr/bin/env bash
# Install what the power-cut file system (tests/helpers/powercut_fs.py, used by tests/test_power_cut_fs.py)
# needs from Debian: fuse3, which brings fusermount3 and libfuse3. Its Python side, mfusepy (ctypes over
# that libfuse), is in the test extras that scripts/test.sh installs.
#
#   scripts/ci-fuse.sh    # as root: apt-get fuse3 if it is missing
#
# As root, or in CI (CI=true), fuse3 still missing at the end fails this script: a skip of those tests in
# CI fails the test run anyway (tests/conftest.py, tests/skips_allowed.toml). Without root outside CI, the
# tests skip and say why.
set -euo pipefail

have_fuse() {
    command -v fusermount3 >/dev/null 2>&1 && { ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3'; }
}
strict=false
{ [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; } && strict=true

if ! have_fuse; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q fuse3
    fi
    if ! have_fuse; then
        if $strict; then
            echo "ci-fuse: FAILED: fuse3 (fusermount3, libfuse3) still missing; the power-cut tests cannot run" >&2
            exit 1
        fi
        echo "ci-fuse: fuse3 missing and not root: the power-cut file system tests will skip" >&2
    fi
fi
[ -e /dev/fuse ] || echo "ci-fuse: no /dev/fuse on this host: the power-cut file system tests cannot mount" >&2
echo "ci-fuse: $(fusermount3 --version 2>&1 || echo 'no fusermount3')"
