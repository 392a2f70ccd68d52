#!/usr/bin/env bash
# Trains block-size predictors on the real sweeps (scripts/real-sweeps.sh: SmolLM2-135M-Instruct +
# prompt lookup, training split COPA + ShareGPT 1-40) and scores them on the evaluation split
# (ShareGPT 41-60): on the dataset (`eval`) and live (`measure`, tokens/s), under the speed objective
# (tau / step cost, the step cost fitted on the training sweep's timing).
# Also early exit (24 layers) measured live: greedy at T = 0, sample-and-match and rejection sampling at T = 1.
# Usage: scripts/real-results.sh [TEMPERATURES]   (default "0 1")
# Reads results/real/lookup-T*-{train,eval}; writes the compact predictors to
# examples/predictors/smollm2-lookup/, everything else (reference-shape weights, JSON, plots) to results/real/.
set -euo pipefail
cd "$(dirname "$0")/.."

B=build/examples/blockpilot
model="gguf:$(scripts/fetch-smollm2.sh)"
sweeps=results/real
predictors=examples/predictors/smollm2-lookup
mkdir -p "$predictors"
best() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(max((p for p in r["policies"] if p["policy"].startswith("fixed:")), key=lambda p: p["mean_tau"])["policy"])' "$1"; }
cost() { python3 -c 'import json,sys; print(",".join(repr(c) for c in json.load(open(sys.argv[1]))["step_cost"]))' "$1"; }

for t in ${1:-0 1}; do
  train=$sweeps/lookup-T$t-train eval=$sweeps/lookup-T$t-eval
  echo "== T = $t: the training split under the speed objective"
  $B eval --dataset "$train" --window 1:5 --reference 1 --objective speed --policy fixed:{1,2,3,4,5} --policy oracle \
    --json-out "$sweeps/train-T$t.json"
  fixed=$(best "$sweeps/train-T$t.json")
  objective=(--window 1:5 --objective speed --step-cost "$(cost "$sweeps/train-T$t.json")")
  echo "best fixed size on the training prompts: $fixed"

  for loss in cross-entropy expected-tau; do
    $B train --dataset "$train" "${objective[@]}" --features compact --top-k 64 --hidden 64,64 --loss "$loss" --quiet \
      --out "$predictors/T$t-compact-$loss.safetensors"
    $B train --dataset "$train" "${objective[@]}" --input pooled --hidden 64,64 --loss "$loss" --quiet \
      --out "$predictors/T$t-pooled-$loss.safetensors"
    echo "training the reference shape (49,152 -> 2048 -> 2048 -> 5, raw logits, $loss): a few minutes"
    $B train --dataset "$train" "${objective[@]}" --features full_row --transform raw_logits --hidden 2048,2048 \
      --lr 1e-4 --epochs 30 --patience 10 --loss "$loss" --quiet --out "$sweeps/T$t-reference-$loss.safetensors"
  done

  echo "== T = $t: held-out prompts (ShareGPT 41-60), on the dataset"
  $B eval --dataset "$eval" "${objective[@]}" --reference "${fixed#fixed:}" --policy fixed:{1,2,3,4,5} --policy oracle \
    --policy mlp:"$predictors"/T$t-compact-{cross-entropy,expected-tau}.safetensors \
    --policy mlp:"$sweeps"/T$t-reference-{cross-entropy,expected-tau}.safetensors \
    --policy pooled:"$predictors"/T$t-pooled-{cross-entropy,expected-tau}.safetensors --json-out "$sweeps/eval-T$t.json"
  /usr/bin/python3 examples/plots/plot_eval.py "$sweeps/eval-T$t.json" "$sweeps/eval-T$t.png"

  echo "== T = $t: held-out prompts, live (tokens/s; the policy list in both orders, pooled)"
  rule=$([ "$t" = 0 ] && echo greedy || echo rejection)
  policies=(none "$fixed" "mlp:$predictors/T$t-compact-expected-tau.safetensors"
            "mlp:$sweeps/T$t-reference-expected-tau.safetensors"
            "refine:$predictors/T$t-compact-expected-tau.safetensors,$predictors/T$t-pooled-expected-tau.safetensors" oracle)
  for order in forward reverse; do
    list=()
    for p in "${policies[@]}"; do [ $order = forward ] && list+=(--policy "$p") || list=(--policy "$p" "${list[@]}"); done
    $B measure --model "$model" --drafter lookup --prompts ../shared/data/prompts/sharegpt_60.txt --lines 41:60 \
      --max-new-tokens 64 --temperature "$t" --rule "$rule" --quiet --oracle-sweep "$eval" "${objective[@]}" \
      "${list[@]}" --json-out "$sweeps/measure-T$t-$order.json"
  done
  /usr/bin/python3 examples/plots/pool_measure.py "$sweeps/measure-T$t.json" "$sweeps"/measure-T$t-{forward,reverse}.json
done
/usr/bin/python3 examples/plots/plot_measure.py "$sweeps/measure.png" "$sweeps"/measure-T?.json

echo "== early exit (the target's first 24 of 30 layers): greedy at T = 0, both rules at T = 1"
for run in 0:greedy 1:sample-match 1:rejection; do
  t=${run%%:*} rule=${run#*:}
  [[ " ${1:-0 1} " == *" $t "* ]] || continue
  $B measure --model "$model" --drafter early-exit:24 --prompts ../shared/data/prompts/sharegpt_60.txt --lines 41:50 \
    --max-new-tokens 64 --temperature "$t" --rule "$rule" --quiet --policy none --policy fixed:2 --policy fixed:3 \
    --json-out "$sweeps/early-exit-T$t-$rule.json"
done
