#!/usr/bin/env python3
"""Measures tau(b), the mean acceptance length per decode step, of a trained DFlash drafter against the
target, for every block size b given: greedy (T = 0) speculative decoding with the reference decode loop
(`dflash.model.dflash_generate`, PyPI dflash 0.1.0), the target dequantised from its GGUF in float32.
tau of a prompt is the mean of the loop's acceptance lengths (accepted drafts + 1 per step, at most b);
the curve is the mean over prompts (macro mean, as the C++ statistics report it).

Prompts are chat-templated lines of the shared prompt files, by default training prompts only
(COPA 1-10 and ShareGPT 1-10): use the curve to choose B_train. The evaluation prompts (ShareGPT 41-60)
are refused unless --evaluation is given (for final reporting, never for choosing).

  python tau_curve.py --drafter DIR/drafter --sizes 2,4,6,8,12,16 --out DIR/tau_curve.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

import common


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drafter", type=Path, required=True, help="folder with config.json + model.safetensors")
    p.add_argument("--gguf", type=Path, default=common.default_gguf())
    p.add_argument("--prompts-dir", type=Path, default=common.default_prompts_dir())
    p.add_argument("--prompts", action="append", default=None,
                   help="FILE:A-B (1-based, inclusive), repeatable (default copa.txt:1-10 and sharegpt_60.txt:1-10)")
    p.add_argument("--evaluation", action="store_true", help="allow ShareGPT lines 41-60 (reporting only)")
    p.add_argument("--sizes", default="2,4,8,12,16", help="block sizes b")
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--max-prompt-tokens", type=int, default=1024, help="skip longer prompts")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, help="write the curve and per-prompt values here (JSON); a .png beside it")
    return p.parse_args()


def main():
    args = parse_args()
    import torch
    import dflash.model as dm

    torch.set_num_threads(args.threads)
    dm._cuda_time = time.perf_counter        # the reference times with torch.cuda.synchronize(); on the CPU, the clock
    specs = args.prompts or ["copa.txt:1-10", "sharegpt_60.txt:1-10"]
    tokenizer = common.build_tokenizer(args.gguf)
    prompts = []
    for spec in specs:
        name, _, span = spec.partition(":")
        lines = common.read_lines(args.prompts_dir / name)
        a, b = (int(x) for x in span.split("-")) if span else (1, len(lines))
        for n in range(a, b + 1):
            if name.startswith("sharegpt") and n in common.EVAL_SHAREGPT_LINES and not args.evaluation:
                sys.exit(f"{name}:{n} is an evaluation prompt (pass --evaluation to measure on it)")
            ids = tokenizer.encode(common.chat_text(lines[n - 1]), add_special_tokens=False).ids
            if len(ids) <= args.max_prompt_tokens:
                prompts.append((f"{name}:{n}", ids))
    sizes = [int(x) for x in args.sizes.split(",")]
    target = common.load_target(args.gguf)
    draft = dm.DFlashDraftModel.from_pretrained(str(args.drafter), dtype=torch.float32).eval()
    print(f"{len(prompts)} prompts, sizes {sizes}, drafter {args.drafter} (B_train {draft.block_size}, "
          f"target layers {draft.target_layer_ids}, mask {draft.mask_token_id})", file=sys.stderr)

    result = {"drafter": str(args.drafter), "prompts": [n for n, _ in prompts], "new_tokens": args.new_tokens,
              "temperature": 0, "tau": {}, "per_prompt": {}, "tokens_per_second": {}}
    for b in sizes:
        taus, produced, seconds = [], 0, 0.0
        for name, ids in prompts:
            t0 = time.perf_counter()
            r = dm.dflash_generate(draft, target, torch.tensor([ids]), args.new_tokens, list(common.STOP_IDS),
                                   temperature=0.0, block_size=b, return_stats=True)
            seconds += time.perf_counter() - t0
            produced += r.num_output_tokens
            taus.append(sum(r.acceptance_lengths) / max(1, len(r.acceptance_lengths)))
        result["tau"][b] = sum(taus) / len(taus)
        result["per_prompt"][b] = taus
        result["tokens_per_second"][b] = produced / seconds
        print(f"b = {b:2d}: tau {result['tau'][b]:.3f} ({produced / seconds:.1f} tokens/s in Python)", file=sys.stderr, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(sizes, [result["tau"][b] for b in sizes], "o-")
        ax.set_xlabel("block size b"); ax.set_ylabel("tau (mean acceptance length)"); ax.grid(alpha=0.3)
        ax.set_title(f"B_train = {draft.block_size}, {len(prompts)} prompts, T = 0")
        fig.tight_layout()
        fig.savefig(args.out.with_suffix(".png"), dpi=100)
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
