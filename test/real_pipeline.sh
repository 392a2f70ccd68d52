#!/usr/bin/env bash
# The real pipeline, reduced: SmolLM2-135M-Instruct with prompt lookup on three COPA prompts (the
# first lines of the shared prompt set, copied to test/data/copa_3.txt; 16 new tokens): sweep (and its
# resume), the committed predictor scored on it, a short training run, and live decodes with that
# predictor and the oracle. Exits 77 (skipped) without the model file.
# Usage: real_pipeline.sh BLOCKPILOT SOURCE_ROOT
set -euo pipefail
bin=$1 root=$2
source "$root/test/support/real_model.sh"
source "$root/test/support/checks.sh"
predictor=$root/examples/data/predictors/smollm2-lookup/T0-compact-expected-tau.safetensors

real=(--model "gguf:$model" --drafter lookup --prompt-file "$root/test/data/copa_3.txt"
      --max-new-tokens 16 --window 1:5 --quiet)
"$bin" sweep "${real[@]}" --pooled-rows 4 --out "$out/sweep"
[ "$(wc -l < "$out/sweep/journal.jsonl")" = 3 ]
cp "$out/sweep/journal.jsonl" "$out/journal-before.jsonl"
"$bin" sweep "${real[@]}" --pooled-rows 4 --out "$out/sweep"   # resumes: decodes nothing again
cmp "$out/journal-before.jsonl" "$out/sweep/journal.jsonl"      # (a decode again would record other timings)

speed=(--window 1:5 --objective speed)
"$bin" eval --dataset "$out/sweep" "${speed[@]}" --reference 1 --policy fixed:1 --policy oracle --policy "mlp:$predictor" \
  --json-out "$out/eval.json"
check "$out/eval.json" 'r["prompts"] == 3 and len(r["step_cost"]) == 5 and r["step_cost"][0] == 1
  and r["policies"][1]["gain_share"] == 1 and r["policies"][2]["fallbacks"] == 0'
"$bin" train --dataset "$out/sweep" "${speed[@]}" --features compact --top-k 16 --hidden 8 --epochs 3 --validation 0.34 \
  --quiet --out "$out/trained.safetensors"

"$bin" measure "${real[@]}" --oracle-sweep "$out/sweep" --objective speed --policy none --policy "mlp:$predictor" \
  --policy oracle --json-out "$out/measure.json"
# Greedy speculative decoding is exact: every policy generates the same number of tokens as plain decoding.
check "$out/measure.json" 'all(p["tokens"] == r["policies"][0]["tokens"] for p in r["policies"])
  and r["policies"][0]["mean_tau"] == 1 and all(1 <= b <= 5 for p in r["policies"][1:] for b in p["first_block_size"])'

# The per-step policies on the mixed workload's prompt format (JSON lines, three training prompts):
# still exact, interleaved over two rounds, the step times measured at load recorded.
mixed=(--model "gguf:$model" --storage quantized_int8 --prompt-file "$root/test/data/mixed_3.jsonl" --max-new-tokens 24 --quiet)
# A predictor of the prompt's and the row's features, alone and as the cut-off's inner size.
"$bin" train --dataset "$out/sweep" "${speed[@]}" --features prompt_compact --top-k 16 --hidden 8 --epochs 3 --validation 0.34 \
  --quiet --out "$out/prompt.safetensors"
"$bin" measure "${mixed[@]}" --drafter lookup --rounds 2 --policy none --policy adaptive --policy cutoff:0.3 --policy cutoff:0.6,adaptive:8 \
  --policy "mlp:$out/prompt.safetensors" --policy "cutoff:0.6,mlp:$out/prompt.safetensors" \
  --json-out "$out/mixed.json" >"$out/mixed.txt"
check "$out/mixed.json" 'r["rounds"] == 2 and len(r["step_seconds_at_load"]) == 16
  and all(p["tokens"] == r["policies"][0]["tokens"] and len(p["tokens"]) == 6 for p in r["policies"])
  and r["prompts"] == ["mixed:1", "mixed:2", "mixed:3"] and r["policies"][2]["mean_tau"] > 1'
grep -q "95 % interval" "$out/mixed.txt"
# Lookup with the shipped corpus of the target's writing, and lookup alone in the same run (@DRAFTER): exact.
"$bin" measure "${mixed[@]}" --drafter "lookup:evidence,corpus=$root/examples/data/corpora/smollm2-int8-greedy.json" \
  --policy none --policy speed:8 --policy speed:8@lookup:evidence --json-out "$out/corpus.json" >/dev/null
check "$out/corpus.json" 'all(p["tokens"] == r["policies"][0]["tokens"] for p in r["policies"])
  and r["policies"][2]["policy"] == "speed:8@lookup:evidence" and r["workload"]["drafter"].endswith("corpus=smollm2-int8-greedy.json")'
# Served two at a time (their blocks scored in one pass; joint: the drafts planned for the pair): exact,
# every request as long as alone.
"$bin" measure "${mixed[@]}" --drafter "lookup:evidence,corpus=$root/examples/data/corpora/smollm2-int8-greedy.json" \
  --batch 2 --policy none --policy fixed:3 --policy speed:8 --policy joint:8,learn_costs=0 \
  --json-out "$out/batch.json" >"$out/batch.txt"
check "$out/batch.json" 'r["batch"] == 2 and all(p["tokens"] == r["policies"][0]["tokens"] for p in r["policies"])
  and all(len(p["groups"]["decode_seconds"]) == 2 and sum(p["groups"]["tokens"]) == sum(p["tokens"]) - 1 for p in r["policies"])'
check "$out/corpus.json" "r['policies'][0]['tokens'] == $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["policies"][0]["tokens"])' "$out/batch.json")"
grep -q "served 2 at a time" "$out/batch.txt"
expect 2 "decodes alone" "$bin" measure "${mixed[@]}" --drafter lookup --batch 2 --policy none --policy fixed:2@lookup:evidence
printf '{"prompt": "fine"}\n["not", "an object"]\n' >"$out/bad.jsonl"
expect 2 'line 2 is not a JSON object with a "prompt" string' "$bin" measure --model "gguf:$model" --prompt-file "$out/bad.jsonl" --policy none
expect 2 "the cut-off needs a drafter that reports its confidence" "$bin" measure "${mixed[@]}" --drafter early-exit:4 --policy cutoff:0.5

# generate streams the text and shows no special tokens (the reply ends with <|im_end|>, a stop token).
"$bin" generate --model "gguf:$model" --prompt "Name three colours." --max-new-tokens 48 --policy fixed:4 >"$out/generate.txt"
refute grep -qF "<|im_end|>" "$out/generate.txt"
grep -q "generated [0-9]* tokens" "$out/generate.txt"
"$bin" generate --model "gguf:$model" --prompt "Name three colours." --max-new-tokens 48 --policy fixed:4 --json >"$out/generate.json"
check "$out/generate.json" 'r["generated"] >= 1 and "<|im_end|>" not in r["text"] and r["text"].strip()
  and r["text"] in open(sys.argv[1].replace(".json", ".txt")).read()'
# Every policy of measure but the sweep's and the batch's: greedy output is plain decoding's.
copy_prompt="Repeat this twice: the quick brown fox jumps over the lazy dog."
"$bin" generate --model "gguf:$model" --prompt "$copy_prompt" --max-new-tokens 32 --drafter none --json >"$out/plain.json"
for policy in speed:8 "cutoff:0.5,fixed:4" adaptive:6; do
  "$bin" generate --model "gguf:$model" --prompt "$copy_prompt" --max-new-tokens 32 --drafter lookup:evidence \
    --policy "$policy" --json >"$out/policy.json"
  python3 -c 'import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); sys.exit(a["text"] != b["text"])' \
    "$out/plain.json" "$out/policy.json"
done
expect 2 "a policy of measure's" "$bin" generate --model "gguf:$model" --prompt hi --policy oracle
expect 2 "plain decoding (--drafter none) has no block size to choose" "$bin" generate --model "gguf:$model" --prompt hi \
  --drafter none --policy mlp:nosuch.safetensors
expect 2 "the cut-off needs a drafter that reports its confidence" \
  "$bin" generate --model "gguf:$model" --prompt hi --drafter early-exit:4 --policy cutoff:0.5

# The model's context length (8192) bounds a request: a clear error, not an allocation of gigabytes.
for cmd in "generate --prompt hi --max-new-tokens 65536" \
           "sweep --prompt-file $root/test/data/copa_3.txt --window 1:2 --max-new-tokens 1048576 --out $out/long"; do
  expect 2 "exceeds the model's context length of 8192" "$bin" $cmd --model "gguf:$model"
done
# Two prompt files of one name would give two prompts one key.
expect 2 "gives the key copa:1 that" "$bin" sweep --model "gguf:$model" --prompt-file "$root/test/data/copa_3.txt" \
  --prompt-file "$root/test/data/copa_3.txt" --window 1:2 --out "$out/twice"
# --prompts is the synthetic mode's count: with a model it points to --prompt-file.
expect 2 "a synthetic-mode option; not with --model (prompt files: --prompt-file)" \
  "$bin" sweep --model "gguf:$model" --prompts 4 --window 1:2 --out "$out/count"
# A 10 MB prompt line is refused before it is tokenized (which would take minutes and gigabytes).
python3 -c "print('x' * 10_000_000)" >"$out/long.txt"
expect 2 "10000000 bytes cannot fit the model's context length of 8192" \
  "$bin" sweep --model "gguf:$model" --prompt-file "$out/long.txt" --window 1:2 --out "$out/long"
echo "real pipeline: OK"
