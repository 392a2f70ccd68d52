#!/usr/bin/env python3
"""A draft vocabulary for the DFlash drafter: the target's tokens ranked by how often the target writes
them, counted over a corpus of its own continuations (a trace of `blockpilot measure --trace-out`, by
default lookup's corpus, examples/data/corpora/smollm2-int8-greedy.json: continuations of training-side
prompts only). `--drafter dflash:FOLDER,vocab=N` drafts from the first N (its output head shrinks to
those rows); tokens the corpus never shows are not ranked. Standard library only.

  python3 make_draft_vocab.py [--corpus TRACE] [--out FOLDER/draft_vocab.json]
"""

import argparse
import collections
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=pathlib.Path, default=ROOT / "examples/data/corpora/smollm2-int8-greedy.json")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "examples/data/drafters/smollm2-dflash/draft_vocab.json")
    args = parser.parse_args()
    trace = json.loads(args.corpus.read_text())
    counts = collections.Counter(t for r in trace["requests"] for t in r["tokens"])
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    total = sum(counts.values())
    coverage = {}
    seen = 0
    for i, t in enumerate(ranked, 1):
        seen += counts[t]
        if i in (1024, 2048, 4096, 8192, 16384) or i == len(ranked):
            coverage[str(i)] = round(seen / total, 5)
    out = {
        "what": "the target's tokens, most written first (ties by id), for --drafter dflash:FOLDER,vocab=N",
        "made_by": "examples/dflash_train/make_draft_vocab.py",
        "corpus": args.corpus.resolve().relative_to(ROOT).as_posix() if args.corpus.resolve().is_relative_to(ROOT) else str(args.corpus),
        "corpus_tokens": total,
        "vocab": trace.get("vocab"),
        "coverage": coverage,
        "tokens": ranked,
        "counts": [counts[t] for t in ranked],
    }
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"{len(ranked)} tokens ranked from {total} written; share of the corpus covered by the first N: {coverage}")


if __name__ == "__main__":
    main()
