#!/usr/bin/env python3
"""A target in Hugging Face transformers (SmolLM2 by default; any GGUF file transformers loads), decoded by
transformers' own generation (plain greedy, prompt lookup, assisted generation with an early-exit assistant)
and through blockpilot.generate (plain, the lookup drafter at fixed block sizes, at the learned predictor's
size and per step by the speed cut-off, the early-exit drafter), and by an engine's own loop around the
package's parts (engine_loop.py, at the learned size and per step by the speed cut-off: on a GPU the decision
and the acceptance run on the device rows). Greedy (T = 0) on held-out prompts: every output is compared with
transformers' plain greedy decoding, and tokens/s per variant come from rounds that interleave the variants
prompt by prompt.

Writes <out>/side_by_side.json, and the table and plot of it (side_by_side_report.py): side_by_side.md,
side_by_side.png.
Needs examples/python/requirements.txt and the package (pip install .); the model file comes from
scripts/fetch-smollm2.sh, or for a second model family scripts/fetch-gemma3.sh (Gemma 3 270M, a base model:
--gguf FILE --template raw --predictor none).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics

import numpy as np
import torch
import transformers

import blockpilot as bp
import engine_loop
import side_by_side_report
from hf_models import HFGreedyDrafter, HFVerifier, truncated_copy
from hf_runs import GGUF, REPO, Variant, add_template_argument, chat_prompts, load_model, measure
from prompt_lines import load_prompts


VARIANT_KEYS = ["hf-lookup", "hf-assisted", "plain", "lookup", "learned", "speed", "loop-learned", "loop-speed",
                "early-exit"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", type=pathlib.Path, default=GGUF)
    p.add_argument("--prompts", type=pathlib.Path, default=REPO / "examples/data/prompts/sharegpt_60.txt")
    p.add_argument("--lines", default="41:60", help="1-based inclusive line range of the prompt file (held out)")
    p.add_argument("--every", type=int, default=1, help="every this many lines of the range")
    add_template_argument(p)
    p.add_argument("--predictor", default=str(REPO / "examples/data/predictors/smollm2-lookup/T0-compact-cross-entropy.safetensors"),
                   help="the learned block-size predictor (trained for SmolLM2), or 'none' to leave out its variants")
    p.add_argument("--variants", default=",".join(VARIANT_KEYS),
                   help="which variants beside transformers' greedy decoding: any of " + ", ".join(VARIANT_KEYS))
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--device", default="cpu", help="where the model runs: cpu or cuda")
    p.add_argument("--lookup-sizes", default="2,3", help="fixed block sizes of blockpilot's lookup drafter")
    p.add_argument("--speed-max-block", type=int, default=8,
                   help="the speed cut-off's largest block (its step costs are measured here for b = 1..this)")
    p.add_argument("--hf-lookup", default="3", help="prompt_lookup_num_tokens values of transformers' prompt lookup")
    p.add_argument("--assistant-layers", type=int, default=12, help="layers of the early-exit assistant / drafter")
    p.add_argument("--early-exit-size", type=int, default=4,
                   help="block size with the early-exit drafter (transformers' assisted generation drafts one less)")
    p.add_argument("--check-rows", default="",
                   help="block sizes, e.g. 2,4,8: after the rounds, compare the model's rows in blocks of these sizes "
                        "with the same rows alone on every prompt's greedy output (bp.check_block_invariance)")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "results" / "hf-side-by-side")
    return p.parse_args()


def rows_alike(verifier, prompts, outputs, sizes: list[int]) -> list[dict]:
    """bp.check_block_invariance over every prompt and its greedy output, per size: rows and argmax changes
    summed, the largest difference."""
    total = {b: {"block_size": b, "rows": 0, "max_abs_difference": 0.0, "argmax_changes": 0} for b in sizes}
    for ids, out in zip(prompts, outputs):
        if len(out) < 2:
            continue
        for c in bp.check_block_invariance(verifier, ids.numpy().astype(np.int32), out, sizes):
            t = total[c["block_size"]]
            t["rows"] += c["rows"]
            t["argmax_changes"] += c["argmax_changes"]
            t["max_abs_difference"] = max(t["max_abs_difference"], c["max_abs_difference"])
    return list(total.values())


def main():
    args = parse_args()
    wanted = set(args.variants.split(","))
    if not wanted <= set(VARIANT_KEYS):
        raise SystemExit(f"--variants: unknown {sorted(wanted - set(VARIANT_KEYS))}")
    tokenizer, model = load_model(args.gguf, args.device, args.threads)
    assistant = truncated_copy(model, args.assistant_layers).eval()
    eos = tokenizer.eos_token_id
    predictor = None if args.predictor == "none" else bp.Predictor.load(args.predictor, target_vocab=model.config.vocab_size)
    texts = load_prompts(args.prompts, args.lines, args.every)
    prompts = [torch.from_numpy(ids.astype(np.int64)) for ids in chat_prompts(tokenizer, texts, args.template)]

    def hf(**options):
        def run(ids):
            ids = ids.to(args.device)[None]
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                     do_sample=False, eos_token_id=eos, pad_token_id=eos, **options)
            return out[0, ids.shape[1]:].tolist(), {}
        return run

    verifier = HFVerifier(model)

    def ours(drafter_factory, policy):
        def run(ids):
            result = bp.generate(verifier, drafter_factory(), ids.numpy().astype(np.int32), policy=policy,
                                 max_new_tokens=args.max_new_tokens, stop_tokens=[eos])
            s = result.stats
            return result.tokens.tolist(), {"block_size": s.block_size, "tau": s.tau, "steps": s.steps,
                                            "policy_seconds": s.seconds["policy"]}
        return run

    rows_where_computed = HFVerifier(model, rows_on_host=False)
    on_device = args.device.startswith("cuda")
    decide = bp.CudaPredictor(predictor) if on_device and predictor else predictor

    def own_loop(drafter_factory, policy):
        def run(ids):
            tokens, s = engine_loop.decode(rows_where_computed, drafter_factory(), ids.numpy(), policy,
                                           max_new_tokens=args.max_new_tokens, stop_tokens=[eos])
            return tokens.tolist(), {"block_size": s.block_size, "tau": s.tau, "steps": s.steps,
                                     "policy_seconds": s.seconds["decide"]}
        return run

    lookup = lambda: bp.LookupDrafter(model.config.vocab_size)  # noqa: E731
    graded = lambda: bp.LookupDrafter(model.config.vocab_size, confidence="evidence")  # noqa: E731
    step_seconds = bp.measure_step_seconds(verifier, prompts[0].numpy().astype(np.int32), args.speed_max_block, repeats=5)
    step_costs = [s / step_seconds[0] for s in step_seconds]
    speed = bp.SpeedCutoff(step_costs)  # one for every request: it learns
    speed_own_loop = bp.SpeedCutoff(step_costs)  # the engine loop's, learning from its own steps
    variants = [Variant("transformers: greedy", "transformers", hf())]
    chosen = {key: [] for key in VARIANT_KEYS}
    chosen["hf-lookup"] = [Variant(f"transformers: prompt lookup {k}", "transformers", hf(prompt_lookup_num_tokens=k))
                           for k in map(int, args.hf_lookup.split(","))]
    drafts = args.early_exit_size - 1  # the same speculation as blockpilot's early-exit variant
    # transformers reads these from the assistant's own generation config (the target's are ignored), and a
    # confidence threshold of None means its default 0.4, which would end drafts early.
    assistant.generation_config.num_assistant_tokens = drafts
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    chosen["hf-assisted"] = [Variant(f"transformers: assisted ({args.assistant_layers}-layer), {drafts} drafts",
                                     "transformers", hf(assistant_model=assistant))]
    chosen["plain"] = [Variant("blockpilot: plain (b = 1)", "blockpilot", ours(lambda: None, 1))]
    chosen["lookup"] = [Variant(f"blockpilot: lookup, b = {b}", "blockpilot", ours(lookup, b))
                        for b in map(int, args.lookup_sizes.split(","))]
    where = "device" if on_device else "host"
    if predictor is not None:
        chosen["learned"] = [Variant("blockpilot: lookup, learned b", "blockpilot learned", ours(lookup, predictor))]
        chosen["loop-learned"] = [Variant(f"engine loop: lookup, learned b (decision and acceptance on the {where})",
                                          "engine loop learned", own_loop(lookup, decide))]
    chosen["speed"] = [Variant("blockpilot: lookup, speed cut-off", "blockpilot", ours(graded, speed))]
    chosen["loop-speed"] = [Variant(f"engine loop: lookup, speed cut-off (acceptance on the {where})", "engine loop",
                                    own_loop(graded, speed_own_loop))]
    chosen["early-exit"] = [Variant(f"blockpilot: early exit ({args.assistant_layers}-layer), b = {args.early_exit_size}",
                                    "blockpilot", ours(lambda: HFGreedyDrafter(assistant), args.early_exit_size))]
    variants += [v for key in VARIANT_KEYS if key in wanted for v in chosen[key]]

    measure(variants, prompts, args.rounds, warm_up=prompts[0][:32])

    rows = []
    for v in variants:
        row = {"variant": v.name, "family": v.family, "seconds": v.seconds, "tokens": v.tokens,
               "identical_outputs": sum(o == ref for o, ref in zip(v.outputs, variants[0].outputs)),
               "prompts": len(prompts)}
        if v.notes and v.notes[0]:
            row["tau"] = statistics.fmean(n["tau"] for n in v.notes)
            row["block_sizes"] = [n["block_size"] for n in v.notes]
            row["policy_seconds_per_request"] = statistics.fmean(n["policy_seconds"] for n in v.notes)
        rows.append(row)
    setup = {"model": args.gguf.name + " in transformers", "template": args.template,
             "prompts": f"{args.prompts.name} lines {args.lines}" + (f" every {args.every}" if args.every > 1 else ""),
             "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "threads": args.threads,
             "device": args.device, "torch": torch.__version__, "transformers": transformers.__version__,
             "predictor": pathlib.Path(args.predictor).name,
             "step_costs_measured": step_costs, "step_costs_learned": speed.step_costs,
             "step_costs_learned_engine_loop": speed_own_loop.step_costs}
    if args.check_rows:
        sizes = [int(b) for b in args.check_rows.split(",")]
        setup["block_invariance"] = {"transformers": rows_alike(verifier, prompts, variants[0].outputs, sizes)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "side_by_side.json"
    path.write_text(json.dumps({"setup": setup, "reference": variants[0].name, "variants": rows}, indent=1))
    print(side_by_side_report.write(path), end="")


if __name__ == "__main__":
    main()
