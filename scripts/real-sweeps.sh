#!/usr/bin/env bash
# Sweeps SmolLM2-135M-Instruct with a drafter on the real prompts, T = 0 and T = 1: the training split
# (all COPA prompts + ShareGPT 1-40) and the evaluation split (ShareGPT 41-60).
# Resumable: rerun after an interruption. Usage: scripts/real-sweeps.sh [OUT]  (default results/real)
# BLOCKPILOT_BIN overrides the blockpilot binary (default build/examples/blockpilot),
# BLOCKPILOT_TEMPERATURES the temperatures (default "0 1"; two runs with one each can share a machine),
# BLOCKPILOT_DRAFTER the drafter: lookup (default) or dflash:FOLDER (the trained drafter:
# dflash:examples/data/drafters/smollm2-dflash); the sweeps are named after it (lookup-T0-copa, dflash-T0-copa, ...),
# BLOCKPILOT_COPA_LINES the COPA prompts of the training split (default 1:100, all of them),
# BLOCKPILOT_STORAGE the target's storage (fp32, the default, quantized or quantized_int8; int8 sweeps are
# named NAME-int8-T0-copa, ...), BLOCKPILOT_WINDOW the candidate sizes (default 1:5).
set -euo pipefail
[ $# -ge 1 ] && set -- "$(realpath -m "$1")" "${@:2}"  # OUT as given, before the cd
cd "$(dirname "$0")/.."

out="${1:-results/real}"
bin="${BLOCKPILOT_BIN:-build/examples/blockpilot}"
model="gguf:$(scripts/fetch-smollm2.sh)"
drafter="${BLOCKPILOT_DRAFTER:-lookup}"
storage="${BLOCKPILOT_STORAGE:-fp32}"
drafter_name=${drafter%%:*}$([ "$storage" = fp32 ] || echo "-${storage#quantized_}")
prompts=examples/data/prompts
# Window 1:5 around the best fixed size by tokens/s on the training prompts (lookup: 2 on COPA, 1 on
# ShareGPT at T = 0; dflash: 1); tau keeps growing past 5 (dflash: flat past 3) but every larger size is slower here.
# With int8 activations a step of 8 costs about 1.8 plain ones (docs/performance.md): BLOCKPILOT_WINDOW=1:8.
common=(--model "$model" --drafter "$drafter" --storage "$storage" --window "${BLOCKPILOT_WINDOW:-1:5}"
        --max-new-tokens 64 --pooled-rows 8)

sweep() {  # FOLDER TEMPERATURE RULE PROMPT-ARGS...
  local folder=$1 temperature=$2 rule=$3
  shift 3
  echo "== $folder" >&2
  "$bin" sweep "${common[@]}" --temperature "$temperature" --rule "$rule" "$@" --out "$out/$folder"
}

for t in ${BLOCKPILOT_TEMPERATURES:-0 1}; do
  rule=$([ "$t" = 0 ] && echo greedy || echo rejection)
  sweep "$drafter_name-T$t-copa" "$t" "$rule" --prompt-file "$prompts/copa.txt" --lines "${BLOCKPILOT_COPA_LINES:-1:100}"
  sweep "$drafter_name-T$t-sharegpt" "$t" "$rule" --prompt-file "$prompts/sharegpt_60.txt" --lines 1:40
  sweep "$drafter_name-T$t-eval" "$t" "$rule" --prompt-file "$prompts/sharegpt_60.txt" --lines 41:60
  "$bin" sweep --merge "$out/$drafter_name-T$t-copa" "$out/$drafter_name-T$t-sharegpt" --out "$out/$drafter_name-T$t-train"
done
