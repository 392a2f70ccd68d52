#!/usr/bin/env bash
# The learned block size on the mixed workload (examples/data/prompts/mixed/): SmolLM2-135M-Instruct with
# int8 activations and prompt lookup, T = 0. Sweeps the training and held-out splits at b = 1..5
# (resumable), trains predictors on the training sweep with the row's compact features, the prompt's
# features and both, scores them on the held-out sweep (speed objective, the step cost fitted on the
# training sweep) and decodes the held-out prompts live with the best of them beside fixed sizes and the
# confidence cut-off. Usage: scripts/mixed-results.sh [OUT] (default results/mixed); BLOCKPILOT_ROUNDS
# sets the live rounds (default 2). Writes the predictors to examples/data/predictors/smollm2-lookup-mixed/.
set -euo pipefail
[ $# -ge 1 ] && set -- "$(realpath -m "$1")" "${@:2}"  # OUT as given, before the cd
cd "$(dirname "$0")/.."

out="${1:-results/mixed}"
B=build/examples/blockpilot
model="gguf:$(scripts/fetch-smollm2.sh)"
prompts=examples/data/prompts/mixed
predictors=examples/data/predictors/smollm2-lookup-mixed
real=(--model "$model" --storage quantized_int8 --drafter lookup --max-new-tokens 64 --temperature 0 --rule greedy)
mkdir -p "$out" "$predictors"

for split in train heldout; do
  echo "== sweep: $split" >&2
  $B sweep "${real[@]}" --window 1:5 --prompt-file "$prompts/$split.jsonl" --out "$out/sweep-$split"
done

cost() { python3 -c 'import json,sys; print(",".join(repr(c) for c in json.load(open(sys.argv[1]))["step_cost"]))' "$1"; }
$B eval --dataset "$out/sweep-train" --window 1:5 --reference 1 --objective speed --policy fixed:{1,2,3,4,5} --policy oracle \
  --json-out "$out/eval-train.json"
objective=(--window 1:5 --objective speed --step-cost "$(cost "$out/eval-train.json")")

echo "== train: compact, prompt and prompt_compact features, both losses" >&2
for features in compact prompt prompt_compact; do
  for loss in cross-entropy expected-tau; do
    $B train --dataset "$out/sweep-train" "${objective[@]}" --features "$features" --top-k 64 --hidden 64,64 \
      --loss "$loss" --quiet --out "$predictors/T0-$features-$loss.safetensors"
  done
done

echo "== held-out prompts, on the dataset (the gain shares are over the best fixed size there)" >&2
policies=()
for features in compact prompt prompt_compact; do
  policies+=(--policy "mlp:$predictors/T0-$features-"{cross-entropy,expected-tau}.safetensors)
done
$B eval --dataset "$out/sweep-heldout" "${objective[@]}" --reference 1 --policy fixed:{1,2,3,4,5} --policy oracle \
  "${policies[@]}" --json-out "$out/eval-heldout.json"
best_fixed=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(max((p for p in r["policies"] if p["policy"].startswith("fixed:")), key=lambda p: p["mean_tau"])["policy"])' "$out/eval-heldout.json")
$B eval --dataset "$out/sweep-heldout" "${objective[@]}" --reference "${best_fixed#fixed:}" --policy "$best_fixed" \
  --policy oracle "${policies[@]}" --json-out "$out/eval-heldout-vs-best-fixed.json"

echo "== held-out prompts, live (policies interleaved prompt by prompt)" >&2
learned="mlp:$predictors/T0-prompt_compact-expected-tau.safetensors"
$B measure "${real[@]}" --prompt-file "$prompts/heldout.jsonl" --rounds "${BLOCKPILOT_ROUNDS:-2}" --quiet \
  --policy none --policy fixed:2 --policy fixed:3 --policy "$learned" --policy cutoff:0.6,fixed:4 \
  --policy "cutoff:0.6,$learned" --json-out "$out/measure-heldout.json"
/usr/bin/python3 examples/plots/mixed_report.py "$out/measure-heldout.json" "$prompts/heldout.jsonl" "$out/measure-heldout.png" | tee "$out/measure-heldout.md"
