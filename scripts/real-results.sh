#!/usr/bin/env bash
# Trains block-size predictors on the real sweeps (scripts/real-sweeps.sh: SmolLM2-135M-Instruct + a
# drafter, training split COPA + ShareGPT 1-40) and scores them on the evaluation split (ShareGPT 41-60):
# on the dataset (`eval`) and live (`measure`, tokens/s), under the speed objective (tau / step cost,
# the step cost fitted on the training sweep's timing). Then the acceptance rules at T = 1, live:
# sample-and-match against rejection sampling (prompt lookup: with the early-exit drafter, 24 layers).
# Usage: scripts/real-results.sh [TEMPERATURES]   (default "0 1")
# BLOCKPILOT_DRAFTER, BLOCKPILOT_STORAGE and BLOCKPILOT_WINDOW as for real-sweeps.sh.
# Reads results/real/NAME-T*-{train,eval} (NAME: lookup or dflash, then -int8 with int8 activations); writes the compact and pooled
# predictors to examples/data/predictors/smollm2-NAME/, everything else (reference-shape weights, JSON,
# plots) to results/real/NAME-*.
set -euo pipefail
cd "$(dirname "$0")/.."

B="${BLOCKPILOT_BIN:-build/examples/blockpilot}"
model="gguf:$(scripts/fetch-smollm2.sh)"
drafter="${BLOCKPILOT_DRAFTER:-lookup}"
storage="${BLOCKPILOT_STORAGE:-fp32}"
drafter_name=${drafter%%:*}$([ "$storage" = fp32 ] || echo "-${storage#quantized_}")
window="${BLOCKPILOT_WINDOW:-1:5}"
fixed_sizes=($(seq -f 'fixed:%g' "${window%%:*}" "${window#*:}"))
sweeps=results/real
out=$sweeps/$drafter_name
predictors=examples/data/predictors/smollm2-$drafter_name
mkdir -p "$predictors"
best() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(max((p for p in r["policies"] if p["policy"].startswith("fixed:")), key=lambda p: p["mean_tau"])["policy"])' "$1"; }
cost() { python3 -c 'import json,sys; print(",".join(repr(c) for c in json.load(open(sys.argv[1]))["step_cost"]))' "$1"; }
live() {  # T RULE JSON-OUT POLICY... : ShareGPT 41-60 decoded with every policy, interleaved per prompt
  local t=$1 rule=$2 json=$3
  shift 3
  $B measure --model "$model" --drafter "$drafter" --prompt-file examples/data/prompts/sharegpt_60.txt --lines 41:60 \
    --storage "$storage" --max-new-tokens 64 --temperature "$t" --rule "$rule" --quiet "$@" --json-out "$json"
}

echo "== fixed sizes, live: tau and tokens/s per size on every sweep"
runs=()
for t in ${1:-0 1}; do
  for split in copa:COPA sharegpt:"ShareGPT 1-40" eval:"ShareGPT 41-60, held out"; do
    runs+=("T = $t, ${split#*:}=$sweeps/$drafter_name-T$t-${split%%:*}")
  done
done
/usr/bin/python3 examples/plots/plot_sweep.py "$out-sweeps.png" "${runs[@]}" | tee "$out-sweeps.md"

for t in ${1:-0 1}; do
  train=$sweeps/$drafter_name-T$t-train eval=$sweeps/$drafter_name-T$t-eval
  echo "== T = $t: the training split under the speed objective"
  $B eval --dataset "$train" --window "$window" --reference 1 --objective speed "${fixed_sizes[@]/#/--policy=}" --policy oracle \
    --json-out "$out-train-T$t.json"
  fixed=$(best "$out-train-T$t.json")
  objective=(--window "$window" --objective speed --step-cost "$(cost "$out-train-T$t.json")")
  echo "best fixed size on the training prompts: $fixed"

  for loss in cross-entropy expected-tau; do
    $B train --dataset "$train" "${objective[@]}" --features compact --top-k 64 --hidden 64,64 --loss "$loss" --quiet \
      --out "$predictors/T$t-compact-$loss.safetensors"
    $B train --dataset "$train" "${objective[@]}" --input pooled --hidden 64,64 --loss "$loss" --quiet \
      --out "$predictors/T$t-pooled-$loss.safetensors"
    echo "training the reference shape (49,152 -> 2048 -> 2048 -> one per size, raw logits, $loss): a few minutes"
    $B train --dataset "$train" "${objective[@]}" --features full_row --transform raw_logits --hidden 2048,2048 \
      --lr 1e-4 --epochs 30 --patience 10 --loss "$loss" --quiet --out "$out-T$t-reference-$loss.safetensors"
  done

  echo "== T = $t: held-out prompts (ShareGPT 41-60), on the dataset"
  $B eval --dataset "$eval" "${objective[@]}" --reference "${fixed#fixed:}" "${fixed_sizes[@]/#/--policy=}" --policy oracle \
    --policy mlp:"$predictors"/T$t-compact-{cross-entropy,expected-tau}.safetensors \
    --policy mlp:"$out"-T$t-reference-{cross-entropy,expected-tau}.safetensors \
    --policy pooled:"$predictors"/T$t-pooled-{cross-entropy,expected-tau}.safetensors --json-out "$out-eval-T$t.json"
  /usr/bin/python3 examples/plots/plot_eval.py "$out-eval-T$t.json" "$out-eval-T$t.png"

  echo "== T = $t: held-out prompts, live (tokens/s; the policy list in both orders, pooled; the speed cut-off per step)"
  rule=$([ "$t" = 0 ] && echo greedy || echo rejection)
  # The best fixed size on the training prompts; when that is plain decoding, b = 2 shows what drafting costs.
  policies=(none "$([ "$fixed" = fixed:1 ] && echo fixed:2 || echo "$fixed")"
            "mlp:$predictors/T$t-compact-expected-tau.safetensors" "mlp:$out-T$t-reference-expected-tau.safetensors"
            "refine:$predictors/T$t-compact-expected-tau.safetensors,$predictors/T$t-pooled-expected-tau.safetensors"
            "speed:${window#*:}" oracle)
  for order in forward reverse; do
    list=()
    for p in "${policies[@]}"; do [ $order = forward ] && list+=(--policy "$p") || list=(--policy "$p" "${list[@]}"); done
    live "$t" "$rule" "$out-measure-T$t-$order.json" --oracle-sweep "$eval" "${objective[@]}" "${list[@]}"
  done
  /usr/bin/python3 examples/plots/pool_measure.py "$out-measure-T$t.json" "$out"-measure-T$t-{forward,reverse}.json
done
/usr/bin/python3 examples/plots/plot_measure.py "$out-measure.png" "$out"-measure-T?.json

if [ "${drafter%%:*}" = lookup ]; then
  echo "== early exit (the target's first 24 of 30 layers): greedy at T = 0, both rules at T = 1"
  for run in 0:greedy 1:sample-match 1:rejection; do
    t=${run%%:*} rule=${run#*:}
    [[ " ${1:-0 1} " == *" $t "* ]] || continue
    $B measure --model "$model" --storage "$storage" --drafter early-exit:24 --prompt-file examples/data/prompts/sharegpt_60.txt --lines 41:50 \
      --max-new-tokens 64 --temperature "$t" --rule "$rule" --quiet --policy none --policy fixed:2 --policy fixed:3 \
      --json-out "$sweeps/early-exit${drafter_name#lookup}-T$t-$rule.json"
  done
elif [[ " ${1:-0 1} " == *" 1 "* ]]; then
  echo "== T = 1, held-out prompts, live: sample-and-match against rejection sampling"
  for rule in sample-match rejection; do
    live 1 "$rule" "$out-rules-T1-$rule.json" --policy none --policy fixed:2 --policy fixed:4
  done
fi
