"""blockpilot.accept on ragged batches: greedy counts against a reference, the rejection rule's output
distribution (and a wrong q caught), the per-request streams, and refused inputs."""

import numpy as np
import pytest

import blockpilot as bp
from toy_models import chi_square, chi_square_critical, softmax


def ragged(draft_counts, vocab, rng):
    offsets = np.concatenate([[0], np.cumsum(draft_counts)]).astype(np.int32)
    rows = int(offsets[-1]) + len(draft_counts)
    return offsets, (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)


def test_greedy_counts_and_bonus_match_a_reference():
    rng = np.random.default_rng(0)
    counts = [0, 1, 3, 7, 2, 15, 4]
    offsets, logits = ragged(counts, 50, rng)
    blocks = np.zeros(len(logits), dtype=np.int32)
    expected_accepted, expected_bonus = [], []
    for r, d in enumerate(counts):
        first = offsets[r] + r
        argmax = logits[first:first + d + 1].argmax(axis=1)
        keep = int(rng.integers(0, d + 1))  # drafts 0..keep-1 right, the next one wrong
        blocks[first] = rng.integers(50)
        for j in range(d):
            blocks[first + 1 + j] = argmax[j] if j < keep else (argmax[j] + 1) % 50
        expected_accepted.append(keep)
        expected_bonus.append(int(argmax[keep]))
    out = bp.accept("greedy", logits, blocks, offsets)
    assert out.accepted.tolist() == expected_accepted
    assert out.bonus.tolist() == expected_bonus


def first_tokens(p_row, q_row, reported_q, n, seed=0):
    """n one-draft requests with the same rows: the committed token of each (the draft, or the bonus)."""
    vocab = len(p_row)
    rng = np.random.default_rng(seed)
    drafts = rng.choice(vocab, size=n, p=q_row / q_row.sum()).astype(np.int32)
    logits = np.tile(np.stack([np.log(p_row), np.zeros(vocab)]).astype(np.float32), (n, 1))
    blocks = np.stack([np.zeros(n, np.int32), drafts], axis=1).reshape(-1)
    offsets = np.arange(n + 1, dtype=np.int32)
    probs = np.tile(reported_q.astype(np.float32), (n, 1))
    out = bp.accept("rejection", logits, blocks, offsets, seeds=np.arange(n, dtype=np.uint64), offsets=1,
                    temperature=1.0, draft_probs=probs)
    return np.where(out.accepted == 1, drafts, out.bonus)


def test_rejection_sampling_keeps_the_target_distribution():
    p = softmax(np.linspace(2.0, -2.0, 12))
    q = softmax(np.linspace(-1.0, 1.5, 12))
    tokens = first_tokens(p, q, q, 20000)
    stat, dof = chi_square(np.bincount(tokens, minlength=12).astype(float), p)
    assert stat < chi_square_critical(dof), (stat, dof)


def test_a_wrong_q_is_caught():
    p = softmax(np.linspace(2.0, -2.0, 12))
    q = softmax(np.linspace(-1.0, 1.5, 12))
    tokens = first_tokens(p, q, np.full(12, 1.0 / 12), 20000)  # drafts from q, reported uniform
    stat, dof = chi_square(np.bincount(tokens, minlength=12).astype(float), p)
    assert stat > chi_square_critical(dof), (stat, dof)


def test_streams_decide_the_draws():
    rng = np.random.default_rng(3)
    offsets, logits = ragged([3] * 64, 20, rng)
    blocks = rng.integers(0, 20, size=len(logits)).astype(np.int32)
    seeds = np.arange(64, dtype=np.uint64) * 7

    def run(s, step):
        return bp.accept("sample-match", logits, blocks, offsets, seeds=s, offsets=step, temperature=1.0)

    first, again = run(seeds, 5), run(seeds, 5)
    assert np.array_equal(first.bonus, again.bonus) and np.array_equal(first.accepted, again.accepted)
    assert not np.array_equal(first.bonus, run(seeds, 6).bonus)
    assert not np.array_equal(first.bonus, run(seeds + 1, 5).bonus)
    # A request's outcome depends on its own rows and stream only: the same request alone agrees.
    alone = bp.accept("sample-match", logits[4 * 9:4 * 10], blocks[4 * 9:4 * 10], np.array([0, 3], np.int32),
                      seeds=seeds[9], offsets=5, temperature=1.0)
    assert alone.bonus[0] == first.bonus[9] and alone.accepted[0] == first.accepted[9]


def test_torch_tensors_are_read_in_place():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    offsets, logits = ragged([2, 5], 30, rng)
    blocks = rng.integers(0, 30, size=len(logits)).astype(np.int32)
    expected = bp.accept("greedy", logits, blocks, offsets)
    out = bp.accept("greedy", torch.from_numpy(logits), torch.from_numpy(blocks), torch.from_numpy(offsets))
    assert np.array_equal(out.accepted, expected.accepted) and np.array_equal(out.bonus, expected.bonus)


def test_refused_inputs():
    rng = np.random.default_rng(5)
    offsets, logits = ragged([2, 3], 10, rng)
    blocks = np.zeros(len(logits), dtype=np.int32)
    with pytest.raises(ValueError, match="must not decrease"):
        bp.accept("greedy", logits, blocks, np.array([0, 3, 2], np.int32))
    with pytest.raises(ValueError, match=r"draft_offsets\[0\]"):
        bp.accept("greedy", logits, blocks, np.array([1, 3, 5], np.int32))
    with pytest.raises(ValueError, match="target_logits has"):
        bp.accept("greedy", logits[:-1], blocks[:-1], offsets)
    with pytest.raises(ValueError, match="blocks has"):
        bp.accept("greedy", logits, blocks[:-1], offsets)
    with pytest.raises(TypeError, match="blocks: needs integers"):
        bp.accept("greedy", logits, blocks + 0.9, offsets)
    with pytest.raises(ValueError, match="blocks: 4294967296 is outside int32"):
        bp.accept("greedy", logits, blocks.astype(np.int64) + 2**32, offsets)
    with pytest.raises(TypeError, match="draft_offsets: needs integers"):
        bp.accept("greedy", logits, blocks, offsets + 0.5)
    assert bp.accept("greedy", logits, blocks.astype(np.int64), offsets.astype(np.uint8)).accepted.tolist() == \
        bp.accept("greedy", logits, blocks, offsets).accepted.tolist()
    with pytest.raises(ValueError, match="needs draft_probs"):
        bp.accept("rejection", logits, blocks, offsets, temperature=1.0)
    with pytest.raises(ValueError, match="draft_probs has"):
        bp.accept("rejection", logits, blocks, offsets, temperature=1.0, draft_probs=np.ones((4, 10), np.float32))
    with pytest.raises(TypeError, match="seeds must be integers"):
        bp.accept("greedy", logits, blocks, offsets, seeds=1.5)
    with pytest.raises(ValueError, match="offsets must not be negative"):
        bp.accept("greedy", logits, blocks, offsets, offsets=[3, -1])

    class OnDevice(np.ndarray):  # what the package sees of a CUDA tensor
        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match="blocks must be a CUDA array too"):
        bp.accept("greedy", logits.view(OnDevice), blocks, offsets)
    # Device arrays are read in place, never converted (a conversion would run on another stream).
    with pytest.raises(TypeError, match="blocks on the device must be int32, got int64"):
        bp.accept("greedy", logits.view(OnDevice), blocks.astype(np.int64).view(OnDevice), offsets.view(OnDevice))
    with pytest.raises(TypeError, match="target_logits on the device must be float32, got float64"):
        bp.accept("greedy", logits.astype(np.float64).view(OnDevice), blocks.view(OnDevice), offsets.view(OnDevice))

    class OnOtherDevice(np.ndarray):
        def __dlpack_device__(self):
            return (2, 1)

    with pytest.raises(ValueError, match="draft_offsets is on another device than target_logits"):
        bp.accept("greedy", logits.view(OnDevice), blocks.view(OnDevice), offsets.view(OnOtherDevice))
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        bp.accept("typical", logits, blocks, offsets)
    with pytest.raises(ValueError, match="at most 255"):
        many = np.array([0, 300], np.int32)
        bp.accept("greedy", np.zeros((301, 10), np.float32), np.zeros(301, np.int32), many)

    with pytest.raises(bp.Error, match="1 to 4194304 tokens of vocabulary; got 1 requests of 4194305") as caught:
        bp.accept("greedy", np.zeros((2, (1 << 22) + 1), np.float32), np.zeros(2, np.int32), np.array([0, 1]))
    assert caught.value.status == bp.Status.invalid_argument
    with pytest.raises(bp.Error, match="at most 65535 requests") as caught:  # the same on the device
        bp.accept("greedy", np.zeros((65536, 2), np.float32), np.zeros(65536, np.int32), np.zeros(65537, np.int32))
    assert caught.value.status == bp.Status.invalid_argument
    with pytest.raises(ValueError, match="2147483647 drafts; at most 255"):  # d_r + 1 past int32
        bp.accept("greedy", np.zeros((2, 10), np.float32), np.zeros(2, np.int32), np.array([0, 2**31 - 1]))
    with pytest.raises(ValueError, match="target_logits must be a 2-D array"):
        bp.accept("greedy", logits.reshape(-1), blocks, offsets)
    with pytest.raises(ValueError, match="draft_probs must be a 2-D array"):
        bp.accept("rejection", logits, blocks, offsets, temperature=1.0, draft_probs=np.ones(30, np.float32))
    with pytest.raises(TypeError, match="seeds must be integers"):
        bp.accept("greedy", logits, blocks, offsets, seeds=True)

    bad = blocks.copy()
    bad[4] = 10  # request 1's anchor is outside the vocabulary
    with pytest.raises(bp.Error, match="request 1") as caught:
        bp.accept("greedy", logits, bad, offsets)
    assert caught.value.status == bp.Status.invalid_token
    out = bp.accept("greedy", logits, bad, offsets, check=False)
    assert out.status.tolist() == [int(bp.Status.success), int(bp.Status.invalid_token)]
    assert (out.accepted[1], out.bonus[1]) == (0, -1)

    nan = logits.copy()
    nan[0, 3] = np.nan
    out = bp.accept("greedy", nan, blocks, offsets, check=False)
    assert bp.Status(int(out.status[0])) == bp.Status.non_finite_logits and out.status[1] == 0


def test_an_empty_batch():
    out = bp.accept("greedy", np.zeros((0, 8), np.float32), np.zeros(0, np.int32), np.zeros(1, np.int32))
    assert out.accepted.shape == (0,)
