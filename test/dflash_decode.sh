#!/usr/bin/env bash
# The committed DFlash drafter for SmolLM2-135M-Instruct (examples/data/drafters/smollm2-dflash): the C++
# loader and decode loop at b = 4, 8 and 16 (greedy output equal to plain greedy decoding, mean tau at
# least 1.1 at every b: the committed drafter reaches 1.40-1.44 on these three prompts, an untrained one
# 1.03-1.07), then `blockpilot measure --drafter dflash:...` on three COPA prompts with greedy matching
# (with the committed predictor trained with this drafter's first run, and the drafter's fast form) and
# with rejection sampling at T = 1; the committed predictor scored on the committed held-out sweep.
# Exits 77 (skipped) without the model file.
# Usage: dflash_decode.sh CHECK_DRAFTER BLOCKPILOT SOURCE_ROOT
set -euo pipefail
check_drafter=$1 bin=$2 root=$3
source "$root/test/support/real_model.sh"
drafter=$root/examples/data/drafters/smollm2-dflash
predictors=$root/examples/data/predictors/smollm2-dflash

"$check_drafter" "$drafter" "$model" --min-tau 1.1 4 8 16

real=(--model "gguf:$model" --drafter "dflash:$drafter" --prompt-file "$root/test/data/copa_3.txt" --max-new-tokens 16 --quiet)
"$bin" measure "${real[@]}" --policy none --policy fixed:4 --policy "mlp:$predictors/T0-compact-expected-tau.safetensors" \
  --json-out "$out/greedy.json"
# Greedy speculative decoding is exact: the same token counts as plain decoding, and the drafter drafts.
check "$out/greedy.json" 'all(p["tokens"] == r["policies"][0]["tokens"] for p in r["policies"])
  and r["policies"][1]["mean_tau"] > 1 and all(1 <= b <= 5 for b in r["policies"][2]["first_block_size"])'
# The fast form (Q8_0 weights, int8 activations, the 4,096 most written tokens) is as exact, beside the
# fp32 drafter in one run; its options are checked.
fast="dflash:$drafter,vocab=4096,weights=quantized_int8"
"$bin" measure "${real[@]}" --policy none --policy fixed:4 --policy "fixed:4@$fast" --json-out "$out/fast.json"
check "$out/fast.json" 'all(p["tokens"] == r["policies"][0]["tokens"] for p in r["policies"]) and r["policies"][2]["mean_tau"] > 1'
# ... token for token: the first policy's continuations (--trace-out) of the fast form and of plain decoding.
"$bin" measure "${real[@]}" --policy "fixed:4@$fast" --trace-out "$out/fast-trace.json" --json-out "$out/fast-first.json"
"$bin" measure "${real[@]}" --policy none --trace-out "$out/plain-trace.json"
python3 -c "import json, sys; a, b = (json.load(open(f))['requests'] for f in sys.argv[1:]); \
assert [r['tokens'] for r in a] == [r['tokens'] for r in b] and all(len(r['tokens']) > 0 for r in a)" \
  "$out/fast-trace.json" "$out/plain-trace.json"
check "$out/fast-first.json" 'r["policies"][0]["mean_tau"] > 1'
for bad in "vocab=0:vocab=N needs a positive N" "vocab=100000:ranks 14463 tokens" "weights=fp16:expected fp32, quantized or quantized_int8" \
           "layers=2:options are vocab=N and weights="; do
  if "$bin" measure "${real[@]}" --policy none --policy "fixed:2@dflash:$drafter,${bad%%:*}" >"$out/bad.txt" 2>&1 ||
     ! grep -qF -- "${bad#*:}" "$out/bad.txt"; then
    echo "dflash:...,${bad%%:*}: expected an error with \"${bad#*:}\", got:"; cat "$out/bad.txt"; exit 1
  fi
done
"$bin" measure "${real[@]}" --temperature 1 --rule rejection --policy none --policy fixed:4 --json-out "$out/rejection.json"
check "$out/rejection.json" 'r["policies"][1]["steps"] > 0 and all(t >= 1 for t in r["policies"][1]["tau"])'
# The committed predictor learned plain decoding (docs/results.md): on the held-out sweep it matches the
# oracle under the step cost it was trained with, while fixed DFlash(2) loses a third.
"$bin" eval --dataset "$predictors/eval-T0" --window 1:5 --objective speed --step-cost 1,1.698,2.338,2.635,2.984 \
  --reference 1 --policy fixed:2 --policy oracle --policy "mlp:$predictors/T0-compact-expected-tau.safetensors" \
  --json-out "$out/eval.json"
check "$out/eval.json" 'r["prompts"] == 20 and r["policies"][0]["mean_tau"] < 0.8
  and r["policies"][2]["mean_tau"] == r["policies"][1]["mean_tau"] and abs(r["policies"][1]["mean_tau"] - 1) < 1e-9'
echo "dflash decode: OK"
