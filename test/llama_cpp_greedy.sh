#!/usr/bin/env bash
# The decoder on llama.cpp's model reproduces llama.cpp's own greedy decoding: every block size and the
# learned one, on short held-out prompts (the workbench verifier's variants are only reported). Skipped
# (77) without the SmolLM2 file.
# Usage: llama_cpp_greedy.sh LLAMA_CPP_DECODE SOURCE_ROOT
set -euo pipefail
program=$1 root=$2
model=${BLOCKPILOT_SMOLLM2_GGUF:-${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "SmolLM2 not found at $model: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$program" --model "$model" --prompts "$root/examples/data/prompts/sharegpt_60.txt" --lines 51:54 \
  --predictor "$root/examples/data/predictors/smollm2-lookup/T0-compact-cross-entropy.safetensors" \
  --sizes 2,3,5,8 --max-new-tokens 40 --rounds 1 --out "$out/result.json"
python3 - "$out/result.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
failed = False
for v in result["variants"]:
    if v["family"].startswith("blockpilot cpu"):  # another verifier: its numerics differ (reported, not checked)
        print(f"info {v['variant']}: {v['identical_to_own_plain']}/{v['prompts']} outputs identical to its own plain decoding")
        continue
    ok = v["identical_outputs"] == v["prompts"] and sum(map(sum, v["tokens"])) > 0
    print(f"{'ok  ' if ok else 'FAIL'} {v['variant']}: {v['identical_outputs']}/{v['prompts']} outputs identical")
    failed |= not ok
sys.exit(1 if failed else 0)
PY
