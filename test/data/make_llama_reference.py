#!/usr/bin/env python3
# Writes test/data/llama_reference.json for test/test_llama.cpp: Hugging Face `transformers` runs
# SmolLM2-135M-Instruct from the same GGUF file (its own GGUF loader and dequantisation, PyTorch's Llama
# forward in float32) on prompts of examples/data/prompts: greedy continuations from `generate`, and the
# prompt's last-row logits (top 50, a strided sample of the row and whole-row statistics), also in
# float64 to show how far float32 itself is from the exact forward.
#
# Usage (about a minute on two cores, most of it loading):
#   python3 -m venv ~/.cache/blockpilot/venv-reference
#   ~/.cache/blockpilot/venv-reference/bin/pip install -r test/data/requirements-reference.txt
#   ~/.cache/blockpilot/venv-reference/bin/python test/data/make_llama_reference.py [GGUF] [OUT.json]
# GGUF defaults to $BLOCKPILOT_SMOLLM2_GGUF or ~/.cache/blockpilot/SmolLM2-135M-Instruct.Q4_1.gguf
# (scripts/fetch-smollm2.sh). Prompt token ids are the ChatML ids of test/data/tokenizer_reference.json
# (Hugging Face `tokenizers`, equal to the C++ tokenizer by test/test_tokenizer.cpp).
import copy
import json
import math
import os
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig

GREEDY_TOKENS = 32
TOP = 50
STRIDE = 512  # every 512th logit of the row: 96 values
# Candidates (source file, line number from 0): short COPA prompts and ShareGPT prompts up to 1345 tokens,
# taken in order until WANTED are kept. A candidate whose greedy path comes within MIN_MARGIN of a tie
# between its two best tokens is left out (and listed in the file): there float32 rounding alone picks
# the token (float32 and float64 logits differ by ~4e-5 here), so no exact match can be asked of it.
CANDIDATES = [("copa.txt", 0), ("copa.txt", 1), ("copa.txt", 2), ("sharegpt_60.txt", 1), ("sharegpt_60.txt", 2),
              ("sharegpt_60.txt", 4), ("sharegpt_60.txt", 30), ("sharegpt_60.txt", 21), ("sharegpt_60.txt", 5),
              ("sharegpt_60.txt", 6), ("sharegpt_60.txt", 13)]
WANTED = 8
MIN_MARGIN = 1e-3


def byte_decoder():
    """GPT-2 byte-level alphabet: token characters back to bytes."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        table[chr(b) if b in printable else chr(256 + extra)] = b
        extra += b not in printable
    return table


def main():
    here = Path(__file__).resolve().parent
    path = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "BLOCKPILOT_SMOLLM2_GGUF", Path.home() / ".cache/blockpilot/SmolLM2-135M-Instruct.Q4_1.gguf"))
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else here / "llama_reference.json"
    torch.manual_seed(0)
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    tokenizer_reference = json.load(open(here / "tokenizer_reference.json"))
    by_source = {}
    for c in tokenizer_reference["cases"]:
        by_source.setdefault(c["source"], []).append(c)
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    to_byte = byte_decoder()
    detokenize = lambda ids: b"".join(
        bytes(to_byte[ch] for ch in tokens[t]) if all(ch in to_byte for ch in tokens[t]) else tokens[t].encode()
        for t in ids).decode("utf-8", "replace")

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    exact = copy.deepcopy(model).to(torch.float64)
    # No stop token: every continuation is GREEDY_TOKENS long, whatever it contains (generate falls back
    # to the model's own generation config for a value that the one passed leaves unset).
    model.generation_config.eos_token_id = None
    greedy = GenerationConfig(max_new_tokens=GREEDY_TOKENS, min_new_tokens=0, do_sample=False, num_beams=1,
                              eos_token_id=None, pad_token_id=model.config.pad_token_id, output_scores=True,
                              return_dict_in_generate=True)

    cases, left_out = [], []
    for source, line in CANDIDATES:
        if len(cases) == WANTED:
            break
        case = by_source[source][line]
        prompt = case["chat_ids"]
        ids = torch.tensor([prompt])
        with torch.no_grad():
            row = model(ids).logits[0, -1].double().numpy()
            row64 = exact(ids).logits[0, -1].numpy()
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=greedy)
        continuation = generated.sequences[0, len(prompt):].tolist()
        assert len(continuation) == GREEDY_TOKENS, (source, line, len(continuation))
        margins = []
        for step, scores in enumerate(generated.scores):
            top2 = torch.topk(scores[0].double(), 2)
            assert int(top2.indices[0]) == continuation[step]
            margins.append(float(top2.values[0] - top2.values[1]))
        if min(margins) < MIN_MARGIN:
            left_out.append({"source": source, "line": line, "greedy_min_margin": min(margins)})
            print(f"{source}:{line}: left out, top-2 margin {min(margins):.2e} on its greedy path", file=sys.stderr)
            continue
        top = np.argsort(-row, kind="stable")[:TOP]
        peak = row.max()
        cases.append({
            "source": source, "line": line, "user": case["text"][:80],
            "prompt": prompt, "greedy": continuation, "greedy_text": detokenize(continuation),
            "greedy_min_margin": min(margins),
            "argmax": int(top[0]),
            "top_ids": top.tolist(), "top_values": row[top].tolist(), "top_values_float64": row64[top].tolist(),
            "stride": STRIDE, "strided_values": row[::STRIDE].tolist(),
            "logsumexp": float(peak + math.log(np.exp(row - peak).sum())),
            "mean": float(row.mean()), "std": float(row.std()), "min": float(row.min()), "max": float(peak),
            "float32_vs_float64_max_abs": float(np.abs(row - row64).max()),
        })
        print(f"{source}:{line} ({len(prompt)} tokens) -> {cases[-1]['greedy_text']!r} "
              f"(smallest top-2 margin {min(margins):.3f}, float32 vs float64 {cases[-1]['float32_vs_float64_max_abs']:.2e})",
              file=sys.stderr)
    json.dump({"generator": "transformers " + transformers.__version__ + ", torch " + torch.__version__ +
                            " (float32, CPU), from the GGUF file; test/data/make_llama_reference.py",
               "model": path.name, "greedy_tokens": GREEDY_TOKENS, "min_margin": MIN_MARGIN, "left_out": left_out,
               "cases": cases},
              open(out, "w"), indent=None, separators=(",", ":"))
    print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
