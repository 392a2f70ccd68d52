#!/usr/bin/env python3
"""Writes the DFlash agreement data of test/test_dflash.cpp with the reference drafter code (PyPI `dflash`
0.1.0, `dflash.model.DFlashDraftModel`):

  test/data/dflash_tiny/        a randomly initialised drafter in the reference checkpoint layout
                                (config.json + model.safetensors, bf16 like published checkpoints)
  test/data/dflash_reference.safetensors
                                a stand-in target embedding table and output head, the context features
                                and anchors of four drafter calls, and the reference's draft logits

The drafter has SmolLM2-135M's shape where the target fixes it (hidden 576, 9 query heads, 3 KV heads,
head_dim 64, rms_norm_eps 1e-5, rope_theta 100000, 30 target layers) and is otherwise small: 2 layers
(so fc reads two target layers, ids by the reference formula: [1, 27]) and intermediate_size 512 (the
target's is 1536) to keep the checkpoint near 8 MB. Weights are drawn with a fixed torch seed at
unit gain (linear weights N(0, 1/fan_in), norm weights 1 + N(0, 0.2^2)) rather than the reference's
N(0, 0.02^2) initialisation, so that every part of the forward pass (context, attention, MLP, each norm)
moves the logits well beyond the tolerance. The reference forward runs in fp32 on the bf16 weights,
loaded back from the checkpoint with `DFlashDraftModel.from_pretrained`.

The four calls follow `dflash_generate`: context rows of the newly committed positions (7 prompt rows,
then 2, 1, 3 as if 1, 0 and 2 drafts were accepted), a block [anchor, mask x (b-1)] at the next b
positions with b = 4, 5, 16 and 2, the draft cache cropped back to the committed length after each call.

  python3 -m venv ~/.cache/blockpilot/venv-dflash
  ~/.cache/blockpilot/venv-dflash/bin/pip install -r test/data/requirements-dflash.txt
  ~/.cache/blockpilot/venv-dflash/bin/pip install --no-deps dflash==0.1.0
  ~/.cache/blockpilot/venv-dflash/bin/python test/data/make_dflash_reference.py

The tensors are the same on every run; the safetensors header lists its metadata in no fixed order.
"""

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import Qwen3Config

from dflash.model import (
    DFlashDraftModel,
    _crop_to,
    _draft_value,
    _make_cache,
    _output_head,
    _raw_input_embeddings,
)

SEED = 20250607
HERE = Path(__file__).resolve().parent
CHECKPOINT = HERE / "dflash_tiny"
REFERENCE = HERE / "dflash_reference.safetensors"

HIDDEN = 576
TARGET_LAYERS = 30
MASK_TOKEN_ID = 16  # <empty_output> in SmolLM2's vocabulary; inside the stand-in vocabulary too
STANDIN_VOCAB = 256
CALLS = [(7, 4), (2, 5), (1, 16), (3, 2)]  # (new context rows, block size b) of each drafter call


class StandInTarget(nn.Module):
    """What the drafter borrows from a target: its embedding table and its output head."""

    def __init__(self, generator):
        super().__init__()
        self.embed_tokens = nn.Embedding(STANDIN_VOCAB, HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, STANDIN_VOCAB, bias=False)
        with torch.no_grad():
            self.embed_tokens.weight.copy_(torch.randn(STANDIN_VOCAB, HIDDEN, generator=generator))
            self.lm_head.weight.copy_(torch.randn(STANDIN_VOCAB, HIDDEN, generator=generator) * 2 / math.sqrt(HIDDEN))

    def get_input_embeddings(self):
        return self.embed_tokens


def make_model(generator):
    config = Qwen3Config(
        hidden_size=HIDDEN,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        max_position_embeddings=8192,
        vocab_size=49152,
        tie_word_embeddings=False,
    )
    config.num_target_layers = TARGET_LAYERS
    config.block_size = 16
    config.dflash_config = {"mask_token_id": MASK_TOKEN_ID}  # target_layer_ids: the reference formula
    model = DFlashDraftModel(config)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=generator) / math.sqrt(p.shape[1]))
            else:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
    return model.to(torch.bfloat16)


def run_calls(model, target, contexts, anchors):
    """The drafter's part of `dflash_generate`, call by call; returns the draft logits of each call."""
    cache = _make_cache(model.config)
    scale = float(_draft_value(model.config, "input_embedding_scale", 1.0))
    start, out = 0, []
    for (rows, b), context, anchor in zip(CALLS, contexts, anchors):
        start += rows
        block = torch.full((1, b), model.mask_token_id, dtype=torch.long)
        block[0, 0] = anchor
        position_ids = torch.arange(start - rows, start + b)[None]
        hidden = model(
            target_hidden=context[None],
            noise_embedding=_raw_input_embeddings(target, block, scale),
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )[:, 1 - b :, :]
        _crop_to(cache, start)
        out.append(model.compute_logits(hidden, _output_head(target))[0])
    return out


@torch.inference_mode()
def main():
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(SEED)
    CHECKPOINT.mkdir(exist_ok=True)
    make_model(generator).save_pretrained(CHECKPOINT)
    # The reference's own loading path, in fp32: the stored bf16 values exactly, and RoPE frequencies
    # computed in fp32 (casting the bf16 module up instead would keep bf16-rounded frequencies).
    model = DFlashDraftModel.from_pretrained(CHECKPOINT, dtype=torch.float32).eval()
    target = StandInTarget(generator).eval()

    width = len(model.target_layer_ids) * HIDDEN
    column_scale = torch.exp(0.5 * torch.randn(width, generator=generator))
    contexts = [torch.randn(rows, width, generator=generator) * column_scale for rows, _ in CALLS]
    anchors = torch.randint(0, STANDIN_VOCAB, (len(CALLS),), generator=generator).tolist()
    logits = run_calls(model, target, contexts, anchors)
    # How far the logits move when the context rows are zeroed: what a context bug would cost.
    blind = run_calls(model, target, [torch.zeros_like(c) for c in contexts], anchors)
    sensitivity = max((a - z).abs().max().item() for a, z in zip(logits, blind))

    tensors = {"embedding": target.embed_tokens.weight, "head": target.lm_head.weight}
    for i, (context, row) in enumerate(zip(contexts, logits)):
        tensors[f"call{i}.context"] = context
        tensors[f"call{i}.logits"] = row
    metadata = {
        "calls": json.dumps([{"context_rows": r, "block_size": b, "anchor": a} for (r, b), a in zip(CALLS, anchors)]),
        "target_layer_ids": json.dumps(model.target_layer_ids),
        "mask_token_id": str(model.mask_token_id),
        "context_sensitivity": f"{sensitivity:.6g}",
        "made_by": "test/data/make_dflash_reference.py with dflash 0.1.0, torch " + torch.__version__,
    }
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, REFERENCE, metadata=metadata)
    print("target_layer_ids", model.target_layer_ids, "max |logit|", max(r.abs().max().item() for r in logits))
    print("largest logit change with zeroed context", sensitivity)


if __name__ == "__main__":
    main()
