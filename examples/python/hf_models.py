"""A Hugging Face transformers causal LM as BlockPilot's verifier, and a truncated copy of it (its first
layers and the shared head) as a drafter: the two model protocols of blockpilot.generate."""

from __future__ import annotations

import copy

import numpy as np
import torch
from transformers import DynamicCache


def crop(cache, length: int) -> None:
    """Drops the cache's positions from `length` on (a negative count: what transformers 4 and 5 both take)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def new_cache(config):
    """A DynamicCache for the model; where the model has sliding-window layers (Gemma 3), they keep the states
    past the window until the next crop, so that a rejected block can be cropped off there too."""
    cache = DynamicCache(config=config)
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


class HFVerifier:
    """The target: prefill, score a block in one forward pass over the cache, crop the cache on commit."""

    def __init__(self, model, rows_on_host: bool = True):
        self.model = model
        self.rows_on_host = rows_on_host  # False: the rows stay where the model ran (an engine's own loop)
        self.vocab_size = model.config.vocab_size
        self.device = next(model.parameters()).device
        self.cache = None
        self.length = 0  # positions in the cache that are committed

    def _forward(self, tokens: np.ndarray, last_only: bool) -> torch.Tensor:
        ids = torch.from_numpy(tokens).to(self.device, torch.long)[None]
        with torch.inference_mode():
            out = self.model(ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1 if last_only else 0)
        # Float32 rows, read in place by the binding (DLPack).
        rows = out.logits[0].float()
        return (rows.cpu() if self.rows_on_host else rows).contiguous()

    def prefill(self, prompt):
        self.cache = new_cache(self.model.config)
        self.length = len(prompt)
        return self._forward(prompt, last_only=True)

    def score(self, block):
        return self._forward(block, last_only=False)

    def commit(self, n):
        self.length += n
        crop(self.cache, self.length)


def truncated_copy(model, layers: int):
    """A copy of the model with its first `layers` decoder layers, its final norm and its head (an early-exit
    drafter; a copy, so that the target keeps all its layers)."""
    small = copy.deepcopy(model)
    small.model.layers = small.model.layers[:layers]
    small.config.num_hidden_layers = layers
    return small


class HFGreedyDrafter:
    """Greedy drafts from a (small) causal LM with its own cache: the committed context is fed once, each
    draft costs one single-token forward pass, and the drafted positions are cropped off afterwards."""

    def __init__(self, model, max_draft_rows: int = 15):
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.max_draft_rows = max_draft_rows
        self.device = next(model.parameters()).device
        self.cache = None
        self.cached = 0  # context tokens in the cache

    def begin(self, prompt):
        self.cache = new_cache(self.model.config)
        self.cached = 0

    def _next(self, tokens) -> int:
        ids = torch.as_tensor(np.asarray(tokens), device=self.device, dtype=torch.long)[None]
        with torch.inference_mode():
            out = self.model(ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return int(out.logits[0, -1].argmax())

    def draft(self, context, n, temperature, seed, step):
        # The cache holds context[:cached]; feed the rest (the last step's commits, the anchor last).
        token = self._next(context[self.cached:])
        self.cached = len(context)
        drafts = [token]
        for _ in range(n - 1):
            drafts.append(self._next([drafts[-1]]))
        crop(self.cache, self.cached)
        q = np.zeros((n, self.vocab_size), dtype=np.float32)  # deterministic: one-hot q
        q[np.arange(n), drafts] = 1.0
        return np.asarray(drafts, dtype=np.int32), q  # (no commit(): the next draft() feeds what was committed)


class HFBatchVerifier:
    """Several requests in one batched cache (engine_loop.decode_batch's model protocol): each step one forward
    pass over every request's block, right-padded to the longest; the prompts left-padded. A position a request
    did not keep (a rejected draft, a pad, a finished request's turn) stays in the cache, masked out of
    attention; positions no request kept are cropped. Each request's tokens sit at their own positions."""

    def __init__(self, model, rows_on_host: bool = True):
        self.model = model
        self.rows_on_host = rows_on_host
        self.vocab_size = model.config.vocab_size
        self.device = next(model.parameters()).device
        self.cache = None
        self.mask = None  # [n, cached positions]: 1 where the request's committed tokens are
        self.lengths = None  # [n]: each request's committed tokens, the position of its next one
        self.scored = None  # [n, block positions]: 1 where the last score's blocks are

    def _forward(self, ids: torch.Tensor, new_mask: torch.Tensor, positions: torch.Tensor, last_only: bool):
        mask = new_mask if self.mask is None else torch.cat([self.mask, new_mask], dim=1)
        with torch.inference_mode():
            out = self.model(ids, attention_mask=mask, position_ids=positions, past_key_values=self.cache,
                             use_cache=True, logits_to_keep=1 if last_only else 0)
        rows = out.logits.float()
        return rows.cpu() if self.rows_on_host else rows

    def prefill(self, prompts):
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.zeros((n, width), dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.from_numpy(np.asarray(p, dtype=np.int64))
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        self.cache, self.mask = new_cache(self.model.config), None
        ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
        rows = self._forward(ids, mask, positions, last_only=True)[:, -1]
        self.mask = mask
        self.lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        return rows.contiguous()

    def score(self, requests, blocks):
        n, width = self.mask.shape[0], max(len(b) for b in blocks)
        ids = torch.zeros((n, width), dtype=torch.long)
        scored = torch.zeros((n, width), dtype=torch.long)
        for i, b in zip(requests, blocks):
            ids[i, :len(b)] = torch.from_numpy(np.asarray(b, dtype=np.int64))
            scored[i, :len(b)] = 1
        ids, self.scored = ids.to(self.device), scored.to(self.device)
        positions = self.lengths[:, None] + torch.arange(width, device=self.device)
        rows = self._forward(ids, self.scored, positions, last_only=False)
        return torch.cat([rows[i, :len(b)] for i, b in zip(requests, blocks)]).contiguous()

    def commit(self, requests, counts):
        kept = torch.zeros_like(self.scored)
        for i, c in zip(requests, counts):
            kept[i, :c] = 1
            self.lengths[i] += c
        width = max(counts, default=0)  # the block positions some request kept; the rest are dropped
        self.mask = torch.cat([self.mask, kept[:, :width]], dim=1)
        crop(self.cache, self.mask.shape[1])
