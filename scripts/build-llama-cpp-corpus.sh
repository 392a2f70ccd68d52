#!/usr/bin/env bash
# Builds lookup's corpus of a model's own writing with llama.cpp (for a model the workbench does not load,
# such as Gemma 3): llama.cpp's greedy continuations (64 new tokens) of training-side prompts only — the
# mixed workload's training split and the first 1,100 self-instruct prompts — in two processes of one
# thread, then joined in the format of `blockpilot measure --trace-out` (examples/data/corpora/).
#   scripts/build-llama-cpp-corpus.sh MODEL.gguf OUT.json [chat|raw]
# About 25 minutes for Gemma 3 270M on two cores. Needs build/examples/llama_cpp_decode.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/build-llama-cpp-corpus.sh MODEL.gguf OUT.json [chat|raw]" >&2
  exit 2
fi
model=$(realpath "$1") out=$(realpath -m "$2") template=${3:-chat}  # paths as given, before the cd
cd "$(dirname "$0")/.."
[ -x build/examples/llama_cpp_decode ] || { echo "build-llama-cpp-corpus.sh: needs build/examples/llama_cpp_decode" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P=examples/data/prompts
decode() {  # file, lines, name
  echo "corpus: $1 lines $2"
  ./build/examples/llama_cpp_decode --model "$model" --template "$template" --prompts "$1" --lines "$2" --threads 1 \
    --rounds 1 --greedy-only --out "$work/$3-run.json" --trace-out "$work/$3.json" 2>"$work/$3.log" >/dev/null ||
    { cat "$work/$3.log" >&2; return 1; }
}
(decode "$P/mixed/train.jsonl" 1:210 a && decode "$P/self_instruct/prompts.jsonl" 1:450 b) & first=$!
decode "$P/self_instruct/prompts.jsonl" 451:1100 c & second=$!
wait $first
wait $second
python3 - "$out" "$work" "$model" "$template" <<'EOF'
import json, os, sys
out, work, model, template = sys.argv[1:5]
traces = [json.load(open(f"{work}/{name}.json")) for name in "abc"]
requests = [{"prompt": r["prompt"], "tokens": r["tokens"]} for t in traces for r in t["requests"]]
corpus = {"what": f"llama.cpp's greedy continuations (64 new tokens) of {os.path.basename(model)} ({template} prompts) "
                  "of training-side prompts: lookup's corpus (--drafter lookup[:evidence],corpus=FILE)",
          "made_by": "scripts/build-llama-cpp-corpus.sh", "vocab": traces[0]["vocab"], "requests": requests}
with open(out, "w") as f:
    json.dump(corpus, f, separators=(",", ":"))
print(f"{out}: {len(requests)} continuations, {sum(len(r['tokens']) for r in requests)} tokens")
EOF
