#!/usr/bin/env bash
# The blockpilot program as people use it, on the synthetic pair (no model file): exit codes and
# messages of usage errors and bad inputs, --version, --json output, and that the comparison finds
# the repository's examples/data/ from any working directory.
# Usage: cli.sh BLOCKPILOT
set -euo pipefail
bin=$(realpath "$1")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
source "$(dirname "$0")/support/checks.sh"
cd "$out"   # nothing may depend on the working directory
json() { python3 -c "import json, sys; r = json.load(open(sys.argv[1])); assert ($2), r" "$1"; }

# Usage errors: exit 2 with the parser's message; an unknown subcommand lists the subcommands.
expect 2 "unknown subcommand 'nosuch'" "$bin" nosuch
grep -q "compare, replay, replay-steps, sweep, train, eval, predict, generate, measure" stderr.txt
expect 2 "not expected: --bogus" "$bin" compare --bogus
expect 2 "--acceptance-dir is required" "$bin" replay
expect 2 "not in range" "$bin" compare --prompts x
# --prompts counts synthetic prompts; prompt files are --prompt-file and need a model.
expect 2 "not in range" "$bin" sweep --prompts prompts.txt --out s0
expect 2 "--prompt-file: needs --model" "$bin" sweep --prompt-file prompts.txt --out s0
"$bin" --version | grep -q "^blockpilot [0-9]"

# compare checks every option (and reads the measured data) before it sweeps.
expect 2 "size 10 is not among --sizes" "$bin" compare --window 10:12
expect 2 "acceptance folder not found" "$bin" compare --acceptance-dir "$out/nosuch"
"$bin" compare --prompts 4 --max-new-tokens 32 --vocab 512 --quiet --json >compare.json
json compare.json 'r["real"]["prompts"] == 32 and r["real_source"].endswith("examples/data/acceptance/gsm8k_T0")'

# Sweeps: bounded windows, no empty shard, the summary as JSON.
expect 2 "needs 1 <= LO <= HI <= 64" "$bin" sweep --window 2:100 --prompts 4 --out s0
synthetic=(--vocab 512 --max-new-tokens 16 --window 2:4 --quiet)
expect 2 "--shard 5/8: this shard holds no prompt (there are 4)" "$bin" sweep "${synthetic[@]}" --prompts 4 --shard 5/8 --out s0
"$bin" sweep "${synthetic[@]}" --prompts 12 --out s512 --json >sweep.json
json sweep.json 'r["prompts"] == 12 and set(r["mean_tau"]) == {"2", "3", "4", "16"}'
"$bin" sweep --vocab 1024 --max-new-tokens 16 --window 2:4 --quiet --prompts 4 --out s1024
grep -q '"rule": "greedy"' s512/sweep.json
refute grep -q partial <(ls -a s512)   # files are written beside and renamed into place
# Shards merge into a new folder, with the prompts of both; a folder that holds anything is refused.
"$bin" sweep "${synthetic[@]}" --prompts 4 --shard 0/2 --out shard0
"$bin" sweep "${synthetic[@]}" --prompts 4 --shard 1/2 --out shard1
"$bin" sweep --merge shard0 shard1 --out merged | grep -q "merged 2 folders: 4 prompts"
"$bin" eval --dataset merged --window 2:4 --json | python3 -c 'import json, sys; r = json.load(sys.stdin); sys.exit(r["prompts"] != 4)'
expect 2 "--out s1024 is not empty" "$bin" sweep --merge shard0 shard1 --out s1024
expect 2 "--merge joins finished sweeps: not with --window" "$bin" sweep --merge shard0 shard1 --window 2:3 --out merged2
# A folder's settings are the whole of sweep.json: a resumed sweep without one of them is another sweep.
python3 -c 'import json; p = "shard0/sweep.json"; s = json.load(open(p)); s["extra"] = 1; json.dump(s, open(p, "w"))'
expect 2 "field 'extra': 1 there, absent now" "$bin" sweep "${synthetic[@]}" --prompts 4 --shard 0/2 --out shard0
# Another shard, or other prompts, into a sweep's folder would replace its dataset; a folder with files but no
# sweep.json (measured data, a merged sweep) is never written to. Each is refused and leaves the folder as it was.
grep -q '"shard": "1/2"' shard1/sweep.json
cp -r shard1 shard1.before
expect 2 "field 'prompts': \"2 prompts, " "$bin" sweep "${synthetic[@]}" --prompts 4 --shard 0/2 --out shard1
expect 2 "field 'prompts': \"2 prompts, " "$bin" sweep "${synthetic[@]}" --prompts 6 --shard 1/2 --out shard1
diff -r shard1 shard1.before
# A sweep.json from before the shard and the prompt set were recorded resumes, and records them.
python3 -c 'import json; p = "shard1/sweep.json"; s = json.load(open(p)); del s["shard"], s["prompts"]; json.dump(s, open(p, "w"))'
"$bin" sweep "${synthetic[@]}" --prompts 4 --shard 1/2 --out shard1 >/dev/null
grep -q '"shard": "1/2"' shard1/sweep.json
cp -r merged merged.before
expect 2 "but no sweep.json (not a sweep's folder" "$bin" sweep "${synthetic[@]}" --prompts 4 --out merged
diff -r merged merged.before
mkdir measured
echo '{}' >measured/16.json
expect 2 "sweep folder 'measured' holds 16.json but no sweep.json" "$bin" sweep "${synthetic[@]}" --prompts 4 --out measured
test "$(ls -A measured)" = 16.json
expect 2 "--merge joins finished sweeps: not with --max-new-tokens" "$bin" sweep --merge shard0 shard1 --max-new-tokens 8 --out merged3
expect 2 "--merge joins finished sweeps: not with --no-chat" "$bin" sweep --merge shard0 shard1 --no-chat --out merged3
# Numbers are plain decimals: the parser would read 010 as 8, 0x40 as 64, 0x1p-2 as 0.25 and an unsigned -1
# as 2^64 - 1, and range checks let nan through.
for bad in "--prompts 010" "--prompts 0x40" "--temperature nan" "--temperature 0x1p-2" "--seed -1"; do
  expect 2 "is not a decimal" "$bin" sweep $bad --out s-bad
  test ! -e s-bad
done
# One sweep per folder: a second one stops at once while the first holds the folder's lock.
mkdir -p locked
expect 2 "is in use by another sweep" flock locked/.lock "$bin" sweep "${synthetic[@]}" --prompts 4 --out locked

# train: learning rates that diverge are refused; the summary as JSON.
train=(train --dataset s512 --window 2:4 --features compact --top-k 8 --hidden 8 --epochs 3 --validation 0.34 --quiet)
expect 2 "--lr: Value 1e30 not in range" "$bin" "${train[@]}" --lr 1e30 --out bad.safetensors
expect 2 "--epochs: Value 0 not in range" "$bin" "${train[@]}" --epochs 0 --out bad.safetensors
expect 2 "--feature-temperature: Value 0 not in range" "$bin" "${train[@]}" --feature-temperature 0 --out bad.safetensors
[ ! -e bad.safetensors ]
expect 2 "--out: folder 'nosuch' does not exist" "$bin" "${train[@]}" --out nosuch/p.safetensors
"$bin" "${train[@]}" --json --out p.safetensors >train.json
json train.json 'r["epochs"] == 3 and 1 <= r["best_epoch"] <= 3'
# A second stage learns from the features the sweep pooled: feature options would be ignored, so they are refused.
"$bin" sweep "${synthetic[@]}" --prompts 12 --pooled-rows 2 --out pooled >/dev/null
second=(train --dataset pooled --window 2:4 --input pooled --hidden 8 --epochs 3 --quiet --out pooled.safetensors)
expect 2 "--input pooled: the features are those the sweep recorded: not with --top-k" "$bin" "${second[@]}" --top-k 8
"$bin" "${second[@]}" >/dev/null
expect 2 "--window: 2:3 holds 2 sizes; the window B-k..B+k holds an odd number" "$bin" "${second[@]/2:4/2:3}"
# What the predictor file records is checked before the training: a pooled recipe that names no transform.
cp -r pooled pooled-bad
python3 - pooled-bad/dataset.safetensors <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header["__metadata__"]["pooled_feature.name"] = "full_row"
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
expect 2 "the full_row features' parameters name no 'transform'" "$bin" train --dataset pooled-bad --window 2:4 --input pooled \
  --hidden 8 --epochs 3 --quiet --out pooled-bad.safetensors
test ! -e pooled-bad.safetensors
# The prompt's features: sweeps keep the prompts' tokens, and predictors read them in eval and predict.
"$bin" train --dataset s512 --window 2:4 --features prompt_compact --top-k 8 --hidden 8 --epochs 3 --validation 0.34 \
  --quiet --out pc.safetensors
"$bin" eval --dataset s512 --window 2:4 --policy mlp:pc.safetensors --json >eval_pc.json
json eval_pc.json 'r["policies"][0]["fallbacks"] == 0 and len(r["policies"][0]["chosen"]) == 12'
"$bin" predict --predictor pc.safetensors --dataset s512 --json >predict_pc.json
json predict_pc.json 'len(r["predictions"]) == 12 and all(not p["fallback"] for p in r["predictions"])'

# A predictor for another vocabulary is refused at load, not run with a fallback on every prompt.
expect 2 "field 'vocab_size': trained for a vocabulary of 512 tokens, the target has 1024" \
  "$bin" eval --dataset s1024 --window 2:4 --policy mlp:p.safetensors
expect 2 "field 'vocab_size'" "$bin" measure --vocab 1024 --prompts 2 --max-new-tokens 8 --quiet --policy mlp:p.safetensors

# predict: unknown prompt keys are errors; --json.
expect 2 "--prompt nosuch: no such prompt" "$bin" predict --predictor p.safetensors --dataset s512 --prompt nosuch
"$bin" predict --predictor p.safetensors --dataset s512 --prompt 3 --json >predict.json
json predict.json 'len(r["predictions"]) == 1 and r["predictions"][0]["prompt"] == "3" and 2 <= r["predictions"][0]["block_size"] <= 4'

# Per-step policy specs are checked before anything decodes.
expect 2 "expected cutoff:P_MIN[,INNER] with 0 <= P_MIN <= 1" "$bin" measure --prompts 2 --policy cutoff:1.5
expect 2 "expected adaptive or adaptive:MAX with 1 <= MAX <= 16" "$bin" measure --prompts 2 --policy adaptive:99
expect 2 "the cut-off needs a drafter that reports its confidence" "$bin" measure --prompts 2 --policy cutoff:0.5
# Policy specs are read before the model is loaded: a mistyped one fails at once.
for command in "generate --prompt hi --drafter lookup" "measure --prompt-file x"; do
  expect 2 "--policy speed:20: expected speed or speed:MAX with 1 <= MAX <= 16" "$bin" $command --model nosuch.gguf --policy speed:20
done
expect 2 "@DRAFTER needs --drafter lookup" "$bin" measure --prompts 2 --policy none --policy fixed:2@lookup
expect 2 "--versus fixed:3: not one of the --policy specs" "$bin" measure --prompts 2 --policy none --policy fixed:2 --versus fixed:3
expect 2 "--versus compares tokens/s" "$bin" measure --prompts 2 --policy none --policy fixed:2 --versus fixed:2
expect 2 "--batch: needs --model" "$bin" measure --prompts 2 --batch 2 --policy none
expect 2 "plans the drafts of requests served together: needs --batch" "$bin" measure --prompts 2 --policy joint:8
"$bin" measure --vocab 512 --prompts 4 --max-new-tokens 16 --quiet --policy fixed:2 --policy adaptive --rounds 2 --json >adaptive.json
json adaptive.json 'r["rounds"] == 2 and len(r["policies"][1]["tau"]) == 8 and len(r["step_seconds_at_load"]) == 16'

# replay-steps replays the greedy decodes that measure --trace-out recorded, with prompt lookup.
"$bin" measure --vocab 512 --prompts 4 --max-new-tokens 16 --quiet --policy none --trace-out trace.json >/dev/null
json trace.json 'len(r["requests"]) == 4 and r["vocab"] == 512 and all(len(q["tokens"]) == 16 for q in r["requests"])'
"$bin" replay-steps --traces trace.json --step-cost 1,1.1,1.2,1.3 --window 1:4 --policy none --policy fixed:4 \
  --policy cutoff:0.5,fixed:4 --policy speed:4,explore=0.5,positions=2,cost_prior=8 --json-out replay.json >replay.txt
grep -q "4 requests replayed" replay.txt
json replay.json '[p["policy"] for p in r["policies"]][-2:] == ["oracle:1:4", "step-oracle"] and r["policies"][0]["tau"] == [1.0] * 4'
# The per-step oracle is never slower than any policy replayed beside it.
json replay.json 'all(sum(p["decode_seconds"]) >= sum(r["policies"][-1]["decode_seconds"]) - 1e-9 for p in r["policies"])'
"$bin" replay-steps --traces trace.json --step-cost 1,1.1,1.2,1.3 --prior-cost 1,1.3,1.6,1.9 --timing-noise 0.2 \
  --drafter lookup:evidence --policy speed:4 --json-out replay2.json >/dev/null
json replay2.json 'r["replay"]["prior_cost"] == [1, 1.3, 1.6, 1.9] and len(r["policies"]) == 3'
# Lookup with a corpus of the target's writing: a trace (here the same one) gives the n-gram table.
"$bin" replay-steps --traces trace.json --step-cost 1,1.1,1.2,1.3 --drafter lookup:evidence,corpus=trace.json \
  --policy fixed:4 --json-out replay4.json >/dev/null
json replay4.json 'len(r["policies"]) == 3'
expect 2 "the corpus nosuch.json: cannot be read" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 \
  --drafter lookup,corpus=nosuch.json
expect 2 ": not a trace of \`measure --trace-out\`" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 \
  --drafter lookup,corpus=replay4.json
python3 -c 'import json; t = json.load(open("trace.json")); t["vocab"] += 1; json.dump(t, open("other-model.json", "w"))'
expect 2 "cutoff:0.5,16: expected fixed:B" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --policy cutoff:0.5,16
expect 2 "holds tokens of a vocabulary of" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 \
  --drafter lookup,corpus=other-model.json
# Traces are checked whole: a token outside the vocabulary, a corpus (no prompt ids) given as the traces.
python3 -c 'import json; t = json.load(open("trace.json")); t["requests"][1]["tokens"][3] = 512; json.dump(t, open("bad.json", "w"))'
expect 2 "--traces bad.json: request 1 holds token 512, outside the vocabulary of 512" \
  "$bin" replay-steps --traces bad.json --step-cost 1,1.1
for token in 1.9 4294967808 '"5"'; do  # never rounded, wrapped to 512 (a 32-bit id) or read from a string
  python3 -c 'import json, sys; t = json.load(open("trace.json")); t["requests"][1]["tokens"][3] = json.loads(sys.argv[1]); json.dump(t, open("bad.json", "w"))' "$token"
  expect 2 "--traces bad.json: request 1 holds token $token, " "$bin" replay-steps --traces bad.json --step-cost 1,1.1
done
python3 -c 'import json; t = json.load(open("trace.json")); t["vocab"] = 512.5; json.dump(t, open("bad.json", "w"))'
expect 2 "--traces bad.json: vocab 512.5 is not an integer" "$bin" replay-steps --traces bad.json --step-cost 1,1.1
python3 -c 'import json; t = json.load(open("trace.json")); del t["requests"][0]["prompt_ids"]; json.dump(t, open("bad.json", "w"))'
expect 2 "has no token ids (a corpus, not a trace)" "$bin" replay-steps --traces bad.json --step-cost 1,1.1
expect 2 "every cost finite and > 0" "$bin" replay-steps --traces trace.json --step-cost 1,-1,1.2 --policy fixed:2
expect 2 "fixed:8: reaches b = 8, past the 3 sizes" "$bin" replay-steps --traces trace.json --step-cost 1,1.1,1.2 --policy fixed:8
expect 2 "--window: sets how --policy oracle chooses: needs --oracle-sweep" "$bin" measure --prompts 2 --policy none --window 3:9
# The oracle decodes the prompts its sweep measured: another prompt set under the same keys is refused.
"$bin" measure --vocab 512 --max-new-tokens 16 --prompts 4 --quiet --policy oracle --oracle-sweep merged --window 2:4 >/dev/null
expect 2 "prompt '0' has other tokens there" "$bin" measure --vocab 512 --max-new-tokens 16 --prompts 4 --prompt-seed 7 \
  --quiet --policy oracle --oracle-sweep merged --window 2:4
"$bin" replay-steps --traces trace.json --step-cost 1,1.1 --policy fixed:2 --json >replay3.json
json replay3.json '[p["policy"] for p in r["policies"]] == ["fixed:2", "oracle:1:2", "step-oracle"]'
# Output files are checked before the work: a missing or read-only folder is refused and nothing is written.
expect 2 "--json-out: folder 'nosuch' does not exist" "$bin" measure --prompts 2 --policy none --json-out nosuch/m.json
expect 2 "--trace-out: folder 'nosuch' does not exist" "$bin" measure --prompts 2 --policy none --trace-out nosuch/t.json
expect 2 "--json-out: 's512' is a folder" "$bin" eval --dataset s512 --window 2:4 --json-out s512
expect 2 "the reference size 7: not among the dataset's block sizes (2, 3, 4, 16)" "$bin" eval --dataset s512 --window 2:4 --reference 7
expect 2 "the window's size 5: not among" "$bin" eval --dataset s512 --window 2:5
mkdir -p readonly && chmod a-w readonly
if [ "$(id -u)" != 0 ]; then  # root writes anywhere
  expect 2 "--json-out: folder 'readonly' is not writable" "$bin" compare --prompts 4 --json-out readonly/c.json
fi
expect 2 "--json-out: folder 'nosuch' does not exist" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --json-out nosuch/r.json
[ ! -e nosuch ]
[ -z "$(ls readonly)" ]
expect 2 "as many sizes as --step-cost" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --prior-cost 1,1.1,1.2
expect 2 "prior_timings" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --policy speed:2,cost_prior=0
expect 2 "needs plain decoding (--policy none) first" "$bin" measure --prompts 2 --temperature 1 --policy fixed:4 --trace-out t.json
# At T > 0 plain decoding's continuations are the target's samples (training data), not replayable.
"$bin" measure --vocab 512 --prompts 2 --max-new-tokens 8 --quiet --temperature 1 --policy none --trace-out sampled.json >/dev/null
json sampled.json 'r["temperature"] == 1 and len(r["requests"]) == 2'
expect 2 "the replay needs a greedy (T = 0) trace" "$bin" replay-steps --traces sampled.json --step-cost 1,1.1
expect 2 "not a trace of \`measure --trace-out\`" "$bin" replay-steps --traces replay.json --step-cost 1,1.1
expect 2 "read no logits" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --policy mlp:p.safetensors
expect 2 "unknown option 'bogus'" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --policy speed:2,bogus=1
expect 2 "no cost for 4" "$bin" replay-steps --traces trace.json --step-cost 1,1.1 --window 1:4

# measure on the synthetic pair reports tau, not tokens/s ratios that compare nothing.
"$bin" measure --vocab 512 --prompts 4 --max-new-tokens 16 --quiet --policy fixed:2 --policy fixed:16 >measure.txt
grep -q "measured tau only" measure.txt
refute grep -q "speedup" measure.txt
"$bin" measure --vocab 512 --prompts 4 --max-new-tokens 16 --quiet --policy fixed:2 --json >measure.json
json measure.json 'r["timing_comparable"] is False and r["policies"][0]["policy"] == "fixed:2"'
echo "cli: OK"
