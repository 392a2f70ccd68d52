#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds (release) and runs the whole test suite, then the Python
# package's tests (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
bash scripts/fetch-smollm2.sh >/dev/null || echo "SmolLM2 not fetched: the tests that read it will be skipped" >&2
[ -f build/build.ninja ] || meson setup build
rc=0
meson test -C build --print-errorlogs "$@" || rc=1
bash scripts/test-python.sh || rc=1  # the Python package, installed from this tree
exit $rc
