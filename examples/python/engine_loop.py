"""An engine's own decode loop around the package's parts, as a Python engine (vLLM, SGLang) would write it:
the block size from the predictor on the prefill's last row, the lookup drafter's proposals, and the acceptance
rule on the rows where the model left them. With the model on a GPU the rows stay there: the decision
(`blockpilot.CudaPredictor`) and the acceptance (`blockpilot.accept` on CUDA tensors) run on the device, and
only the block size, the accepted count and the bonus token come back.

The verifier is blockpilot.generate's protocol (prefill, score, commit), its rows float32 [n, vocab] as NumPy
arrays or PyTorch tensors (CPU or CUDA). The random streams are the decoder's (seed, offset = step, the first
token at step 0), so that the same request gives blockpilot.generate's tokens, at every temperature.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

import blockpilot as bp


def _beside(rows, values: np.ndarray):
    """`values` where `rows` are: a CUDA tensor beside CUDA rows, else the NumPy array itself."""
    device = getattr(rows, "device", None)
    if getattr(device, "type", "cpu") != "cuda":
        return values
    import torch

    return torch.from_numpy(values).to(device, non_blocking=True)


@dataclass
class LoopStats:
    block_size: int = 0
    steps: int = 0
    accepted: int = 0
    seconds: dict = field(default_factory=lambda: {"decide": 0.0, "draft": 0.0, "verify": 0.0, "accept": 0.0})

    @property
    def tau(self) -> float:
        """Tokens committed per verification step (the first token, from the prefill, not counted)."""
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0


def decode(verifier, drafter: bp.LookupDrafter, prompt: np.ndarray, decide, *, max_new_tokens: int,
           stop_tokens=(), rule: str = "greedy", temperature: float = 0.0, seed: int = 0):
    """Decodes one request. `decide` is a block size (int), a `Predictor` (host rows) or a `CudaPredictor`
    (device rows). Returns (tokens int32 [n], LoopStats)."""
    prompt = np.ascontiguousarray(prompt, dtype=np.int32)
    stats = LoopStats()
    context = list(prompt)
    tokens: list[int] = []

    def accept(rows, block, step, q=None, rule=rule):
        """The rule on one request's block (anchor + drafts): (accepted drafts, bonus token)."""
        start = time.perf_counter()
        offsets = np.array([0, len(block) - 1], dtype=np.int32)
        out = bp.accept(rule, rows, _beside(rows, np.asarray(block, dtype=np.int32)), _beside(rows, offsets),
                        seeds=seed, offsets=step, temperature=temperature,
                        draft_probs=None if q is None else _beside(rows, q))
        stats.seconds["accept"] += time.perf_counter() - start
        return int(out.accepted[0]), int(out.bonus[0])

    def commit(new: list[int]) -> bool:
        """Appends up to the token limit and the first stop token; True when the request is done."""
        for t in new:
            tokens.append(t)
            context.append(t)
            if t in stop_tokens or len(tokens) >= max_new_tokens:
                return True
        return False

    if max_new_tokens <= 0:
        return np.zeros(0, dtype=np.int32), stats
    row = verifier.prefill(prompt)
    start = time.perf_counter()
    if isinstance(decide, int):
        b = decide
    else:
        b = int(decide.choose(row)[0][0])
    stats.block_size = b
    stats.seconds["decide"] += time.perf_counter() - start
    # The first token is the target's sample of its row at the temperature (what sample-and-match draws
    # for a block without drafts) under the sampling rules, and its argmax under greedy match, which
    # samples nothing.
    _, first = accept(row, [int(prompt[-1])], step=0, rule="greedy" if rule == "greedy" else "sample-match")
    done = commit([first])
    step = 0
    while not done:
        step += 1
        start = time.perf_counter()
        drafts, _ = drafter.draft(np.asarray(context, dtype=np.int32), b - 1)
        q = None
        if rule == "rejection" and b > 1:  # lookup's drafts are deterministic: one-hot q
            q = np.zeros((b - 1, drafter.vocab_size), dtype=np.float32)
            q[np.arange(b - 1), drafts] = 1.0
        stats.seconds["draft"] += time.perf_counter() - start
        block = [context[-1], *drafts.tolist()]
        start = time.perf_counter()
        rows = verifier.score(np.asarray(block, dtype=np.int32))
        stats.seconds["verify"] += time.perf_counter() - start
        accepted, bonus = accept(rows, block, step, q)
        stats.steps += 1
        stats.accepted += accepted
        verifier.commit(accepted + 1)  # the anchor and the accepted drafts; the bonus is the next anchor
        done = commit([*block[1:accepted + 1], bonus])
    return np.asarray(tokens, dtype=np.int32), stats
