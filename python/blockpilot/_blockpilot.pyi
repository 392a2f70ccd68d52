"""
BlockPilot's C++ library: block-size decisions, acceptance rules and the speculative decode loop.
"""

from collections.abc import Sequence
import enum
import os
from typing import Annotated, Final

import numpy
from numpy.typing import NDArray



class Error(RuntimeError):
    """A failed call: the library's status text; `status` (None for file errors), `stage` and `result`."""

    status: Status | None
    stage: str | None
    result: GenerationResult | None

class Status(enum.IntEnum):
    """
    The library's status codes; `message` is the sentence that describes one.
    """

    success = 0

    invalid_block_size = 1

    empty_prompt = 2

    vocab_mismatch = 3

    non_finite_logits = 4

    invalid_temperature = 5

    invalid_token = 6

    invalid_argument = 7

    workspace_too_small = 8

    model_error = 9

    cuda_error = 10

    no_device = 11

    out_of_memory = 12

    cancelled = 13

    @property
    def message(self) -> str: ...

class CompactFeatures:
    """
    The compact features of a logits row: the top_k largest probabilities of softmax(row / T) in descending order, then the statistics named by CompactFeatures.statistics.
    """

    def __init__(self, top_k: int = 256, temperature: float = 1.0) -> None: ...

    @property
    def top_k(self) -> int: ...

    @property
    def temperature(self) -> float: ...

    def feature_count(self, vocab: int) -> int:
        """Features per row: top_k + len(statistics)."""

    def extract(self, rows: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)]) -> NDArray[numpy.float32]:
        """
        rows: float32 [n, vocab] logits (read in place when C-contiguous float32 on the CPU).
        Returns float32 [n, feature_count(vocab)]. Raises Error on a row with NaN or +inf.
        """

    statistics: Final[list[str]] = ...
    """(arg: object, /) -> list[str]"""

class Predictor:
    """
    A BlockPilot predictor on compact features: the MLP that picks one of the block sizes B-k..B+k from the target's last prompt row.
    """

    @staticmethod
    def load(path: str | os.PathLike, target_vocab: int = 0) -> Predictor:
        """
        Loads a predictor file (docs/predictor-files.md). With target_vocab > 0 the file must have been trained for a target of that vocabulary. Raises Error naming the file and the field.
        """

    def choose(self, rows: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)]) -> tuple:
        """
        rows: float32 [n, vocab], each request's last prompt row. Returns (block_sizes int32 [n], fallback bool [n]);
        fallback marks rows the model could not use (wrong vocabulary, non-finite features): they get B.
        """

    @property
    def block_sizes(self) -> list[int]: ...

    @property
    def training_block_size(self) -> int: ...

    @property
    def window_k(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def temperature(self) -> float:
        """The decoding temperature its labels were measured at."""

    @property
    def max_block_size(self) -> int: ...

    @property
    def features(self) -> CompactFeatures: ...

def _accept(rule: str, target_logits: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)], blocks: object, draft_offsets: object, seeds: Annotated[NDArray[numpy.uint64], dict(shape=(None,), order='C', device='cpu', writable=False)], offsets: Annotated[NDArray[numpy.uint64], dict(shape=(None,), order='C', device='cpu', writable=False)], temperatures: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)], draft_probs: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cpu', writable=False)] | None = None, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> tuple:
    """
    The batched acceptance call behind blockpilot.accept (which documents it); returns (accepted, bonus, status codes).
    """

class LookupDrafter:
    """
    Prompt-lookup drafting: proposes the tokens that followed the most recent earlier occurrence of the context's last n tokens (n from max_ngram down to min_ngram). Runs inside the decoder, without calls into Python.
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, max_draft_rows: int = 63, confidence: str = 'ngram', corpus: Sequence[Sequence[int]] | None = None) -> None:
        """
        confidence grades each draft for the SpeedCutoff policy: 'ngram' (the matched n-gram's length over max_ngram) or 'evidence' (how far back the context agrees with the occurrence, and whether the n-gram's other occurrences continued alike). corpus (token id lists: what the target wrote for other requests) adds drafts where the context has no match or a weaker one than the corpus's: the most frequent next token after each 2- to 4-gram there, graded by its share.
        """

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_draft_rows(self) -> int: ...

    def draft(self, context: Sequence[int] | NDArray[numpy.integer], count: int) -> tuple:
        """
        The drafts an engine's own loop verifies next: context [n] is every committed token of the request (the last one the block's anchor); returns (tokens int32 [count], confidence float32 [count]), the continuation of the longest recent n-gram match and each draft's grade (0 where lookup pads). Token ids are any integers (int32 read in place); floats or ids outside int32 raise TypeError / ValueError, an empty context Error.
        """

def _measure_step_seconds(verifier: object, context: object, max_block: int, repeats: int) -> list[float]:
    """The loop behind blockpilot.measure_step_seconds (which documents it)."""

def _check_block_invariance(verifier: object, prompt: object, continuation: object, block_sizes: Sequence[int]) -> list[tuple[int, int, float, int]]:
    """
    The check behind blockpilot.check_block_invariance (which documents it).
    """

class RequestStats:
    """What one request did: block size, steps, acceptance, time per stage."""

    @property
    def block_size(self) -> int:
        """The size the policy chose after prefill."""

    @property
    def policy_fallback(self) -> bool:
        """The policy could not use its model and chose its default."""

    @property
    def steps(self) -> int:
        """Decode steps (verifier score calls)."""

    @property
    def drafted(self) -> int: ...

    @property
    def accepted(self) -> int: ...

    @property
    def generated(self) -> int: ...

    @property
    def steps_by_length(self) -> list[int]:
        """[k]: steps that committed k tokens."""

    @property
    def steps_by_block(self) -> list[int]:
        """[b]: steps run with block size b."""

    @property
    def tau(self) -> float:
        """Mean tokens committed per step (accepted drafts + 1)."""

    @property
    def acceptance_rates(self) -> list[float]:
        """[j - 1]: share of steps that drafted position j and accepted it."""

    @property
    def seconds(self) -> dict[str, float]:
        """Wall time per stage, in seconds."""

class GenerationResult:
    @property
    def tokens(self) -> NDArray[numpy.int32]:
        """
        int32 [n]: the generated tokens, prompt excluded (on an error: those committed before it).
        """

    @property
    def stats(self) -> RequestStats: ...

    @property
    def error(self) -> Status:
        """Status.success, or what ended the request early."""

    @property
    def failed_stage(self) -> str: ...

def _generate(verifier: object, drafter: object | None, prompt: object, policy: object, rule: str, max_new_tokens: int, temperature: float, seed: int, stop_tokens: Sequence[int], top_k: int, top_p: float, min_p: float, on_tokens: object | None) -> tuple:
    """The decode loop behind blockpilot.generate (which documents it)."""

class SpeedCutoff:
    """
    A per-step policy: before every step it verifies the prefix of the drafts with the most expected committed tokens per unit of step cost. A draft's chance is learned by its confidence level from the request's own steps and from every earlier request; the cost curve starts from step_costs and follows the decode's own step timings. Keep one instance for the requests of a verifier that run one after another, and give requests that run at the same time shared() ones. Needs a LookupDrafter.

    generate() drives it; an engine's own loop calls, per request, begin_request(), then every step keep_drafts(confidence) (for a batch, BatchPlan.keep_drafts of every request's) and observe(...) once the step is decided.
    """

    def __init__(self, step_costs: Sequence[float], *, levels: int = 10, positions: int = 4, prior_weight: float = 4.0, request_weight: float = 8.0, memory: float = 0.998, explore: float = 0.0, learn_costs: bool = True) -> None:
        """
        step_costs[b - 1]: a step of b tokens' cost relative to one (1.0 first; measure_step_seconds gives seconds to divide by their first). Its length is the largest block. Raises Error on a bad curve or option.
        """

    @property
    def max_block_size(self) -> int: ...

    @property
    def step_costs(self) -> list[float]:
        """The cost curve now: the prior refreshed by the step timings seen."""

    def acceptance(self, level: int, position: int) -> float:
        """
        The current chance that a draft of this confidence level, at this 0-based place in its block, is accepted given those before it were.
        """

    def shared(self) -> SpeedCutoff:
        """
        Another cut-off for a request served at the same time as this one's: its own request's state, and the earlier requests' estimates pooled with this one (what either learns, both use). copy.copy gives an independent one.
        """

    def __copy__(self) -> SpeedCutoff: ...

    def begin_request(self) -> None:
        """
        Starts a request: forgets the last request's own counts (the earlier requests' estimates stay).
        """

    def draft_gains(self, confidence: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> NDArray[numpy.float64]:
        """
        confidence: float32 [d], LookupDrafter.draft's grades of the step's drafts. Returns float64 [min(d, max_block_size - 1)]: [k - 1] is the chance that drafts 1..k are all accepted (non-increasing), what plan_batch_drafts weighs. Decides nothing.
        """

    def keep_drafts(self, confidence: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> int:
        """
        How many of the step's drafts to verify (a prefix, 0 for a plain step): the most expected committed tokens per unit of step cost. Call observe() once the step is decided.
        """

    def keep(self, confidence: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)], kept: int) -> int:
        """
        Verifies the first `kept` drafts, decided elsewhere (plan_batch_drafts): clamped to [0, len(draft_gains)], returned. Call observe() once the step is decided.
        """

    def observe(self, step: int, block_size: int, accepted: int, seconds: float) -> None:
        """
        What the step showed: its 0-based number in the request, the tokens scored (anchor + the drafts kept), the drafts accepted, and its wall time (drafting, scoring, acceptance), which refreshes the cost curve unless learn_costs is off (in a batch the time is the batch's: keep it off there). Raises ValueError on impossible values.
        """

def plan_batch_drafts(gains: Sequence[Sequence[float]], row_cost: Sequence[float]) -> NDArray[numpy.int32]:
    """
    The drafts to verify for requests served in one batch step: gains[i] is request i's draft_gains (float64, non-increasing), row_cost[R - 1] a batch step's cost with R rows in all (one anchor per request plus the drafts; any unit). Keeps the largest gains of all requests for the number of draft rows that maximises (n + their gains) / row_cost[n + rows - 1]; with one request, keep_drafts' choice. Returns int32 [n], the drafts of each request to keep. Raises Error when row_cost has fewer than n entries, ValueError on bad gains or costs.
    """

class BatchPlan:
    """
    The drafts of a batch's requests planned together, each step, for speed cut-offs: a batch step's cost by its total rows (or by its widest block, padded), kept between steps with the plan's buffers.
    """

    def __init__(self, row_cost: Sequence[float], *, padded: bool = False) -> None:
        """
        row_cost[R - 1]: the cost of a batch step of R rows in all (any unit; a short curve is a row budget). padded: the engine pads every block to the longest, so row_cost[w - 1] is the cost of a step whose longest block has w rows, and each request verifies its drafts up to the chosen width. Raises ValueError on an empty curve or a cost that is not finite and > 0.
        """

    @property
    def row_cost(self) -> list[float]: ...

    @property
    def padded(self) -> bool: ...

    def keep_drafts(self, cutoffs: Sequence[SpeedCutoff], confidence: Sequence[Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)]]) -> NDArray[numpy.int32]:
        """
        One step: cutoffs[i] (a shared() copy per request) and confidence[i] (float32, LookupDrafter.draft's grades of request i's drafts). Each cut-off's draft_gains, the plan over them (plan_batch_drafts, or by width when padded), and each cut-off's keep of its share, in one call. Returns int32 [n], the drafts of each request to verify; call each cut-off's observe() once the step is decided. Raises Error when row_cost (by rows) has fewer entries than requests.
        """

cuda_built: bool = True

def cuda_device_count() -> int:
    """CUDA devices present (0 without a driver or a device)."""

def _accept_cuda(rule: str, target_logits: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cuda', writable=False)], blocks: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cuda', writable=False)], draft_offsets: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cuda', writable=False)], seeds: Annotated[NDArray[numpy.uint64], dict(shape=(None,), order='C', device='cpu', writable=False)], offsets: Annotated[NDArray[numpy.uint64], dict(shape=(None,), order='C', device='cpu', writable=False)], temperatures: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)], draft_probs: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cuda', writable=False)] | None, top_k: int, top_p: float, min_p: float, stream: int) -> tuple:
    """
    blockpilot.accept on CUDA arrays (which documents it); returns (accepted, bonus, status codes) on the host.
    """

class CudaPredictor:
    """
    A Predictor's decision on the device: compact features and the MLP of CUDA rows.
    """

    def __init__(self, predictor: Predictor, stream: int = 0) -> None:
        """
        Copies the predictor's network to the current device; `stream` is the cudaStream_t its decisions run on (0: the default stream).
        """

    def _choose(self, rows: Annotated[NDArray[numpy.float32], dict(shape=(None, None), order='C', device='cuda', writable=False)], stream: int) -> tuple:
        """The call behind CudaPredictor.choose (which documents it)."""
