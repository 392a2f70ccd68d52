#!/usr/bin/env bash
# Gathers what device_train.sh needs on a lent GPU machine into .stage/ at the repository's root
# (git-ignored), in pieces that fit one call each beside the repository: the wheels that machine lacks,
# the target's GGUF in parts, the data files (without any: make_prompts.py's prompts, which the target
# continues there) and, when given, the resumable weights of an earlier run.
# Prints the calls to make, back to back (the machine keeps /tmp while it stays warm between calls).
#   bash examples/dflash_train/stage_for_device.sh [DATA.safetensors ...] [--resume DIR_WITH_resume.part-*]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/examples/dflash_train"
stage="$root/.stage"
cache="${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}"
gguf="${BLOCKPILOT_SMOLLM2_GGUF:-$cache/SmolLM2-135M-Instruct.Q4_1.gguf}"
data=() resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) resume="$2"; shift 2 ;;
    *) data+=("$1"); shift ;;
  esac
done
[ ${#data[@]} -gt 0 ] || data=($(compgen -G "$cache/dflash-train/data-T*.safetensors" || true))
prompts="$cache/dflash-train/prompts.jsonl"
[ ${#data[@]} -gt 0 ] || [ -f "$prompts" ] || { echo "no data files and no $prompts: run make_prompts.py" >&2; exit 1; }

rm -rf "$stage"
mkdir -p "$stage/last"
# The wheels: pure Python, for the machine's Python 3.12 (its PyTorch and transformers are used as they are).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$stage/last" \
  "$(grep '^dflash==' "$here/requirements.txt")" "$(grep '^gguf==' "$here/requirements.txt")"
for f in "${data[@]}"; do
  name="$(basename "$f")"
  cp "$f" "$stage/last/$([[ $name == data* ]] || echo data-)$name"  # device_train.sh reads data*.safetensors
done
[ ${#data[@]} -gt 0 ] || cp "$prompts" "$stage/last/"
# Pieces of at most 12 MiB, one call each: a call carries the repository's ~50 MiB too, within 64 MiB.
split -b 12M -d "$gguf" "$stage/gguf.part-"
[ -z "$resume" ] || cp "$resume"/resume.part-* "$stage/"
[ "$(du -sm "$stage/last" | cut -f1)" -le 12 ] || { echo "the data files take more than 12 MiB: split them" >&2; exit 1; }
echo "staged in $stage ($(du -sh "$stage" | cut -f1)); the calls, back to back:"
for p in "$stage"/gguf.part-* "$stage"/resume.part-*; do
  [ -f "$p" ] || continue
  echo "  carry [\".stage/$(basename "$p")\"]: mkdir -p /tmp/blockpilot-stage && cp .stage/$(basename "$p") /tmp/blockpilot-stage/"
done
train="bash examples/dflash_train/device_train.sh \$OUT 8 --block-size 8 --seqs-per-step 8 --steps 4000 --feature-dtype float16"
last="mkdir -p /tmp/blockpilot-stage && cp .stage/last/* /tmp/blockpilot-stage/"
if [ ${#data[@]} -gt 0 ]; then
  echo "  carry [\".stage/last\"]: $last && $train"
else  # the target continues the prompts there first, in a call of its own (keep the data files it returns)
  echo "  carry [\".stage/last\"]: $last && bash examples/dflash_train/device_train.sh \$OUT 0"
  echo "  then: $train"
fi
