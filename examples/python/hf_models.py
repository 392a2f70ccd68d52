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
        self.cache = DynamicCache(config=self.model.config)
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
        self.cache = DynamicCache(config=self.model.config)
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
