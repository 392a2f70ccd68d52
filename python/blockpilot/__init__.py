"""BlockPilot: block-drafting speculative decoding with an instance-adaptive block size.

The library's parts for a Python engine, on the CPU:

- the block-size decision: ``CompactFeatures`` of last-token rows and a ``Predictor`` loaded from a file;
- ``accept``: the acceptance rules (greedy, sample-match, lossless rejection sampling) on a batch of
  requests in the flattened layout, with per-request Philox streams;
- ``generate``: the whole decode loop for a verifier and a drafter written in Python (or the built-in
  ``LookupDrafter``), at a fixed block size, a ``Predictor``'s, or per step by the ``SpeedCutoff``, whose
  step costs ``measure_step_seconds`` measures on the machine that runs it;
- for an engine's own loop (examples/python/engine_loop.py): ``LookupDrafter.draft`` proposes a block,
  ``accept`` decides it, the predictor's ``choose`` gives the block size, or the ``SpeedCutoff``'s
  ``keep_drafts`` how many drafts to verify at each step; for requests served together,
  ``plan_batch_drafts`` decides the whole batch step's drafts from each request's ``draft_gains``
  (``BatchPlan.keep_drafts``: the same for speed cut-offs, in one call a step).

Built with CUDA (``cuda_built``), ``accept`` also takes CUDA arrays and ``CudaPredictor`` decides on
device rows; ``cuda_device_count()`` says whether a device is there.

Arrays are read in place when they are C-contiguous, on the CPU and of the documented dtype (NumPy
arrays, PyTorch CPU tensors, anything with DLPack or the buffer protocol); others are converted once.
Failures raise ``Error``, whose ``status`` is the library's ``Status`` (None for file errors).
"""

from __future__ import annotations

import operator
import sys
from typing import Callable, Iterable, NamedTuple, Optional, Union

import numpy as np

from . import _blockpilot
from ._blockpilot import (
    BatchPlan,
    CompactFeatures,
    Error,
    GenerationResult,
    LookupDrafter,
    Predictor,
    RequestStats,
    SpeedCutoff,
    Status,
    _accept,
    _generate,
    cuda_built,
    cuda_device_count,
    _check_block_invariance,
    _measure_step_seconds,
    plan_batch_drafts,
)


__all__ = [
    "AcceptanceResult",
    "BatchPlan",
    "CompactFeatures",
    "Error",
    "GenerationResult",
    "LookupDrafter",
    "Predictor",
    "RequestStats",
    "SpeedCutoff",
    "Status",
    "RULES",
    "accept",
    "cuda_built",
    "cuda_device_count",
    "generate",
    "measure_step_seconds",
    "check_block_invariance",
    "plan_batch_drafts",
] + (["CudaPredictor"] if cuda_built else [])

__version__ = "0.1.0"

#: The acceptance rules by name.
RULES = ("greedy", "sample-match", "rejection")

# Set on every Error; generate() and accept() fill them in.
Error.status = None
Error.stage = None
Error.result = None


class AcceptanceResult(NamedTuple):
    """One batched acceptance call: per request, drafts accepted and the token that follows them."""

    accepted: np.ndarray  #: int32 [n]
    bonus: np.ndarray  #: int32 [n]
    status: np.ndarray  #: int32 [n], Status codes


def _per_request(value, n: int, dtype, name: str) -> np.ndarray:
    array = np.asarray(value)
    if np.issubdtype(dtype, np.integer):  # seeds and offsets: never truncated or wrapped
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"accept: {name} must be integers, got {array.dtype}")
        if (array < 0).any():
            raise ValueError(f"accept: {name} must not be negative")
    return np.ascontiguousarray(np.broadcast_to(array.astype(dtype), (n,)))


def _flat(values):
    """Token ids or offsets as one flat array, their type kept: the binding reads int32 in place, copies other
    integers and refuses the rest (floats, values outside int32) rather than truncate them."""
    return np.asarray(values).reshape(-1)


def _on_cuda(array) -> bool:
    device = getattr(array, "__dlpack_device__", None)
    return device is not None and device()[0] == 2  # kDLCUDA


def _check_device_array(array, name: str, dtype: str, device) -> None:
    """A CUDA argument of accept is read in place: on target_logits' device, of its dtype, C-contiguous.
    Nothing is converted, since a conversion would run on another stream than the call."""
    if not _on_cuda(array):
        raise TypeError(f"accept: target_logits are CUDA memory, so {name} must be a CUDA array too")
    if tuple(array.__dlpack_device__()) != tuple(device):
        raise ValueError(f"accept: {name} is on another device than target_logits")
    got = str(getattr(array, "dtype", "?")).removeprefix("torch.")
    if got != dtype:
        raise TypeError(f"accept: {name} on the device must be {dtype}, got {got} (device arrays are never converted)")
    contiguous = getattr(array, "is_contiguous", None)
    if callable(contiguous) and not contiguous():
        raise TypeError(f"accept: {name} on the device must be C-contiguous (device arrays are never converted)")


def _current_stream(array) -> int:
    """The cudaStream_t PyTorch enqueues on for the array's device (0, the default stream, otherwise)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(array, torch.Tensor):
        return torch.cuda.current_stream(array.device).cuda_stream
    return 0


if cuda_built:

    class CudaPredictor(_blockpilot.CudaPredictor):
        """A Predictor's decision on the device: compact features and the MLP of CUDA rows. Made with
        ``CudaPredictor(predictor, stream=0)``: the network goes to the current device, and its decisions run
        on ``stream`` (a cudaStream_t; 0, the default stream)."""

        def choose(self, rows, stream: Optional[int] = None):
            """rows: float32 [n, vocab], C-contiguous, on the predictor's device (read in place). The
            decisions wait for what ``stream`` has enqueued so far, the stream that writes the rows (default:
            PyTorch's current stream of their device, else the default stream). Returns (block_sizes int32 [n],
            fallback bool [n]) on the host; each row waits for its decision."""
            return self._choose(rows, _current_stream(rows) if stream is None else stream)


def accept(
    rule: str,
    target_logits,
    blocks,
    draft_offsets,
    *,
    seeds=0,
    offsets=0,
    temperature=0.0,
    draft_probs=None,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    check: bool = True,
    stream: Optional[int] = None,
) -> AcceptanceResult:
    """Decides one verification step of n requests.

    The flattened layout (vLLM's ``cu_num_draft_tokens``): request r has
    ``d_r = draft_offsets[r + 1] - draft_offsets[r]`` drafts.

    - ``target_logits``: float32 [sum(d_r + 1), vocab]; request r's d_r + 1 rows start at
      ``draft_offsets[r] + r``, row j being the target's distribution for block position j + 1.
    - ``blocks``: int32 [sum(d_r + 1)]: each request's anchor, then its drafts, at the same rows.
    - ``draft_offsets``: int32 [n + 1], non-decreasing from 0.
    - ``seeds``, ``offsets``: uint64 [n] (or one value for all): each request's Philox stream for this
      step (the decoder uses offset = step number).
    - ``temperature``: float32 [n] or one value; below 1e-5 is greedy.
    - ``draft_probs``: float32 [sum(d_r), vocab], q of every draft row (the rejection rule only; drafts
      must be samples of q).
    - ``top_k``, ``top_p``, ``min_p``: truncations of the target's distribution at T > 0.

    With CUDA arrays (a build with CUDA; ``blocks`` and ``draft_offsets`` on the device too), the rule
    runs on the device on ``stream`` (default: PyTorch's current stream of the logits' device, else the
    default stream); ``draft_offsets`` is copied to the host to be checked and the results come back to
    the host.

    Returns ``AcceptanceResult``. With ``check`` (the default), a request the rule refused raises
    ``Error`` naming it; otherwise its status is in ``result.status`` and its result is (0, -1).
    """
    n = len(draft_offsets) - 1
    if n < 0:
        raise ValueError("accept: draft_offsets needs n + 1 entries")
    for name, rows in (("target_logits", target_logits), ("draft_probs", draft_probs)):
        if rows is not None and np.ndim(rows) != 2:  # the array's own ndim: a CUDA tensor stays where it is
            raise ValueError(f"accept: {name} must be a 2-D array [rows, vocab], got {np.ndim(rows)}-D")
    streams = (_per_request(seeds, n, np.uint64, "seeds"), _per_request(offsets, n, np.uint64, "offsets"),
               _per_request(temperature, n, np.float32, "temperature"))
    if _on_cuda(target_logits):
        device = target_logits.__dlpack_device__()
        for name, array, dtype in (("target_logits", target_logits, "float32"), ("blocks", blocks, "int32"),
                                   ("draft_offsets", draft_offsets, "int32"), ("draft_probs", draft_probs, "float32")):
            if array is not None:
                _check_device_array(array, name, dtype, device)
        if not cuda_built:
            raise Error("accept: CUDA arrays, but this build of blockpilot has no CUDA")
        run = _blockpilot._accept_cuda(rule, target_logits, blocks, draft_offsets, *streams, draft_probs, top_k, top_p,
                                       min_p, _current_stream(target_logits) if stream is None else stream)
    else:
        run = _accept(rule, target_logits, _flat(blocks), _flat(draft_offsets), *streams, draft_probs, top_k, top_p, min_p)
    out = AcceptanceResult(*run)
    if check:
        failed = np.flatnonzero(out.status != int(Status.success))
        if failed.size:
            code = Status(int(out.status[failed[0]]))
            error = Error(f"accept: request {failed[0]}: {code.message}")
            error.status = code
            error.stage = "accept"
            raise error
    return out


def measure_step_seconds(verifier, context, max_block: int, repeats: int = 3) -> list:
    """The verifier's seconds per step of b = 1..max_block tokens, measured where it runs: prefills
    ``context`` (int32 [n], a request's worth of tokens), takes one untimed step (cold caches after the
    prefill), then scores blocks of each size and keeps one token of each (``commit(1)``), ``repeats``
    rounds with the sizes interleaved; the median of each size (of an even count, the middle two's mean).
    The verifier's next prefill starts afresh. Divided by the first, the prior ``step_costs`` of a
    ``SpeedCutoff``, which the decode's own step timings then refresh. Raises ``Error`` when the verifier
    fails (what a callback raised is its ``__cause__``; ``KeyboardInterrupt`` and ``SystemExit`` come out as
    themselves) or the context is empty."""
    return _measure_step_seconds(verifier, _flat(context), max_block, repeats)


def check_block_invariance(verifier, prompt, continuation, block_sizes=(2, 4, 8, 16)) -> list:
    """Whether the verifier gives a row the same logits alone and inside a block, the condition for
    outputs equal to its own plain greedy decoding (a near-tie decides otherwise where it does not):
    prefills ``prompt`` (int32 [n]) and scores ``continuation`` (int32 [m], m >= 2; e.g. the plain
    output) one token at a time, then again in blocks of each size, each committed whole, and compares
    every row. Per size a dict: ``block_size``, ``rows`` compared, ``max_abs_difference`` (0.0: bit for
    bit; NaN rows count as infinity), ``argmax_changes`` (rows whose greedy token moved, or that the greedy decoder could read in one
    and not in the other: NaN, +inf), ``exact``. The
    verifier's next prefill starts afresh. Raises ``Error`` for an empty prompt, a continuation of fewer
    than two tokens, a size below 1 or a failing verifier (as ``measure_step_seconds`` does)."""
    rows = _check_block_invariance(verifier, _flat(prompt), _flat(continuation), [operator.index(b) for b in block_sizes])
    return [{"block_size": b, "rows": n, "max_abs_difference": d, "argmax_changes": c, "exact": d == 0.0}
            for b, n, d, c in rows]


def generate(
    verifier,
    drafter,
    prompt,
    *,
    policy: Union[int, Predictor, SpeedCutoff, None] = None,
    rule: str = "greedy",
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int = 0,
    stop_tokens: Iterable[int] = (),
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    on_tokens: Optional[Callable[[np.ndarray], None]] = None,
) -> GenerationResult:
    """Generates up to ``max_new_tokens`` tokens after ``prompt`` (int32 [n]) by speculative decoding.

    ``verifier`` is the target: ``vocab_size``; ``prefill(prompt) -> [1, vocab]`` logits of the last
    prompt row; ``score(block) -> [b, vocab]``, the b tokens at the next b positions in one pass, row j
    predicting the token after block[j]; ``commit(n)`` keeps the first n scored positions (crop the
    cache). Rows are float32 and read in place (keep them alive until the next call, which returning
    them does).

    ``drafter`` is a ``LookupDrafter``, None (plain decoding: policy 1), or an object with
    ``vocab_size``, ``draft(context, n, temperature, seed, step) -> tokens`` (or ``(tokens, q)`` with q
    float32 [n, vocab], which the rejection rule needs), and optionally ``begin(prompt)``,
    ``commit(n)`` (n tokens of the last block were committed) and ``max_draft_rows``.

    ``policy`` is a block size (default 16 with a drafter, 1 without), a ``Predictor`` that picks one per
    request from the prefill row, or a ``SpeedCutoff`` (with a ``LookupDrafter``) that chooses before
    every step how many drafts to verify.
    ``rule`` is one of ``RULES``; the output follows the target's distribution exactly under each
    (greedy: the target's greedy decoding).

    ``on_tokens`` receives the tokens each step commits. On a failure, raises ``Error`` with
    ``status``, ``stage`` and ``result`` (the tokens committed before it); an exception raised by a
    callback is its ``__cause__``.
    """
    if operator.index(seed) < 0:
        raise ValueError("generate: seed must not be negative")
    if policy is None:
        policy = 16 if drafter is not None else 1
    elif not isinstance(policy, (Predictor, SpeedCutoff)):
        policy = operator.index(policy)  # a NumPy integer too (Predictor.choose returns one)
    stops = [operator.index(t) for t in stop_tokens]
    if any(not -(1 << 31) <= t < 1 << 31 for t in stops):
        raise ValueError("generate: stop_tokens must be token ids within int32")
    result, raised, detail = _generate(
        verifier, drafter, _flat(prompt), policy, rule, max_new_tokens, temperature, seed, stops, top_k, top_p, min_p,
        on_tokens,
    )
    if isinstance(raised, BaseException) and not isinstance(raised, Exception):
        raise raised  # KeyboardInterrupt, SystemExit: not a failure of the decode
    if result.error != Status.success:
        message = f"generate: {result.failed_stage}: {result.error.message}"
        error = Error(message + (f" ({detail})" if detail else ""))
        error.status = result.error
        error.stage = result.failed_stage
        error.result = result
        raise error from raised
    return result
