#!/usr/bin/env bash
# Creates the virtual environment of examples/dflash_train from PyPI (requirements.txt beside this
# file) at $BLOCKPILOT_CACHE/venv-dflash-train (BLOCKPILOT_CACHE defaults to ~/.cache/blockpilot), and
# checks that it imports. dflash is installed with --no-deps (see requirements.txt). Running it again
# reuses the environment and installs only what is missing.
#   bash examples/dflash_train/setup.sh          # prints the environment's python at the end
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}"
venv="$cache/venv-dflash-train"
python="${PYTHON:-python3}"

mkdir -p "$cache"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
grep -v '^dflash==' "$here/requirements.txt" > "$venv/requirements-deps.txt"
"$venv/bin/python" -m pip install --quiet -r "$venv/requirements-deps.txt"
"$venv/bin/python" -m pip install --quiet --no-deps "$(grep '^dflash==' "$here/requirements.txt")"
"$venv/bin/python" - <<'PY'
import dflash.model, gguf, matplotlib, safetensors, torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__, "dflash ok")
PY
echo "$venv/bin/python"
