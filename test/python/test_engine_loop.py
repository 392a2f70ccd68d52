"""An engine's own loop (examples/python/engine_loop.py: LookupDrafter.draft, the predictor's choose, accept)
gives the decoder's tokens: blockpilot.generate's, on the same random streams, for every rule and
temperature, and the target's greedy decoding at T = 0. LookupDrafter.draft on its own."""

import sys

import numpy as np
import pytest

import blockpilot as bp
from conftest import REPO
from toy_models import CyclingTarget, PrefixTarget

sys.path.insert(0, str(REPO / "examples" / "python"))
import engine_loop  # noqa: E402

PROMPT = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], dtype=np.int32)


@pytest.mark.parametrize("block_size", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("rule", bp.RULES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_own_loop_gives_the_decoders_tokens(block_size, rule, temperature):
    target = CyclingTarget(vocab=16, seed=block_size)
    kwargs = dict(rule=rule, temperature=temperature, seed=7, max_new_tokens=48)
    ours, stats = engine_loop.decode(target, bp.LookupDrafter(16), PROMPT, block_size, **kwargs)
    reference = bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=block_size, **kwargs)
    assert ours.tolist() == reference.tokens.tolist()
    assert (stats.steps, stats.accepted) == (reference.stats.steps, reference.stats.accepted)
    if temperature == 0.0:
        assert ours.tolist() == target.greedy(PROMPT, 48)
    if block_size > 1 and temperature == 0.0:
        assert stats.accepted > 0  # lookup finds the cycles: the test covers accepted drafts


def test_own_loop_stops_where_the_decoder_stops():
    target = PrefixTarget(vocab=16, seed=4)
    reference = target.greedy(PROMPT, 30)
    stop = reference[9]
    ours, _ = engine_loop.decode(target, bp.LookupDrafter(16), PROMPT, 4, max_new_tokens=30, stop_tokens=[stop])
    assert ours.tolist() == reference[:reference.index(stop) + 1]
    ours, _ = engine_loop.decode(target, bp.LookupDrafter(16), PROMPT, 4, max_new_tokens=5)
    assert ours.tolist() == reference[:5]


class WideTarget(PrefixTarget):
    """PrefixTarget's kind of rows over a real vocabulary, from 64 stored rows (the predictor's features
    need rows as wide as its target's)."""

    def __init__(self, vocab: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.vocab_size = vocab
        self.W = (rng.standard_normal((64, vocab)) * 3).astype(np.float32)
        self.V = rng.standard_normal((64, vocab)).astype(np.float32)
        self.context, self.scored, self.calls = [], [], 0

    def row(self, prefix) -> np.ndarray:
        return self.W[prefix[-1] % 64] + self.V[(len(prefix) + int(np.sum(prefix))) % 64]


def test_own_loop_with_the_predictor(lookup_predictor_file):
    predictor = bp.Predictor.load(lookup_predictor_file)
    target = WideTarget(predictor.vocab_size, seed=1)
    prompt = np.arange(40, dtype=np.int32) * 7
    ours, stats = engine_loop.decode(target, bp.LookupDrafter(predictor.vocab_size), prompt, predictor, max_new_tokens=24)
    reference = bp.generate(target, bp.LookupDrafter(predictor.vocab_size), prompt, policy=predictor, max_new_tokens=24)
    assert stats.block_size == reference.stats.block_size
    assert ours.tolist() == reference.tokens.tolist() == target.greedy(prompt, 24)


def test_lookup_draft_continues_the_latest_match():
    drafter = bp.LookupDrafter(16, confidence="ngram")
    context = np.array([1, 2, 3, 9, 4, 1, 2, 3, 7, 5, 2, 3], dtype=np.int32)
    tokens, confidence = drafter.draft(context, 4)
    assert tokens.dtype == np.int32 and confidence.dtype == np.float32
    assert tokens.tolist() == [7, 5, 2, 3]  # "2 3" last followed by 7 5 2 3 (the most recent occurrence)
    assert confidence.tolist() == pytest.approx([2 / 3] * 4)  # a 2-gram match of at most 3
    tokens, confidence = drafter.draft(context, 9)  # past the context's end: padding, graded 0
    assert tokens.tolist()[:4] == [7, 5, 2, 3] and confidence[-1] == 0.0
    tokens, confidence = drafter.draft(np.array([5], dtype=np.int32), 3)  # nothing to match: the anchor repeated
    assert tokens.tolist() == [5, 5, 5] and confidence.tolist() == [0.0, 0.0, 0.0]
    assert drafter.draft(context, 0)[0].size == 0


def test_lookup_drafts_from_its_corpus_where_the_context_has_no_match():
    drafter = bp.LookupDrafter(16, confidence="evidence", corpus=[[5, 6, 7, 8, 9]] * 3)
    tokens, confidence = drafter.draft(np.array([1, 2, 5, 6], dtype=np.int32), 3)
    assert tokens.tolist() == [7, 8, 9]  # "5 6" -> 7, then "5 6 7" -> 8, "6 7 8" -> 9: 3 of 3 each
    assert confidence.tolist() == pytest.approx([0.75] * 3)
    with pytest.raises(bp.Error, match="beyond a vocabulary of 8"):
        bp.LookupDrafter(8, corpus=[[1, 9]])


def test_lookup_draft_refuses_bad_requests():
    drafter = bp.LookupDrafter(16, max_draft_rows=8)
    with pytest.raises(ValueError, match="count 9 outside"):
        drafter.draft(np.array([1, 2], dtype=np.int32), 9)
    with pytest.raises(ValueError, match="count -1 outside"):
        drafter.draft(np.array([1, 2], dtype=np.int32), -1)
    with pytest.raises(bp.Error, match="LookupDrafter.draft") as failure:
        drafter.draft(np.zeros(0, dtype=np.int32), 2)
    assert failure.value.status == bp.Status.invalid_argument
