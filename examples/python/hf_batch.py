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
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

import blockpilot as bp
import engine_loop
import side_by_side_report
from hf_models import HFBatchVerifier

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("BLOCKPILOT_CACHE", pathlib.Path.home() / ".cache" / "blockpilot"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", type=pathlib.Path, default=CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--prompts", type=pathlib.Path, default=REPO / "examples/data/prompts/mixed/heldout.jsonl",
                   help="a text file (a prompt a line) or JSON lines with a 'prompt' field")
    p.add_argument("--lines", default="1:100", help="1-based inclusive line range of the prompt file (held out)")
    p.add_argument("--every", type=int, default=1, help="every this many lines of the range")
    p.add_argument("--batch", type=int, default=4, help="requests decoded together")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--device", default="cpu", help="where the model runs: cpu or cuda")
    p.add_argument("--sizes", default="2,3", help="fixed block sizes of the lookup drafter")
    p.add_argument("--max-block", type=int, default=8, help="the planned batch's widest block")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "results" / "hf-batch")
    return p.parse_args()


def load_prompts(path: pathlib.Path, lines: str, every: int) -> list[str]:
    first, last = (int(x) for x in lines.split(":"))
    text = path.read_text(encoding="utf-8").splitlines()[first - 1:last:every]
    return [json.loads(line)["prompt"] for line in text] if path.suffix == ".jsonl" else text


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


class Variant:
    def __init__(self, name: str, family: str, run):
        self.name, self.family, self.run = name, family, run
        self.seconds: list[list[float]] = []  # [round][group]
        self.tokens: list[list[int]] = []  # [round][group]
        self.outputs: list[list[list[int]]] = []  # round 0: per group, per request
        self.notes: list[dict] = []  # round 0, per group


def main():
    args = parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    if not args.gguf.exists():
        sys.exit(f"{args.gguf} not found: run scripts/fetch-smollm2.sh")
    tokenizer = AutoTokenizer.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name)
    model = AutoModelForCausalLM.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name, dtype=torch.float32)
    model = model.to(args.device).eval()
    eos = tokenizer.eos_token_id
    vocab = model.config.vocab_size
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             return_tensors="pt")["input_ids"][0].numpy().astype(np.int32)
               for text in load_prompts(args.prompts, args.lines, args.every)]
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
    variants = [Variant(f"transformers: greedy, {args.batch} at a time", "transformers", hf),
                Variant("blockpilot batch: plain (b = 1)", "blockpilot", ours(lambda: 1))]
    variants += [Variant(f"blockpilot batch: lookup, b = {b}", "blockpilot", ours(lambda b=b: b))
                 for b in map(int, args.sizes.split(","))]
    variants.append(Variant(f"blockpilot batch: lookup, planned by width (up to {args.max_block})", "blockpilot planned",
                            ours(lambda: (cutoff, plan))))

    for v in variants:  # warm-up, not measured
        v.run([p[:32] for p in groups[0]])
    for r in range(args.rounds):
        for v in variants:
            v.seconds.append([])
            v.tokens.append([])
        for g, group in enumerate(groups):
            shift = (r * len(groups) + g) % len(variants)
            for v in variants[shift:] + variants[:shift]:
                start = time.perf_counter()
                outputs, note = v.run(group)
                v.seconds[-1].append(time.perf_counter() - start)
                v.tokens[-1].append(sum(len(o) for o in outputs))
                if r == 0:
                    v.outputs.append(outputs)
                    v.notes.append(note)
            print(f"round {r + 1}/{args.rounds}, group {g + 1}/{len(groups)}", file=sys.stderr, flush=True)

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
    setup = {"model": args.gguf.name + " in transformers",
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
