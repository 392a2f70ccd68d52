#!/usr/bin/env bash
# Sweeps SmolLM2-135M-Instruct with the prompt-lookup drafter on the real prompts, T = 0 and T = 1:
# the training split (all COPA prompts + ShareGPT 1-40) and the evaluation split (ShareGPT 41-60).
# Resumable: rerun after an interruption. Usage: scripts/real-sweeps.sh [OUT]  (default results/real)
# BLOCKPILOT_BIN overrides the blockpilot binary (default build/examples/blockpilot),
# BLOCKPILOT_TEMPERATURES the temperatures (default "0 1"; two runs with one each can share a machine).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-results/real}"
bin="${BLOCKPILOT_BIN:-build/examples/blockpilot}"
model="gguf:$(scripts/fetch-smollm2.sh)"
prompts=../shared/data/prompts
# Window 1:5 around the best fixed size by tokens/s on the training prompts (2 on COPA, 1 on
# ShareGPT at T = 0); tau keeps growing past 5 but every larger size is slower here.
common=(--model "$model" --drafter lookup --window 1:5 --max-new-tokens 64 --pooled-rows 8)

sweep() {  # NAME TEMPERATURE RULE PROMPT-ARGS...
  local name=$1 temperature=$2 rule=$3
  shift 3
  echo "== $name" >&2
  "$bin" sweep "${common[@]}" --temperature "$temperature" --rule "$rule" "$@" --out "$out/$name"
}

for t in ${BLOCKPILOT_TEMPERATURES:-0 1}; do
  rule=$([ "$t" = 0 ] && echo greedy || echo rejection)
  sweep "lookup-T$t-copa" "$t" "$rule" --prompts "$prompts/copa.txt"
  sweep "lookup-T$t-sharegpt" "$t" "$rule" --prompts "$prompts/sharegpt_60.txt" --lines 1:40
  sweep "lookup-T$t-eval" "$t" "$rule" --prompts "$prompts/sharegpt_60.txt" --lines 41:60
  "$bin" sweep --merge "$out/lookup-T$t-copa" "$out/lookup-T$t-sharegpt" --out "$out/lookup-T$t-train"
done
