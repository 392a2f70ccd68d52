#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds, and runs the main job, the block-size policy comparison:
#  1. the synthetic pair swept over block sizes next to the replay of the measured DFlash data;
#  2. the BlockPilot pipeline on the synthetic pair: sweep training and held-out prompts, train the
#     compact predictor (both losses), the reference-shape predictor and the refining policy's second
#     stage (features pooled over the first 16 rows), evaluate on held-out prompts against fixed
#     sizes and the per-prompt oracle, and measure the policies live on the held-out prompts.
# Tables go to the terminal, JSON and plots to results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build examples/blockpilot
B=./build/examples/blockpilot
mkdir -p results

echo "== Synthetic pair vs measured DFlash acceptance =="
$B compare --json-out results/compare.json
echo
$B replay --acceptance-dir examples/data/acceptance/gsm8k_T0 \
  --selection examples/data/acceptance/gsm8k_T0/selected_by_reference_predictor.json
/usr/bin/python3 examples/plots/plot_compare.py results/compare.json results/compare.png

echo
echo "== BlockPilot pipeline on the synthetic pair (vocabulary 8192) =="
synthetic=(--vocab 8192 --max-new-tokens 256 --window 14:18)
$B sweep "${synthetic[@]}" --pooled-rows 16 --prompts 2048 --prompt-seed 1 --out results/sweep-train
$B sweep "${synthetic[@]}" --pooled-rows 16 --prompts 512 --prompt-seed 2 --out results/sweep-eval
compact=(--dataset results/sweep-train --features compact --top-k 64 --hidden 256,256 --quiet)
$B train "${compact[@]}" --loss cross-entropy --out results/compact-cross-entropy.safetensors
$B train "${compact[@]}" --loss expected-tau --out results/compact-expected-tau.safetensors
refine=(--dataset results/sweep-train --input pooled --hidden 256,256 --quiet)
$B train "${refine[@]}" --loss cross-entropy --out results/refine-cross-entropy.safetensors
$B train "${refine[@]}" --loss expected-tau --out results/refine-expected-tau.safetensors
echo "training the reference shape (8192 -> 2048 -> 2048 -> 5, raw logits): a few minutes"
$B train --dataset results/sweep-train --features full_row --transform raw_logits --hidden 2048,2048 \
  --loss cross-entropy --lr 1e-4 --epochs 30 --patience 10 --out results/reference-cross-entropy.safetensors
echo
$B eval --dataset results/sweep-eval --policy fixed:16 --policy fixed:17 --policy oracle \
  --policy mlp:results/compact-cross-entropy.safetensors --policy mlp:results/compact-expected-tau.safetensors \
  --policy mlp:results/reference-cross-entropy.safetensors --policy pooled:results/refine-cross-entropy.safetensors \
  --policy pooled:results/refine-expected-tau.safetensors --json-out results/eval.json
/usr/bin/python3 examples/plots/plot_eval.py results/eval.json results/eval.png

echo
echo "== Live decodes of the held-out prompts (measured tau; the refining policy switches after 16 rows) =="
$B measure "${synthetic[@]}" --prompts 512 --prompt-seed 2 --quiet --oracle-sweep results/sweep-eval \
  --policy fixed:16 --policy mlp:results/compact-expected-tau.safetensors \
  --policy refine:results/compact-expected-tau.safetensors,results/refine-expected-tau.safetensors \
  --policy oracle --json-out results/measure.json
