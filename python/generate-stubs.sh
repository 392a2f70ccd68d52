#!/usr/bin/env bash
# Writes python/blockpilot/_blockpilot.pyi from the installed extension module (run after
# `pip install .`, with the Python of $PYTHON, else python3; the tests compare the committed stub with a
# fresh one).
set -euo pipefail
out=${1:-"$(dirname "$0")/blockpilot/_blockpilot.pyi"}
"${PYTHON:-python3}" -m nanobind.stubgen -q -P -m blockpilot._blockpilot -o "$out"
# The error type is created with the module but documented here, with the attributes the package sets.
"${PYTHON:-python3}" - "$out" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
error = '''class Error(RuntimeError):
    """A failed call: the library's status text; `status` (None for file errors), `stage` and `result`."""

    status: Status | None
    stage: str | None
    result: GenerationResult | None
'''
text = text.replace("from blockpilot import Error as Error\n", "")
text = text.replace("class Status(enum.IntEnum):", error + "\nclass Status(enum.IntEnum):", 1)
open(path, "w").write(text)
PY
