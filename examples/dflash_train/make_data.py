#!/usr/bin/env python3
"""Self-distilled training data for the DFlash drafter: greedy continuations of the target
(SmolLM2-135M-Instruct, dequantised from its GGUF, float32, Hugging Face `generate`) for the training
prompts, in SmolLM2's chat template.

Prompts, interleaved round-robin in this order so that any --max-prompts prefix mixes the sources:
  - COPA, all 100 lines (examples/data/prompts/copa.txt);
  - ShareGPT lines 1-40 (examples/data/prompts/sharegpt_60.txt); lines 41-60 are the evaluation prompts
    and are never read for training;
  - passages of the Python 3.11 documentation as Debian ships it (package python3.11-doc, its reST
    sources under /usr/share/doc/python3.11/html/_sources), each wrapped in one of four fixed
    instructions ("Explain ...", "Summarize ...", ...). The package is fetched with
    `apt-get download` and unpacked with `dpkg-deb -x` into the work folder (no installation).
    Passages that share any 8-word sequence with an evaluation prompt are dropped (none do in
    practice); the count is stored.

Output (safetensors, default $BLOCKPILOT_CACHE/dflash-train/data.safetensors):
  tokens     int32 [total]      prompt (chat template included) then the target's continuation, per
                                sequence, concatenated
  offsets    int64 [n + 1]      sequence i is tokens[offsets[i]:offsets[i+1]]
  generated  uint8 [total]      1 where the target wrote the token (the continuation, up to and
                                including its <|im_end|>), 0 for prompt tokens
  metadata   "sources" (JSON: file and line or passage of each sequence), "settings", "summary"

Greedy continuations stop at <|im_end|> (kept) or after --new-tokens tokens. Prompts are batched by
length with left padding (--batch); the result is deterministic for a given --batch and thread count
(batching changes only float rounding, which can flip a near-tie between two tokens).

  python make_data.py --max-prompts 5 --new-tokens 32 --out /tmp/smoke.safetensors   # smoke test
  python make_data.py                                                                 # full data
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

import common
from make_prompts import DEBIAN_PACKAGE, PYDOC_TASKS, fetch_debian_docs, prose_passages, shingles

INSTRUCTIONS = list(PYDOC_TASKS.values())


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", type=Path, default=common.default_gguf(), help="the target's GGUF file")
    p.add_argument("--prompts-dir", type=Path, default=common.default_prompts_dir(), help="copa.txt and sharegpt_60.txt")
    p.add_argument("--out", type=Path, default=common.work_dir() / "data.safetensors")
    p.add_argument("--max-prompts", type=int, default=0, help="use only the first N prompts of the interleaved order (0: all)")
    p.add_argument("--text-passages", type=int, default=260, help="passages of the Debian documentation package")
    p.add_argument("--text-dir", type=Path, default=common.work_dir() / DEBIAN_PACKAGE,
                   help=f"unpacked {DEBIAN_PACKAGE} (fetched with apt-get download when absent)")
    p.add_argument("--new-tokens", type=int, default=256, help="largest continuation per prompt")
    p.add_argument("--max-prompt-tokens", type=int, default=4096, help="skip longer prompts")
    p.add_argument("--batch", type=int, default=16, help="prompts per generate call (sorted by length)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    return p.parse_args()


def main():
    args = parse_args()
    import numpy as np
    import torch
    from safetensors.numpy import save_file

    torch.set_num_threads(args.threads)
    t0 = time.time()
    tokenizer = common.build_tokenizer(args.gguf)

    copa = common.read_lines(args.prompts_dir / "copa.txt")
    sharegpt = common.read_lines(args.prompts_dir / "sharegpt_60.txt")
    assert len(sharegpt) == 60, f"{args.prompts_dir / 'sharegpt_60.txt'}: expected 60 lines"
    copa_items = [({"source": "copa.txt", "line": i + 1}, line) for i, line in enumerate(copa)]
    share_items = [({"source": "sharegpt_60.txt", "line": n}, sharegpt[n - 1]) for n in common.TRAIN_SHAREGPT_LINES]
    eval_shingles = set().union(*(shingles(sharegpt[n - 1]) for n in common.EVAL_SHAREGPT_LINES))
    train_eval_overlap = sum(bool(shingles(text) & eval_shingles) for _, text in share_items + copa_items)

    text_items, dropped = [], 0
    if args.text_passages > 0:
        sources = fetch_debian_docs(args.text_dir)
        passages = prose_passages(sources)
        random.Random(20250607).shuffle(passages)
        for rel, text in passages:
            if len(text_items) == args.text_passages:
                break
            if shingles(text) & eval_shingles:
                dropped += 1
                continue
            k = len(text_items) % len(INSTRUCTIONS)
            text_items.append(({"source": DEBIAN_PACKAGE, "file": rel, "instruction": k}, INSTRUCTIONS[k].format(text)))
        print(f"{DEBIAN_PACKAGE}: {len(passages)} prose passages, {len(text_items)} taken, {dropped} dropped "
              "for sharing 8 words with an evaluation prompt", file=sys.stderr)

    order = []
    for i in range(max(len(copa_items), len(share_items), len(text_items))):
        order += [lst[i] for lst in (copa_items, share_items, text_items) if i < len(lst)]
    if args.max_prompts > 0:
        order = order[:args.max_prompts]
    items = []
    for info, user in order:
        ids = tokenizer.encode(common.chat_text(user), add_special_tokens=False).ids
        if len(ids) <= args.max_prompt_tokens:
            items.append((info, ids))
    assert not any(common.MASK_TOKEN_ID in ids for _, ids in items), "the mask token occurs in a prompt"

    print(f"loading the target from {args.gguf}", file=sys.stderr)
    target = common.load_target(args.gguf)
    from transformers import GenerationConfig
    greedy = GenerationConfig(max_new_tokens=args.new_tokens, do_sample=False, num_beams=1,
                              eos_token_id=list(common.STOP_IDS), pad_token_id=common.ENDOFTEXT)
    target.generation_config.eos_token_id = list(common.STOP_IDS)

    generated_tokens, t_gen = 0, time.time()

    def progress(done, width, new_tokens):
        nonlocal generated_tokens
        generated_tokens += new_tokens
        elapsed = time.time() - t_gen
        eta = elapsed / done * (len(items) - done)
        print(f"[{done}/{len(items)}] prompts of up to {width} tokens: {generated_tokens} tokens generated, "
              f"{generated_tokens / elapsed:.1f} tokens/s, ETA {eta / 60:.1f} min", file=sys.stderr, flush=True)

    continuations = common.continue_batched(target, [ids for _, ids in items], greedy, args.batch, after_batch=progress)

    tokens, generated, offsets = [], [], [0]
    for (info, prompt), cont in zip(items, continuations):
        tokens += prompt + cont
        generated += [0] * len(prompt) + [1] * len(cont)
        offsets.append(len(tokens))
    assert common.MASK_TOKEN_ID not in tokens, "the mask token occurs in the data"
    summary = {
        "sequences": len(items),
        "by_source": {s: sum(info["source"] == s for info, _ in items) for s in ("copa.txt", "sharegpt_60.txt", DEBIAN_PACKAGE)},
        "tokens": len(tokens), "generated_tokens": int(sum(generated)),
        "ended_with_im_end": sum(bool(c) and c[-1] == common.IM_END for c in continuations),
        "passages_dropped_for_eval_overlap": dropped,
        "training_prompts_sharing_8_words_with_eval": train_eval_overlap,
        "mask_token_occurrences": 0,
        "seconds": round(time.time() - t0, 1),
    }
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    settings.update({"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "gguf_file": args.gguf.name, "system": common.DEFAULT_SYSTEM})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file({"tokens": np.asarray(tokens, dtype=np.int32), "offsets": np.asarray(offsets, dtype=np.int64),
               "generated": np.asarray(generated, dtype=np.uint8)}, str(args.out),
              metadata={"sources": json.dumps([info for info, _ in items]), "settings": json.dumps(settings),
                        "summary": json.dumps(summary), "made_by": "examples/dflash_train/make_data.py"})
    print(json.dumps(summary), file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
