#!/usr/bin/env bash
# Gathers what device_train.sh needs on a remote GPU machine into .stage/ at the repository's root
# (git-ignored), in folders that each fit one call beside the repository (a call carries at most 64 MiB,
# the working tree included): the wheels that machine lacks, the data files (without any:
# make_prompts.py's prompts, which the target continues there), an exported drafter to continue from when
# given, and the target's GGUF cut to fill the room each call has left.
# Prints the calls to make, back to back (the machine keeps /tmp while it stays warm between calls).
#   bash examples/dflash_train/stage_for_device.sh [DATA.safetensors ...] [--init DRAFTER_FOLDER] [--with FILE]...
# --with adds a file to the first call's folder (what another job in that call needs, e.g. the GPU check's binaries).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/examples/dflash_train"
stage="$root/.stage"
cache="${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}"
gguf="${BLOCKPILOT_SMOLLM2_GGUF:-$cache/SmolLM2-135M-Instruct.Q4_1.gguf}"
data=() init="" with=()
while [ $# -gt 0 ]; do
  case "$1" in
    --init) init="$2"; shift 2 ;;
    --with) with+=("$2"); shift 2 ;;
    *) data+=("$1"); shift ;;
  esac
done
[ ${#data[@]} -gt 0 ] || mapfile -t data < <(compgen -G "$cache/dflash-train/data-T*.safetensors" || true)
prompts="$cache/dflash-train/prompts.jsonl"
[ ${#data[@]} -gt 0 ] || [ -f "$prompts" ] || { echo "no data files and no $prompts: run make_prompts.py" >&2; exit 1; }

rm -rf "$stage"
first="$stage/part0"
mkdir -p "$first"
# The wheels: pure Python, for the machine's Python 3.12 (its PyTorch and transformers are used as they are).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$first" \
  "$(grep '^dflash==' "$here/requirements.txt")" "$(grep '^gguf==' "$here/requirements.txt")"
for f in "${data[@]}"; do
  name="$(basename "$f")"
  cp "$f" "$first/$([[ $name == data* ]] || echo data-)$name"  # device_train.sh reads data*.safetensors
done
[ ${#data[@]} -gt 0 ] || cp "$prompts" "$first/"
[ ${#with[@]} -eq 0 ] || cp "${with[@]}" "$first/"
[ -z "$init" ] || { mkdir -p "$first/init"; cp "$init"/config.json "$init"/model.safetensors "$first/init/"; }

# The room a call has beside the working tree that travels with it (tracked and untracked-not-ignored files,
# counted as the disk blocks they take: a call counted more than their bytes).
tree_kib=$(cd "$root" && git ls-files -coz --exclude-standard | { du -ck --files0-from=- 2>/dev/null || true; } | tail -1 | cut -f1)
room_kib=$(( 62 * 1024 - tree_kib ))
first_kib=$(du -sk "$first" | cut -f1)
[ $(( room_kib - first_kib )) -gt 1024 ] || {
  echo "the working tree ($((tree_kib / 1024)) MiB) leaves no room: take the large files the run does not need out of" \
       "the index for the calls (examples/dflash_train/README.md, 'Training on a GPU')" >&2
  exit 1
}
# The GGUF: the first piece fills part0's room, the others a call each.
size_kib=$(( ($(stat -c %s "$gguf") + 1023) / 1024 ))
offset=0 n=0
while [ $offset -lt "$size_kib" ]; do
  dir="$stage/part$n"
  mkdir -p "$dir"
  take=$(( room_kib - $(du -sk "$dir" | cut -f1) ))
  dd if="$gguf" of="$dir/gguf.part-$(printf %02d $n)" bs=1K skip=$offset count=$take status=none
  offset=$(( offset + take )) n=$(( n + 1 ))
done
echo "staged in $stage: the working tree takes $((tree_kib / 1024)) MiB, so $n calls; back to back:"
for ((i = 0; i < n; i++)); do
  echo "  carry [\".stage/part$i\"]: mkdir -p /tmp/blockpilot-stage && cp -r .stage/part$i/* /tmp/blockpilot-stage/"
done
echo "  and in the last of them: && bash examples/dflash_train/device_train.sh \$OUT 9 [train.py options]"
