"""An engine's own loop (examples/python/engine_loop.py: LookupDrafter.draft, the predictor's choose, accept)
gives the decoder's tokens: blockpilot.generate's, on the same random streams, for every rule and
temperature, and the target's greedy decoding at T = 0. LookupDrafter.draft on its own."""

import collections
import copy
import itertools
import sys

import numpy as np
import pytest

import blockpilot as bp
from conftest import REPO
from toy_models import CyclingTarget, PrefixTarget, chi_square, chi_square_critical

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
    # Any integer ids are read as they are; floats and ids past int32 are refused, never truncated.
    expected = drafter.draft(np.array([1, 2, 3, 1, 2], dtype=np.int32), 2)[0].tolist()
    strided = np.array([[1, 9], [2, 9], [3, 9], [1, 9], [2, 9]], np.int32)[:, 0]  # not contiguous
    for same in ([1, 2, 3, 1, 2], np.array([1, 2, 3, 1, 2], np.int64), np.array([1, 2, 3, 1, 2], np.uint8), strided):
        assert drafter.draft(same, 2)[0].tolist() == expected
    with pytest.raises(TypeError, match="needs integers"):
        drafter.draft(np.array([1.0, 2.0, 1.9]), 2)
    with pytest.raises(ValueError, match="outside int32"):
        drafter.draft(np.array([1, 2**32 + 2], np.int64), 2)
    with pytest.raises(TypeError, match="needs a 1-D integer array"):
        drafter.draft([1.5, 2.0], 2)


# --- the speed cut-off, step by step and for a batch ---

COSTS = [1.0, 1.08, 1.16, 1.3, 1.45, 1.6, 1.8, 2.0]


def acceptance_table(policy):
    return [[policy.acceptance(level, position) for position in range(4)] for level in range(10)]


@pytest.mark.parametrize("rule", bp.RULES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_own_loop_with_the_speed_cutoff_takes_the_decoders_steps(rule, temperature):
    target = CyclingTarget(vocab=16, seed=5)
    ours_policy = bp.SpeedCutoff(COSTS, learn_costs=False)  # timings differ between loops; the choices must not
    reference_policy = copy.copy(ours_policy)
    for request in range(3):  # what one request teaches, the next uses: in both loops alike
        kwargs = dict(rule=rule, temperature=temperature, seed=request, max_new_tokens=48)
        drafter = bp.LookupDrafter(16, confidence="evidence")
        ours, stats = engine_loop.decode(target, drafter, PROMPT, ours_policy, **kwargs)
        reference = bp.generate(target, drafter, PROMPT, policy=reference_policy, **kwargs)
        assert ours.tolist() == reference.tokens.tolist()
        assert (stats.steps, stats.drafted, stats.accepted) == (
            reference.stats.steps, reference.stats.drafted, reference.stats.accepted)
        if temperature == 0.0:
            assert ours.tolist() == target.greedy(PROMPT, 48)
    assert 0 < stats.drafted < stats.steps * 7  # it trimmed some steps' drafts and kept others
    learned = acceptance_table(ours_policy)
    assert learned == acceptance_table(reference_policy) and learned != acceptance_table(bp.SpeedCutoff(COSTS))


def test_plan_batch_drafts_is_the_best_plan():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 4))
        gains = [np.cumprod(rng.uniform(0.2, 1.0, int(rng.integers(0, 5)))) for _ in range(n)]
        row_cost = np.cumsum(rng.uniform(0.0, 0.6, n + 12)) + 1.0
        kept = bp.plan_batch_drafts(gains, row_cost)
        assert kept.dtype == np.int32 and kept.shape == (n,)

        def rate(k):
            return (n + sum(g[:j].sum() for g, j in zip(gains, k))) / row_cost[n + sum(k) - 1]

        best = max(rate(k) for k in itertools.product(*[range(len(g) + 1) for g in gains]))
        assert rate(kept) == pytest.approx(best, rel=1e-12)


def test_one_requests_plan_is_the_speed_cutoffs_choice():
    policy = bp.SpeedCutoff(COSTS)
    rng = np.random.default_rng(4)
    for _ in range(100):
        confidence = rng.uniform(0, 1, 7).astype(np.float32)
        gains = policy.draft_gains(confidence)
        assert gains.dtype == np.float64 and gains.shape == (7,) and np.all(np.diff(gains) <= 0)
        assert bp.plan_batch_drafts([gains], COSTS)[0] == policy.keep_drafts(confidence)
    assert policy.draft_gains(np.ones(12, np.float32)).shape == (7,)  # at most max_block_size - 1 drafts
    assert policy.keep(np.ones(12, np.float32), 10) == 7 and policy.keep(np.ones(3, np.float32), -1) == 0


def test_batch_plan_keeps_what_the_plan_of_the_gains_says():
    rng = np.random.default_rng(5)
    base = bp.SpeedCutoff(COSTS)
    row_cost = [1.0 + 0.07 * r for r in range(20)]
    plan = bp.BatchPlan(row_cost)
    assert plan.row_cost == row_cost
    for n in (1, 3, 6):
        cutoffs = [base.shared() for _ in range(n)]
        confidence = [rng.uniform(0, 1, int(rng.integers(0, 10))).astype(np.float32) for _ in range(n)]
        expected = bp.plan_batch_drafts([c.draft_gains(g) for c, g in zip(cutoffs, confidence)], row_cost)
        kept = plan.keep_drafts(cutoffs, confidence)
        assert kept.dtype == np.int32 and kept.tolist() == expected.tolist()
        assert sum(kept) + n <= len(row_cost)
        padded = bp.BatchPlan(row_cost[:6], padded=True).keep_drafts(cutoffs, confidence)  # by the widest block
        gains = [c.draft_gains(g) for c, g in zip(cutoffs, confidence)]
        rates = [(n + sum(g[:w - 1].sum() for g in gains)) / row_cost[w - 1] for w in range(1, 7)]
        width = int(np.argmax(rates)) + 1  # the best width (the first of equals)
        assert padded.tolist() == [min(width - 1, len(g)) for g in gains]
    flat = bp.BatchPlan([1.0] * 4, padded=True)  # free up to 4 rows each, unpriced beyond
    assert flat.padded and flat.keep_drafts([base.shared()], [np.ones(9, np.float32)]).tolist() == [3]


def test_step_calls_refuse_bad_inputs():
    policy = bp.SpeedCutoff(COSTS)
    with pytest.raises(ValueError, match="non-increasing"):
        bp.plan_batch_drafts([[0.5, 0.6]], COSTS)
    with pytest.raises(ValueError, match=r"chances in \[0, 1\]"):
        bp.plan_batch_drafts([[5.0, 4.0]], COSTS)
    with pytest.raises(ValueError, match="non-increasing"):
        bp.plan_batch_drafts([[0.5], [float("nan")]], COSTS)
    with pytest.raises(ValueError, match="row costs"):
        bp.plan_batch_drafts([[0.5]], [1.0, 0.0])
    with pytest.raises(bp.Error, match="a row cost for each request"):
        bp.plan_batch_drafts([[0.5], [0.5], [0.5]], [1.0, 1.1])
    with pytest.raises(ValueError, match="BatchPlan"):
        bp.BatchPlan([])
    with pytest.raises(ValueError, match="BatchPlan"):
        bp.BatchPlan([1.0, float("inf")])
    with pytest.raises(ValueError, match="2 cut-offs but 1"):
        bp.BatchPlan(COSTS).keep_drafts([policy, policy.shared()], [np.ones(3, np.float32)])
    with pytest.raises(bp.Error, match="a row cost for each request"):
        bp.BatchPlan([1.0]).keep_drafts([policy, policy.shared()], [np.ones(3, np.float32)] * 2)
    for step, block_size, accepted, seconds in [(-1, 2, 0, 0.1), (0, 0, 0, 0.1), (0, 3, 3, 0.1), (0, 3, 1, -1.0)]:
        with pytest.raises(ValueError, match="SpeedCutoff.observe"):
            policy.observe(step, block_size, accepted, seconds)


BATCH_PROMPTS = [PROMPT, PROMPT[::-1].copy(), np.array([7, 7, 2, 9, 4], dtype=np.int32), PROMPT[3:] * 2 % 16,
                 np.array([0, 1, 2, 3, 0, 1, 2], dtype=np.int32)]


def batch(targets, row_cost, **kwargs):
    """decode_batch's tokens and stats, planned by `row_cost` (a block size: fixed); asserts that a planning
    cut-off learned from the requests' steps."""
    policy = bp.SpeedCutoff(COSTS, learn_costs=False)
    prior = acceptance_table(policy)
    planned = not isinstance(row_cost, int)
    out = engine_loop.decode_batch(engine_loop.PerRequest(targets), bp.LookupDrafter(16, confidence="evidence"),
                                   BATCH_PROMPTS, (policy, bp.BatchPlan(row_cost)) if planned else row_cost, **kwargs)
    assert (acceptance_table(policy) != prior) == (planned and out[1].drafted > 0)  # the shared copies taught it
    return out


@pytest.mark.parametrize("rule", bp.RULES)
def test_batch_loop_gives_each_requests_greedy_decoding(rule):
    targets = [CyclingTarget(vocab=16, seed=6) for _ in BATCH_PROMPTS]
    n = len(BATCH_PROMPTS)
    free = [1.0] * (n * 8)  # rows cost nothing: every draft with a chance is verified
    dear = [1.0 + 3.0 * r for r in range(n * 8)]  # each row costs three steps: no draft pays
    budget = [1.0] * (n + 3)  # free up to three drafts a step for the whole batch, none beyond
    runs = {}
    for name, row_cost in [("free", free), ("dear", dear), ("budget", budget), ("fixed 3", 3)]:
        tokens, stats = batch(targets, row_cost, rule=rule, max_new_tokens=40, stop_tokens=[15])
        for out, prompt in zip(tokens, BATCH_PROMPTS):
            reference = targets[0].greedy(prompt, 40)
            if 15 in reference:
                reference = reference[:reference.index(15) + 1]
            assert out.tolist() == reference, name
        assert len(stats.rows) == stats.steps and stats.accepted <= stats.drafted
        runs[name] = stats
    assert runs["dear"].drafted == 0
    assert runs["free"].drafted > runs["budget"].drafted > 0 and runs["free"].steps < runs["dear"].steps
    assert max(runs["budget"].rows) <= n + 3  # never more rows than the costs cover
    assert runs["fixed 3"].drafted == 2 * (sum(runs["fixed 3"].rows) // 3)  # every request's block: 3 rows


def sample_batch_pairs(rule, runs=3000):
    """The first two tokens of `runs` requests of one prompt, seeds 0..runs-1, served as one batch."""
    targets = [PrefixTarget(vocab=6, seed=11, scale=1.0) for _ in range(runs)]
    prompt = PROMPT % 6
    tokens, stats = engine_loop.decode_batch(engine_loop.PerRequest(targets), bp.LookupDrafter(6), [prompt] * runs,
                                             (bp.SpeedCutoff([1.0] * 4), bp.BatchPlan([1.0] * (runs * 4))), rule=rule,
                                             temperature=1.0, max_new_tokens=2, seeds=np.arange(runs))
    assert stats.drafted > 0  # the second token was drafted and verified
    counts = collections.Counter(tuple(t.tolist()) for t in tokens)
    cells = [(a, b) for a in range(6) for b in range(6)]
    observed = np.array([counts[c] for c in cells], dtype=float)
    expected = np.array([targets[0].probability(prompt, c) for c in cells])
    return chi_square(observed, expected)


@pytest.mark.parametrize("rule", ["rejection", "sample-match"])
def test_batch_loop_follows_the_target_distribution(rule):
    stat, dof = sample_batch_pairs(rule)
    assert stat < chi_square_critical(dof), (stat, dof)


def test_batch_loop_with_a_wrong_q_is_caught(monkeypatch):
    # Lookup's drafts are certain (q one-hot); claimed uniform, rejection sampling keeps them too often.
    monkeypatch.setattr(engine_loop, "one_hot", lambda drafts, vocab: np.full((len(drafts), vocab), 1 / vocab, np.float32))
    stat, dof = sample_batch_pairs("rejection")
    assert stat > chi_square_critical(dof), (stat, dof)
