#!/usr/bin/env python3
"""Several requests at once on the same SmolLM2 target in Hugging Face transformers: transformers' own batched
greedy generation against engine_loop.decode_batch over one batched cache (hf_models.HFBatchVerifier: every
step one forward pass over every request's block, padded to the longest) with the lookup drafter at fixed block
sizes and with the drafts of the whole batch planned each step (a BatchPlan by the padded block's width, the
step cost of each width measured here at the start, and the speed cut-off's learned chances). Greedy (T = 0):
every output is compared with transformers' batched greedy decoding; tokens/s per variant come from rounds
that interleave the variants group by group.

Writes <out>/batch.json and its table and plot (side_by_side_report.py): batch.md, batch.png.
Needs examples/python/requirements.txt and the package (pip install .); the model file comes from
scripts/fetch-smollm2.sh.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import numpy as np
import torch
import transformers

import blockpilot as bp
import engine_loop
import side_by_side_report
from hf_models import HFBatchVerifier
from hf_runs import GGUF, REPO, Variant, add_template_argument, chat_prompts, load_model, measure
from prompt_lines import load_prompts


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", type=pathlib.Path, default=GGUF)
    p.add_argument("--prompts", type=pathlib.Path, default=REPO / "examples/data/prompts/mixed/heldout.jsonl",
                   help="a text file (a prompt a line) or JSON lines with a 'prompt' field")
    p.add_argument("--lines", default="1:100", help="1-based inclusive line range of the prompt file (held out)")
    p.add_argument("--every", type=int, default=1, help="every this many lines of the range")
    add_template_argument(p)
    p.add_argument("--batch", type=int, default=4, help="requests decoded together")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--device", default="cpu", help="where the model runs: cpu or cuda")
    p.add_argument("--sizes", default="2,3", help="fixed block sizes of the lookup drafter")
    p.add_argument("--max-block", type=int, default=8, help="the planned batch's widest block")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "results" / "hf-batch")
    return p.parse_args()


def measure_width_seconds(model, prompts, max_width: int, repeats: int = 3) -> list[float]:
    """Seconds of a batch step whose blocks all have w rows, w = 1..max_width (the median of `repeats` rounds
    with the widths interleaved), after a prefill of `prompts`; each step keeps one token of every request."""
    verifier = HFBatchVerifier(model, rows_on_host=False)
    verifier.prefill(prompts)
    requests = list(range(len(prompts)))
    seconds: list[list[float]] = [[] for _ in range(max_width)]
    for _ in range(repeats):
        for w in range(1, max_width + 1):
            blocks = [np.resize(p, w) for p in prompts]
            start = time.perf_counter()
            rows = verifier.score(requests, blocks)
            rows[-1, 0].item()  # the pass has finished (a device's too)
            seconds[w - 1].append(time.perf_counter() - start)
            verifier.commit(requests, [1] * len(prompts))
    return [statistics.median(s) for s in seconds]


def main():
    args = parse_args()
    tokenizer, model = load_model(args.gguf, args.device, args.threads)
    eos = tokenizer.eos_token_id
    vocab = model.config.vocab_size
    prompts = chat_prompts(tokenizer, load_prompts(args.prompts, args.lines, args.every), args.template)
    groups = [prompts[i:i + args.batch] for i in range(0, len(prompts), args.batch)]

    def until_stop(tokens: list[int]) -> list[int]:
        return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens

    def hf(group):
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), eos, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(group):  # left-padded, as transformers batches for generation
            ids[i, width - len(p):] = torch.from_numpy(p.astype(np.int64))
            mask[i, width - len(p):] = 1
        with torch.inference_mode():
            out = model.generate(ids.to(args.device), attention_mask=mask.to(args.device),
                                 max_new_tokens=args.max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos)
        return [until_stop(row[width:].tolist()) for row in out], {}

    def ours(policy_factory):
        def run(group):
            tokens, s = engine_loop.decode_batch(HFBatchVerifier(model, rows_on_host=False),
                                                 bp.LookupDrafter(vocab, confidence="evidence"), group, policy_factory(),
                                                 max_new_tokens=args.max_new_tokens, stop_tokens=[eos])
            request_steps = sum(s.rows) - s.drafted
            return [t.tolist() for t in tokens], {"tau": (s.accepted + request_steps) / max(request_steps, 1),
                                                  "steps": s.steps, "rows": sum(s.rows),
                                                  "plan_seconds": s.seconds["plan"]}
        return run

    width_seconds = measure_width_seconds(model, groups[0], args.max_block)
    width_cost = [s / width_seconds[0] for s in width_seconds]
    cutoff = bp.SpeedCutoff(width_cost, learn_costs=False)  # one for every group: it learns; the plan prices
    plan = bp.BatchPlan(width_cost, padded=True)
    written = lambda outputs: sum(len(o) for o in outputs)  # noqa: E731
    variants = [Variant(f"transformers: greedy, {args.batch} at a time", "transformers", hf, written),
                Variant("blockpilot batch: plain (b = 1)", "blockpilot", ours(lambda: 1), written)]
    variants += [Variant(f"blockpilot batch: lookup, b = {b}", "blockpilot", ours(lambda b=b: b), written)
                 for b in map(int, args.sizes.split(","))]
    variants.append(Variant(f"blockpilot batch: lookup, planned by width (up to {args.max_block})", "blockpilot planned",
                            ours(lambda: (cutoff, plan)), written))

    measure(variants, groups, args.rounds, warm_up=[p[:32] for p in groups[0]], unit_name="group")

    rows = []
    reference = [o for group in variants[0].outputs for o in group]
    for v in variants:
        outputs = [o for group in v.outputs for o in group]
        row = {"variant": v.name, "family": v.family, "seconds": v.seconds, "tokens": v.tokens,
               "identical_outputs": sum(a == b for a, b in zip(outputs, reference)), "prompts": len(outputs)}
        if v.notes[0]:
            row["tau"] = statistics.fmean(n["tau"] for n in v.notes)
            row["rows_per_token"] = sum(n["rows"] for n in v.notes) / sum(len(o) for o in outputs)
            row["plan_seconds_per_group"] = statistics.fmean(n["plan_seconds"] for n in v.notes)
        rows.append(row)
    setup = {"model": args.gguf.name + " in transformers", "template": args.template,
             "prompts": f"{args.prompts.name} lines {args.lines}" + (f" every {args.every}" if args.every > 1 else "")
             + f", {args.batch} at a time: relative speed group by group",
             "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "threads": args.threads, "device": args.device,
             "batch": args.batch, "groups": len(groups), "torch": torch.__version__,
             "transformers": transformers.__version__, "width_seconds": width_seconds, "width_cost": width_cost}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "batch.json"
    path.write_text(json.dumps({"setup": setup, "reference": variants[0].name, "variants": rows}, indent=1))
    print(side_by_side_report.write(path), end="")
    print(f"step cost by the widest block (b = 1..{args.max_block}): " + ", ".join(f"{c:.2f}" for c in width_cost))


if __name__ == "__main__":
    main()
