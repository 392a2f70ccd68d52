"""An engine's own decode loop around the package's parts, as a Python engine (vLLM, SGLang) would write it:
the block size from the predictor on the prefill's last row, the lookup drafter's proposals, and the acceptance
rule on the rows where the model left them. With the model on a GPU the rows stay there: the decision
(`blockpilot.CudaPredictor`) and the acceptance (`blockpilot.accept` on CUDA tensors) run on the device, and
only the block size, the accepted count and the bonus token come back.

The verifier is blockpilot.generate's protocol (prefill, score, commit), its rows float32 [n, vocab] as NumPy
arrays or PyTorch tensors (CPU or CUDA). The random streams are the decoder's (seed, offset = step, the first
token at step 0), so that the same request gives blockpilot.generate's tokens, at every temperature.

`decode` serves one request with a block size from a fixed number, the predictor, or the speed cut-off at every
step; `decode_batch` serves several at once as a batching engine does: one scoring call and one `accept` call a
step for every request's block (the flattened layout), at a fixed size or with a `BatchPlan` that weighs the
drafts of every request, by the speed cut-off's chances, against the cost of the batch's rows.
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


def _stacked(parts):
    """Every request's rows in one array, where they are: NumPy on the host, a tensor on the device."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    import torch

    return torch.cat(parts)


@dataclass
class LoopStats:
    block_size: int = 0
    steps: int = 0
    drafted: int = 0  #: drafts verified
    accepted: int = 0
    seconds: dict = field(default_factory=lambda: {"decide": 0.0, "draft": 0.0, "verify": 0.0, "accept": 0.0})

    @property
    def tau(self) -> float:
        """Tokens committed per verification step (the first token, from the prefill, not counted)."""
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0


def one_hot(drafts: np.ndarray, vocab: int) -> np.ndarray:
    """q of lookup's drafts, which are deterministic: float32 [len(drafts), vocab] (the rejection rule's)."""
    q = np.zeros((len(drafts), vocab), dtype=np.float32)
    q[np.arange(len(drafts)), drafts] = 1.0
    return q


def decode(verifier, drafter: bp.LookupDrafter, prompt: np.ndarray, decide, *, max_new_tokens: int,
           stop_tokens=(), rule: str = "greedy", temperature: float = 0.0, seed: int = 0):
    """Decodes one request. `decide` is a block size (int), a `Predictor` (host rows), a `CudaPredictor`
    (device rows) or a `SpeedCutoff` (how many drafts to verify, every step; it learns from each step).
    Returns (tokens int32 [n], LoopStats)."""
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
    per_step = isinstance(decide, bp.SpeedCutoff)
    if isinstance(decide, int):
        b = decide
    elif per_step:
        decide.begin_request()
        b = decide.max_block_size  # drafts up to the largest block; keep_drafts trims them every step
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
        start = step_start = time.perf_counter()
        drafts, confidence = drafter.draft(np.asarray(context, dtype=np.int32), b - 1)
        stats.seconds["draft"] += time.perf_counter() - start
        if per_step and b > 1:
            start = time.perf_counter()
            drafts = drafts[:decide.keep_drafts(confidence)]
            stats.seconds["decide"] += time.perf_counter() - start
        q = one_hot(drafts, drafter.vocab_size) if rule == "rejection" and len(drafts) else None
        block = [context[-1], *drafts.tolist()]
        start = time.perf_counter()
        rows = verifier.score(np.asarray(block, dtype=np.int32))
        stats.seconds["verify"] += time.perf_counter() - start
        accepted, bonus = accept(rows, block, step, q)
        if per_step:
            decide.observe(step - 1, len(block), accepted, time.perf_counter() - step_start)
        stats.steps += 1
        stats.drafted += len(block) - 1
        stats.accepted += accepted
        verifier.commit(accepted + 1)  # the anchor and the accepted drafts; the bonus is the next anchor
        done = commit([*block[1:accepted + 1], bonus])
    return np.asarray(tokens, dtype=np.int32), stats


@dataclass
class BatchStats:
    steps: int = 0  #: batch steps
    rows: list = field(default_factory=list)  #: rows scored at each step, every request's together
    drafted: int = 0
    accepted: int = 0
    seconds: dict = field(default_factory=lambda: {"plan": 0.0, "draft": 0.0, "verify": 0.0, "accept": 0.0})


class PerRequest:
    """decode_batch's model protocol over one single-request verifier per request (generate's protocol), each
    scoring its own block: prefill(prompts) -> rows [n, vocab]; score(requests, blocks) -> the blocks' rows
    back to back; commit(requests, counts)."""

    def __init__(self, verifiers):
        self.verifiers = verifiers

    def prefill(self, prompts):
        return _stacked([v.prefill(p) for v, p in zip(self.verifiers, prompts)])

    def score(self, requests, blocks):
        return _stacked([self.verifiers[i].score(b) for i, b in zip(requests, blocks)])

    def commit(self, requests, counts):
        for i, n in zip(requests, counts):
            self.verifiers[i].commit(n)


def decode_batch(model, drafter: bp.LookupDrafter, prompts, policy, *, max_new_tokens: int, stop_tokens=(),
                 rule: str = "greedy", temperature: float = 0.0, seeds=None):
    """Decodes len(prompts) requests together, as a batching engine does: every step one `model.score` of every
    active request's block (`model`: PerRequest's protocol; a batched model scores them in one pass) and one
    `accept` of all of them. `policy` is a block size for every request, or (cutoff, plan): a SpeedCutoff and a
    BatchPlan that decide the whole step's drafts together, weighing each request's drafts by a `shared()`
    copy of the cut-off (they learn together) against the cost of the batch step by its rows
    (`plan.row_cost`, measured for the batch: the copies keep their cost curves as given). Each request's
    streams are (seeds[i], step). The rows stay where the model leaves them (CUDA tensors: the acceptance runs
    on the device). Returns (one int32 token array per request, BatchStats)."""
    n = len(prompts)
    seeds = np.zeros(n, dtype=np.uint64) if seeds is None else np.asarray(seeds, dtype=np.uint64)
    stats = BatchStats()
    prompts = [np.ascontiguousarray(p, dtype=np.int32) for p in prompts]
    contexts = [list(p) for p in prompts]
    tokens: list[list[int]] = [[] for _ in range(n)]
    planned = not isinstance(policy, int)
    if planned:
        cutoff, plan = policy
        cutoffs = [cutoff.shared() for _ in range(n)]
        for c in cutoffs:
            c.begin_request()
    steps = np.zeros(n, dtype=np.uint64)

    def commit(i: int, new: list[int]) -> bool:
        for t in new:
            tokens[i].append(t)
            contexts[i].append(t)
            if t in stop_tokens or len(tokens[i]) >= max_new_tokens:
                return True
        return False

    if max_new_tokens <= 0:
        return [np.zeros(0, dtype=np.int32) for _ in range(n)], stats
    # The first tokens: every request's prefill row decided in one call (blocks of the anchor alone).
    rows = model.prefill(prompts)
    anchors = np.array([c[-1] for c in contexts], dtype=np.int32)
    first = bp.accept("greedy" if rule == "greedy" else "sample-match", rows, _beside(rows, anchors),
                      _beside(rows, np.zeros(n + 1, dtype=np.int32)), seeds=seeds, offsets=steps, temperature=temperature)
    active = [i for i in range(n) if not commit(i, [int(first.bonus[i])])]
    drafts_asked = (cutoff.max_block_size if planned else policy) - 1
    while active:
        step_start = start = time.perf_counter()
        drafted = [drafter.draft(np.asarray(contexts[i], dtype=np.int32), drafts_asked) for i in active]
        stats.seconds["draft"] += time.perf_counter() - start
        start = time.perf_counter()
        if planned:
            kept = plan.keep_drafts([cutoffs[i] for i in active], [confidence for _, confidence in drafted]).tolist()
        else:
            kept = [drafts_asked] * len(active)
        blocks = [np.asarray([contexts[i][-1], *drafts[:k]], dtype=np.int32)
                  for i, (drafts, _), k in zip(active, drafted, kept)]
        stats.seconds["plan"] += time.perf_counter() - start
        start = time.perf_counter()
        rows = model.score(active, blocks)
        stats.seconds["verify"] += time.perf_counter() - start
        start = time.perf_counter()
        offsets = np.concatenate([[0], np.cumsum([len(b) - 1 for b in blocks])]).astype(np.int32)
        q = None
        if rule == "rejection" and offsets[-1] > 0:
            q = _beside(rows, np.concatenate([one_hot(b[1:], drafter.vocab_size) for b in blocks]))
        steps[active] += 1
        out = bp.accept(rule, rows, _beside(rows, np.concatenate(blocks)), _beside(rows, offsets),
                        seeds=seeds[active], offsets=steps[active], temperature=temperature, draft_probs=q)
        stats.seconds["accept"] += time.perf_counter() - start
        seconds = time.perf_counter() - step_start
        accepted, bonus = out.accepted.tolist(), out.bonus.tolist()
        model.commit(active, [a + 1 for a in accepted])  # the anchors and the accepted drafts
        still = []
        for i, block, a, t in zip(active, blocks, accepted, bonus):
            if planned:
                cutoffs[i].observe(int(steps[i]) - 1, len(block), a, seconds)
            if not commit(i, [*block[1:a + 1].tolist(), t]):
                still.append(i)
        stats.steps += 1
        stats.rows.append(int(offsets[-1]) + len(active))
        stats.drafted += int(offsets[-1])
        stats.accepted += int(out.accepted.sum())
        active = still
    return [np.asarray(t, dtype=np.int32) for t in tokens], stats
