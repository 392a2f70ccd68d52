#!/usr/bin/env bash
# Builds lookup's corpus of the target's own writing (examples/data/corpora/): the int8 target's greedy
# continuations (64 new tokens) of training-side prompts only — the self-instruct batches and the mixed
# workload's training split — decoded plainly in two processes, one per core, then joined. With T > 0
# the continuations are samples at that temperature, for lookup at T.
#   scripts/build-lookup-corpus.sh [OUT [T]]    (default examples/data/corpora/smollm2-int8-greedy.json, T = 0)
# About 6 minutes per 900 prompts and process on the two-core machine. Needs the release build.
set -euo pipefail
[ $# -ge 1 ] && set -- "$(realpath -m "$1")" "${@:2}"  # OUT as given, before the cd
cd "$(dirname "$0")/.."
out=${1:-examples/data/corpora/smollm2-int8-greedy.json}
temperature=${2:-0}
model=$(bash scripts/fetch-smollm2.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P=examples/data/prompts
# file:lines pairs, split between two workers
jobs=("$P/self_instruct/prompts.jsonl:1:900" "$P/self_instruct/prompts.jsonl:901:1933"
      "$P/self_instruct/prompts-2.jsonl:1:900" "$P/self_instruct/prompts-2.jsonl:901:1800"
      "$P/self_instruct/prompts-2.jsonl:1801:2700" "$P/mixed/train.jsonl:1:210"
      "$P/self_instruct/prompts-2.jsonl:2701:3936" "$P/self_instruct/prompts-3.jsonl:1:1900"
      "$P/self_instruct/prompts-3.jsonl:1901:2788")
decode() {  # decodes job indices $1, $1 + 2, ... into $work/<index>.json
  for ((i = $1; i < ${#jobs[@]}; i += 2)); do
    IFS=: read -r file from to <<<"${jobs[$i]}"
    echo "corpus: $file lines $from..$to"
    ./build/examples/blockpilot measure --model "gguf:$model" --storage quantized_int8 --max-new-tokens 64 \
      --temperature "$temperature" --prompt-file "$file" --lines "$from:$to" --policy none --trace-out "$work/$i.json" --quiet >/dev/null
  done
}
decode 0 & first=$!
decode 1 & second=$!
wait $first
wait $second
python3 - "$out" "$work" "${#jobs[@]}" "$temperature" <<'EOF'
import json, sys
out, work, count, temperature = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
requests = []
for i in range(count):
    trace = json.load(open(f"{work}/{i}.json"))
    requests += [{"prompt": r["prompt"], "tokens": r["tokens"]} for r in trace["requests"]]
kind = "greedy continuations" if temperature == 0 else f"continuations sampled at T = {temperature:g}"
corpus = {"what": f"{kind} (64 new tokens) of SmolLM2-135M-Instruct, int8 activations, of training-side "
                  "prompts: lookup's corpus (--drafter lookup[:evidence],corpus=FILE)",
          "made_by": "scripts/build-lookup-corpus.sh", "vocab": trace["vocab"], "requests": requests}
with open(out, "w") as f:
    json.dump(corpus, f, separators=(",", ":"))
print(f"{out}: {len(requests)} continuations, {sum(len(r['tokens']) for r in requests)} tokens")
EOF
