"""What the transformers comparisons share: the model and its chat-templated prompts, and variants measured in
rounds that interleave them unit by unit (a prompt, or a group of prompts served together)."""

from __future__ import annotations

import os
import pathlib
import sys
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("BLOCKPILOT_CACHE", pathlib.Path.home() / ".cache" / "blockpilot"))
GGUF = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_model(gguf: pathlib.Path, device: str, threads: int):
    """(tokenizer, model): the GGUF file's model in float32 on `device`, evaluation mode."""
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(threads)
    if not gguf.exists():
        sys.exit(f"{gguf} not found: run scripts/fetch-smollm2.sh (or scripts/fetch-gemma3.sh)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return tokenizer, model.to(device).eval()


def add_template_argument(parser) -> None:
    """--template: how chat_prompts tokenises the prompts."""
    parser.add_argument("--template", choices=["chat", "raw"], default="chat",
                        help="the prompt as the user's chat turn, or as plain text (a base model without a chat template)")


def chat_prompts(tokenizer, texts: list[str], template: str = "chat") -> list[np.ndarray]:
    """Each text as the user's turn of the chat template, ready for the assistant's reply ("chat"), or as plain
    text for a base model to continue ("raw"): int32 token ids."""
    if template == "raw":
        return [np.asarray(tokenizer(text)["input_ids"], dtype=np.int32) for text in texts]
    return [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"][0].numpy().astype(np.int32)
            for text in texts]


class Variant:
    """One way of decoding: run(unit) -> (outputs, note); `count(outputs)` is the tokens it wrote."""

    def __init__(self, name: str, family: str, run, count=len):
        self.name, self.family, self.run, self.count = name, family, run, count
        self.seconds: list[list[float]] = []  # [round][unit]
        self.tokens: list[list[int]] = []  # [round][unit]
        self.outputs: list = []  # round 0, per unit
        self.notes: list[dict] = []  # round 0, per unit


def measure(variants: list[Variant], units: list, rounds: int, warm_up, unit_name: str = "prompt") -> None:
    """Runs every variant on `warm_up` (not measured), then `rounds` rounds over the units, each unit by every
    variant in an order that rotates from unit to unit and from round to round; progress on stderr."""
    for v in variants:
        v.run(warm_up)
    for r in range(rounds):
        for v in variants:
            v.seconds.append([])
            v.tokens.append([])
        for i, unit in enumerate(units):
            shift = (r + i) % len(variants)  # r * len(units) + i would repeat the order when V divides the units
            for v in variants[shift:] + variants[:shift]:
                start = time.perf_counter()
                outputs, note = v.run(unit)
                v.seconds[-1].append(time.perf_counter() - start)
                v.tokens[-1].append(v.count(outputs))
                if r == 0:
                    v.outputs.append(outputs)
                    v.notes.append(note)
            print(f"round {r + 1}/{rounds}, {unit_name} {i + 1}/{len(units)}", file=sys.stderr, flush=True)
