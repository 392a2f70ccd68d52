#!/usr/bin/env bash
# Builds and installs the Python package from this tree into a fresh virtual environment (build-python/venv)
# and runs its tests against the installed package, not the build tree. Results: build-python/pytest.xml.
# Usage: scripts/test-python.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build-python/venv
rm -rf "$venv" build-python/pytest.xml
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet ".[test]" nanobind==3.1.0  # the build's own, for the stub check
cd test/python  # not the source tree's python/: the tests import the installed package
PATH="$PWD/../../$venv/bin:$PATH" python -m pytest -q --junitxml=../../build-python/pytest.xml "$@"
