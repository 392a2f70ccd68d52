"""The decode loop through the binding: exactly the target's greedy decoding at T = 0, the target's
distribution at T = 1 (and a drafter that lies about q is caught), failures that keep what was committed;
the SpeedCutoff per-step policy and the step timings it starts from."""

import collections
import copy
import time

import numpy as np
import pytest

import blockpilot as bp
from toy_models import CyclingTarget, NoisyDrafter, PrefixTarget, chi_square, chi_square_critical

PROMPT = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int32)


@pytest.mark.parametrize("block_size", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("drafter_kind", ["lookup", "python"])
@pytest.mark.parametrize("rule", ["greedy", "sample-match", "rejection"])
def test_greedy_output_equals_plain_greedy_decoding(block_size, drafter_kind, rule):
    target = PrefixTarget(vocab=16, seed=block_size)
    drafter = bp.LookupDrafter(16) if drafter_kind == "lookup" else NoisyDrafter(target, noise=1.0)
    result = bp.generate(target, drafter, PROMPT, policy=block_size, rule=rule, max_new_tokens=40)
    assert result.tokens.tolist() == target.greedy(PROMPT, 40)
    stats = result.stats
    assert stats.block_size == block_size and stats.generated == 40
    assert stats.steps == target.calls
    assert stats.accepted <= stats.drafted == stats.steps * (block_size - 1)
    if block_size > 1 and drafter_kind == "python":
        assert stats.accepted > 0  # the noisy drafter is right often enough for the test to mean something


def test_plain_decoding_without_a_drafter():
    target = PrefixTarget(vocab=16, seed=3)
    result = bp.generate(target, None, PROMPT, max_new_tokens=12)  # the default policy: 1 without a drafter
    assert result.tokens.tolist() == target.greedy(PROMPT, 12) and result.stats.block_size == 1
    with pytest.raises(ValueError):
        bp.generate(target, None, PROMPT, policy=4)


def test_a_numpy_block_size_and_an_interrupt_in_a_callback():
    target = PrefixTarget(vocab=16, seed=3)
    result = bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=np.int32(4), max_new_tokens=12)
    assert result.tokens.tolist() == target.greedy(PROMPT, 12) and result.stats.block_size == 4
    with pytest.raises(TypeError):
        bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4.0)

    def interrupt(tokens):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # not turned into a decode failure
        bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, on_tokens=interrupt)


def test_stop_tokens_and_streaming():
    target = PrefixTarget(vocab=16, seed=4)
    reference = target.greedy(PROMPT, 30)
    stop = reference[9]
    streamed = []

    def on_tokens(tokens):
        streamed.extend(tokens.tolist())
        time.sleep(0.002)

    result = bp.generate(target, NoisyDrafter(target), PROMPT, policy=4, max_new_tokens=30, stop_tokens=[stop],
                         on_tokens=on_tokens)
    cut = reference.index(stop) + 1
    assert result.tokens.tolist() == reference[:cut] == streamed
    # The time in on_tokens is its own stage, not the library's bookkeeping.
    seconds = result.stats.seconds
    assert seconds["streaming"] >= 0.002 and seconds["total"] >= seconds["streaming"]


def sample_pairs(drafter_factory, rule, runs, temperature=1.0, policy=4):
    target = PrefixTarget(vocab=6, seed=11, scale=1.0)
    counts = collections.Counter()
    for seed in range(runs):
        drafter = drafter_factory(target)
        out = bp.generate(target, drafter, PROMPT % 6, policy=policy, rule=rule, max_new_tokens=2,
                          temperature=temperature, seed=seed)
        counts[tuple(out.tokens.tolist())] += 1
    cells = [(a, b) for a in range(6) for b in range(6)]
    observed = np.array([counts[c] for c in cells], dtype=float)
    expected = np.array([target.probability(PROMPT % 6, c, temperature) for c in cells])
    return chi_square(observed, expected)


@pytest.mark.parametrize("rule", ["rejection", "sample-match"])
def test_sampled_output_follows_the_target_distribution(rule):
    stat, dof = sample_pairs(lambda t: NoisyDrafter(t, noise=1.0), rule, runs=3000)
    assert stat < chi_square_critical(dof), (stat, dof)


def test_a_drafter_that_misreports_q_is_caught():
    # Drafts are samples of q, but it reports q squared and renormalised: rejection sampling then keeps
    # the drafter's likely tokens too often, and the output no longer follows the target.
    def lying(target):
        return NoisyDrafter(target, noise=1.0, claimed_q=lambda q: (q**3 / (q**3).sum()).astype(np.float32))

    stat, dof = sample_pairs(lying, "rejection", runs=3000)
    assert stat > chi_square_critical(dof), (stat, dof)


def test_predictor_policy_falls_back_on_another_vocabulary(lookup_predictor_file):
    predictor = bp.Predictor.load(lookup_predictor_file)
    target = PrefixTarget(vocab=16, seed=5)
    result = bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=predictor, max_new_tokens=20)
    assert result.stats.policy_fallback and result.stats.block_size == predictor.training_block_size
    assert result.tokens.tolist() == target.greedy(PROMPT, 20)


class FailingTarget(PrefixTarget):
    def __init__(self, fail_at_call, how):
        super().__init__(vocab=16, seed=6)
        self.fail_at_call, self.how = fail_at_call, how

    def score(self, block):
        rows = super().score(block)
        if self.calls == self.fail_at_call:
            if self.how == "raise":
                raise KeyError("model fell over")
            if self.how == "shape":
                return rows[:, :-1]
            if self.how == "nan":
                rows[0, 0] = np.nan
            if self.how == "type":
                return "rows"
        return rows


@pytest.mark.parametrize("how,stage,code", [("raise", "verify", bp.Status.model_error),
                                            ("shape", "verify", bp.Status.model_error),
                                            ("type", "verify", bp.Status.model_error),
                                            ("nan", "accept", bp.Status.non_finite_logits)])
def test_a_failing_verifier_ends_the_request_and_keeps_its_tokens(how, stage, code):
    target = FailingTarget(fail_at_call=3, how=how)
    reference = PrefixTarget(vocab=16, seed=6).greedy(PROMPT, 40)
    with pytest.raises(bp.Error) as caught:
        bp.generate(target, NoisyDrafter(target), PROMPT, policy=4, max_new_tokens=40)
    error = caught.value
    assert error.status == code and error.stage == stage
    kept = error.result.tokens.tolist()
    assert 1 <= len(kept) < 40 and kept == reference[: len(kept)]
    assert error.result.stats.steps == 2
    if how == "raise":
        assert isinstance(error.__cause__, KeyError)
        assert "verifier.score() raised KeyError: 'model fell over'" in str(error)
    if how == "shape":
        assert "(4, 15)" in str(error) and "(4, 16)" in str(error)


def test_bad_inputs_raise_clear_errors():
    target = PrefixTarget(vocab=16)
    with pytest.raises(bp.Error) as caught:
        bp.generate(target, bp.LookupDrafter(16), [], policy=4)
    assert caught.value.status == bp.Status.empty_prompt and caught.value.stage == "input"
    with pytest.raises(bp.Error) as caught:
        bp.generate(target, bp.LookupDrafter(16), [3, 99], policy=4)
    assert caught.value.status == bp.Status.invalid_token
    with pytest.raises(bp.Error) as caught:
        bp.generate(target, bp.LookupDrafter(32), PROMPT, policy=4)
    assert caught.value.status == bp.Status.vocab_mismatch
    with pytest.raises(bp.Error) as caught:
        bp.generate(target, bp.LookupDrafter(16), PROMPT, temperature=-1.0)
    assert caught.value.status == bp.Status.invalid_temperature
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        bp.generate(target, bp.LookupDrafter(16), PROMPT, rule="typical")
    with pytest.raises(TypeError, match="vocab_size"):
        bp.generate(object(), bp.LookupDrafter(16), PROMPT)
    # Token ids of any integer type are read as they are; floats and ids past int32 are refused, not truncated.
    reference = bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, max_new_tokens=12).tokens.tolist()
    for same in (PROMPT.tolist(), PROMPT.astype(np.int64), PROMPT.astype(np.uint16), PROMPT.reshape(2, 4)):
        assert bp.generate(target, bp.LookupDrafter(16), same, policy=4, max_new_tokens=12).tokens.tolist() == reference
    with pytest.raises(TypeError, match="generate: prompt: needs integers"):
        bp.generate(target, bp.LookupDrafter(16), PROMPT + 0.5, policy=4)
    with pytest.raises(ValueError, match="outside int32"):
        bp.generate(target, bp.LookupDrafter(16), np.array([3, 2**32 + 3]), policy=4)
    with pytest.raises(TypeError):
        bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, stop_tokens=[2.5])
    with pytest.raises(ValueError, match="stop_tokens must be token ids within int32"):
        bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, stop_tokens=[2**31])
    with pytest.raises(TypeError, match="measure_step_seconds: context: needs integers"):
        bp.measure_step_seconds(target, PROMPT * 1.0, max_block=2)
    with pytest.raises(TypeError, match="needs integers, not bools"):  # as a bool array is
        bp.LookupDrafter(16).draft([True, False, True], 2)
    with pytest.raises(ValueError, match="seed must not be negative"):
        bp.generate(target, bp.LookupDrafter(16), PROMPT, seed=-1)
    with pytest.raises(ValueError, match="outside the vocabulary of 16"):
        bp.LookupDrafter(16).draft([1, 2, 300, 1, 2], 2)
    with pytest.raises(bp.Error, match="max_draft_rows >= 0"):
        bp.LookupDrafter(8, max_draft_rows=-1)


@pytest.mark.parametrize("drafter", [None, "noisy"])
def test_a_vocabulary_must_hold_a_token(drafter):
    target = PrefixTarget(vocab=16, seed=9)
    model = NoisyDrafter(target) if drafter else None
    (model or target).vocab_size = 0
    with pytest.raises(ValueError, match="vocab_size must be at least 1, not 0"):
        bp.generate(target, model, PROMPT, policy=4 if model else 1)


@pytest.mark.parametrize("attribute", ["vocab_size", "max_draft_rows"])
@pytest.mark.parametrize("value", [16.0, True, "16"])
def test_a_models_sizes_must_be_ints(attribute, value):
    target = PrefixTarget(vocab=16, seed=9)
    drafter = NoisyDrafter(target)
    setattr(target if attribute == "vocab_size" else drafter, attribute, value)
    with pytest.raises(TypeError, match=f"{attribute} must be an int, not {type(value).__name__}"):
        bp.generate(target, drafter, PROMPT, policy=4)


@pytest.mark.parametrize("rows", [-1, 2**40])
def test_a_drafters_row_count_is_checked(rows):
    target = PrefixTarget(vocab=16, seed=9)
    drafter = NoisyDrafter(target)
    drafter.max_draft_rows = rows
    if rows < 0:
        with pytest.raises(ValueError, match="max_draft_rows"):
            bp.generate(target, drafter, PROMPT, policy=4)
    else:  # more than a block holds: a block's worth
        result = bp.generate(target, drafter, PROMPT, policy=4, max_new_tokens=20)
        assert result.tokens.tolist() == target.greedy(PROMPT, 20)


def test_rejection_needs_q_from_a_python_drafter():
    class TokensOnly(NoisyDrafter):
        def draft(self, *args):
            return super().draft(*args)[0]

    target = PrefixTarget(vocab=16)
    bp.generate(target, TokensOnly(target), PROMPT, policy=4, rule="sample-match", temperature=1.0, max_new_tokens=8)
    with pytest.raises(bp.Error, match="needs the draft distribution") as caught:
        bp.generate(target, TokensOnly(target), PROMPT, policy=4, rule="rejection", temperature=1.0)
    assert caught.value.stage == "draft"


def test_a_raising_stream_callback_cancels():
    target = PrefixTarget(vocab=16, seed=7)

    def on_tokens(tokens):
        raise RuntimeError("client went away")

    with pytest.raises(bp.Error) as caught:
        bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, max_new_tokens=30, on_tokens=on_tokens)
    assert caught.value.status == bp.Status.cancelled
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.result.tokens.tolist() == target.greedy(PROMPT, 1)
    # Raised on the request's last tokens (the token limit, or a stop token), it still reaches the caller.
    for ending in ({"max_new_tokens": 1}, {"max_new_tokens": 30, "stop_tokens": target.greedy(PROMPT, 1)}):
        with pytest.raises(bp.Error) as caught:
            bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, on_tokens=on_tokens, **ending)
        assert caught.value.status == bp.Status.cancelled and isinstance(caught.value.__cause__, RuntimeError)


@pytest.mark.parametrize("form", ["list", "int64", "tuple"])
@pytest.mark.parametrize("block_size", [3, 4])  # a tuple of two tokens at 3 is not (tokens, q)
def test_drafts_as_a_list_int64_or_tuple(form, block_size):
    class Converted(NoisyDrafter):
        def draft(self, *args):
            tokens, _ = super().draft(*args)
            return {"list": tokens.tolist(), "int64": tokens.astype(np.int64), "tuple": tuple(tokens)}[form]

    target = PrefixTarget(vocab=16, seed=9)
    result = bp.generate(target, Converted(target), PROMPT, policy=block_size, max_new_tokens=20)
    assert result.tokens.tolist() == target.greedy(PROMPT, 20) and result.stats.accepted > 0


@pytest.mark.parametrize("bad", [lambda t: t + 0.25, lambda t: t.astype(np.int64) + 2**32, lambda t: [float(x) for x in t]])
def test_drafts_that_are_not_int32_ids_are_refused(bad):
    class Truncatable(NoisyDrafter):
        def draft(self, *args):
            return bad(super().draft(*args)[0])

    target = PrefixTarget(vocab=16, seed=9)
    with pytest.raises(bp.Error, match="drafter.draft") as caught:
        bp.generate(target, Truncatable(target), PROMPT, policy=4, max_new_tokens=20)
    assert caught.value.stage == "draft"


def test_drafter_sees_the_commits():
    target = PrefixTarget(vocab=16, seed=8)
    drafter = NoisyDrafter(target)
    result = bp.generate(target, drafter, PROMPT, policy=5, max_new_tokens=25)
    assert len(drafter.commits) == result.stats.steps
    assert all(1 <= n <= 5 for n in drafter.commits)
    assert sum(drafter.commits) == result.stats.accepted + result.stats.steps


# --- the SpeedCutoff policy ---


def flat_costs(max_block=8):
    return [1.0] * max_block


@pytest.mark.parametrize("target_kind", ["cycling", "prefix"])
@pytest.mark.parametrize("confidence", ["ngram", "evidence"])
@pytest.mark.parametrize("rule", ["greedy", "sample-match", "rejection"])
def test_speed_cutoff_output_equals_plain_greedy_decoding(target_kind, confidence, rule):
    target = CyclingTarget(vocab=16, seed=2) if target_kind == "cycling" else PrefixTarget(vocab=16, seed=2)
    # drafts pay where they are likely; the costs stay these (learnt from timings, the sizes would vary by run)
    policy = bp.SpeedCutoff([1.0 + 0.15 * (b - 1) for b in range(1, 9)], learn_costs=False)
    for request in range(3):  # the policy carries what it learned from one request to the next
        target.calls = 0
        result = bp.generate(target, bp.LookupDrafter(16, confidence=confidence), PROMPT, policy=policy, rule=rule,
                             max_new_tokens=40)
        assert result.tokens.tolist() == target.greedy(PROMPT, 40)
        stats = result.stats
        assert stats.generated == 40 and stats.steps == target.calls and stats.block_size == 8
        assert sum(stats.steps_by_block) == stats.steps and stats.accepted <= stats.drafted
    if target_kind == "cycling":
        assert stats.accepted > 0 and len([n for n in stats.steps_by_block if n]) > 1  # the size varies by step
        assert stats.steps_by_block[1] > 0  # plain steps where lookup has nothing to offer


def test_speed_cutoff_verifies_more_drafts_where_rows_are_cheap():
    target = CyclingTarget(vocab=16, seed=3)
    steps = {}
    for name, costs in [("cheap", flat_costs()), ("dear", [1.0 + 2.0 * (b - 1) for b in range(1, 9)])]:
        policy = bp.SpeedCutoff(costs, learn_costs=False)
        result = bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=policy, max_new_tokens=60)
        assert result.tokens.tolist() == target.greedy(PROMPT, 60)
        steps[name] = result.stats
    # A draft pays on dear rows only if it is all but certain to be accepted: none here is, so every
    # step is plain; on cheap rows the matched continuations are verified.
    assert steps["dear"].drafted == 0 and steps["dear"].steps == 59  # the first token comes with the prefill
    assert steps["cheap"].drafted > 0 and steps["cheap"].steps < 45


def test_speed_cutoff_learns_acceptance_and_keeps_a_fixed_curve():
    target = CyclingTarget(vocab=16, seed=4)
    costs = [1.0, 1.1, 1.2, 1.35, 1.5, 1.7, 1.9, 2.1]
    policy = bp.SpeedCutoff(costs, learn_costs=False)
    assert policy.max_block_size == 8 and policy.step_costs == costs
    before = policy.acceptance(9, 0)  # the longest matches, first draft: the prior says 0.95
    assert before == pytest.approx(0.95)
    for _ in range(3):
        bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=policy, max_new_tokens=40)
    assert policy.step_costs == costs
    assert policy.acceptance(9, 0) != before  # what the requests showed moved the estimate
    learning = bp.SpeedCutoff(costs)
    bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=learning, max_new_tokens=40)
    learned = learning.step_costs
    assert learned[0] == 1.0 and all(np.isfinite(learned)) and min(learned) > 0


def test_shared_speed_cutoffs_pool_what_they_learn():
    target = CyclingTarget(vocab=16, seed=4)
    learner = bp.SpeedCutoff([1.0, 1.1, 1.2, 1.35, 1.5, 1.7, 1.9, 2.1], learn_costs=False)
    pooled, independent = learner.shared(), copy.copy(learner)
    prior = learner.acceptance(9, 0)
    learned = []
    for policy in (pooled, independent):  # one request each, as requests of a batch would be
        result = bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=policy, max_new_tokens=40)
        assert result.tokens.tolist() == target.greedy(PROMPT, 40)
        learned.append(learner.acceptance(9, 0))
    assert learned[0] != prior  # the shared cut-off's request taught the learner
    assert learned[1] == learned[0]  # the copy's did not
    assert independent.acceptance(9, 0) != prior


def test_speed_cutoff_output_follows_the_target_distribution():
    policy = bp.SpeedCutoff([1.0, 1.0, 1.0, 1.0])
    stat, dof = sample_pairs(lambda t: bp.LookupDrafter(6), "rejection", runs=3000, policy=policy)
    assert stat < chi_square_critical(dof), (stat, dof)


def test_speed_cutoff_refuses_bad_curves_and_drafters_without_grades():
    for costs in ([], [2.0, 3.0], [1.0, -1.0], [1.0, float("nan")]):
        with pytest.raises(bp.Error, match="step_cost_model"):
            bp.SpeedCutoff(costs)
    with pytest.raises(bp.Error, match="speed_cutoff"):
        bp.SpeedCutoff(flat_costs(), levels=0)
    for bad in ({"levels": 65536, "positions": 65536}, {"prior_weight": float("inf")}, {"request_weight": float("inf")},
                {"explore": float("nan")}):
        with pytest.raises(bp.Error, match="speed_cutoff"):
            bp.SpeedCutoff(flat_costs(), **bad)
    with pytest.raises(bp.Error, match="at most 256 sizes"):
        bp.SpeedCutoff([1.0] * 1000)
    with pytest.raises(ValueError, match="confidence"):
        bp.LookupDrafter(16, confidence="guess")
    target = PrefixTarget(vocab=16)
    with pytest.raises(TypeError, match="LookupDrafter"):
        bp.generate(target, NoisyDrafter(target), PROMPT, policy=bp.SpeedCutoff(flat_costs()))


def test_measure_step_seconds():
    target = PrefixTarget(vocab=16)
    seconds = bp.measure_step_seconds(target, PROMPT, max_block=6, repeats=3)
    assert len(seconds) == 6 and all(s > 0 for s in seconds)
    assert target.calls == 19  # one untimed step, then every size three rounds
    policy = bp.SpeedCutoff([s / seconds[0] for s in seconds])
    assert policy.max_block_size == 6 and policy.step_costs[0] == 1.0
    with pytest.raises(bp.Error, match="needs a context"):
        bp.measure_step_seconds(target, [], max_block=4)
    failing = FailingTarget(fail_at_call=2, how="raise")
    with pytest.raises(bp.Error, match="verifier.score\\(\\) raised KeyError") as caught:
        bp.measure_step_seconds(failing, PROMPT, max_block=4)
    assert isinstance(caught.value.__cause__, KeyError)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_a_measured_verifier_comes_out_as_itself(interrupt):
    class Interrupted(PrefixTarget):
        def score(self, block):
            raise interrupt

    with pytest.raises(interrupt):
        bp.measure_step_seconds(Interrupted(vocab=16), PROMPT, max_block=4)
    with pytest.raises(interrupt):
        bp.check_block_invariance(Interrupted(vocab=16), PROMPT, [1, 2, 3])


class BlockShiftedTarget(PrefixTarget):
    """PrefixTarget whose rows after a block's first get `delta` added to token 0's logit."""

    def __init__(self, delta: float, **kwargs):
        super().__init__(**kwargs)
        self.delta = delta

    def score(self, block):
        rows = super().score(block)
        rows[1:, 0] += self.delta
        return rows


def test_check_block_invariance():
    exact = bp.check_block_invariance(PrefixTarget(vocab=16, seed=3), PROMPT, PrefixTarget(vocab=16, seed=3).greedy(PROMPT, 30))
    assert [c["block_size"] for c in exact] == [2, 4, 8, 16]
    assert all(c["exact"] and c["rows"] == 29 and c["argmax_changes"] == 0 for c in exact)
    continuation = PrefixTarget(vocab=16, seed=3).greedy(PROMPT, 30)
    shifted = bp.check_block_invariance(BlockShiftedTarget(1e3, vocab=16, seed=3), PROMPT, continuation, [1, 4])
    assert shifted[0]["exact"] and not shifted[1]["exact"]
    assert shifted[1]["max_abs_difference"] == pytest.approx(1e3)
    moved = sum(1 for j in range(29) if j % 4 != 0 and continuation[j + 1] != 0)
    assert shifted[1]["argmax_changes"] == moved > 0
    # What the check predicts: the decoder follows the rows it gets, away from plain greedy decoding.
    target = BlockShiftedTarget(1e3, vocab=16, seed=3)
    assert bp.generate(target, bp.LookupDrafter(16), PROMPT, policy=4, max_new_tokens=30).tokens.tolist() != continuation
    with pytest.raises(bp.Error, match="at least two continuation tokens"):
        bp.check_block_invariance(PrefixTarget(vocab=16), PROMPT, [1])
    with pytest.raises(bp.Error, match="at least 1"):
        bp.check_block_invariance(PrefixTarget(vocab=16), PROMPT, continuation, [0])
    with pytest.raises(TypeError, match="check_block_invariance: continuation: needs integers"):
        bp.check_block_invariance(PrefixTarget(vocab=16), PROMPT, [1.5, 2.5])
    with pytest.raises(bp.Error, match="verifier.score\\(\\) raised KeyError"):
        bp.check_block_invariance(FailingTarget(fail_at_call=2, how="raise"), PROMPT, continuation)
