#!/usr/bin/env bash
# Keeps what fuzzing found: merges the inputs a fuzzing build wrote (BUILD/test/fuzz_corpus_NAME, e.g.
# after .ci/run) into the seed corpora in test/fuzz/corpus_NAME, keeping the smallest set of files that
# covers the same features (libFuzzer's -merge=1). Commit the result.
#   scripts/merge-fuzz-corpora.sh [BUILD]     default: build-fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
for exe in "$build"/test/fuzz_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  name=${exe##*/fuzz_}
  corpus=test/fuzz/corpus_$name
  before=$(ls "$corpus" | wc -l)
  "$exe" -merge=1 -rss_limit_mb=2048 "$corpus" "$build/test/fuzz_corpus_$name" >/dev/null 2>&1
  echo "$name: $before -> $(ls "$corpus" | wc -l) inputs"
done
