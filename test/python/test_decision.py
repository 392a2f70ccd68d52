"""The block-size decision through the binding: compact features against NumPy, predictor loading and
its refusals, every status named."""

import numpy as np
import pytest

import blockpilot as bp
from toy_models import softmax


def test_compact_features_match_numpy():
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((4, 3000)) * 2).astype(np.float32)
    f = bp.CompactFeatures(top_k=16, temperature=0.7)
    out = f.extract(rows)
    assert out.shape == (4, f.feature_count(3000)) == (4, 16 + len(bp.CompactFeatures.statistics))
    names = bp.CompactFeatures.statistics
    for row, features in zip(rows, out):
        p = softmax(row, 0.7)
        np.testing.assert_allclose(features[:16], np.sort(p)[::-1][:16], rtol=1e-5, atol=1e-7)
        entropy = -(p * np.log(p)).sum()
        assert features[16 + names.index("entropy")] == pytest.approx(entropy, rel=1e-5)
        assert features[16 + names.index("log_vocab")] == pytest.approx(np.log(3000), rel=1e-6)


def test_compact_features_refuse_bad_rows_and_settings():
    f = bp.CompactFeatures(top_k=8)
    with pytest.raises(bp.Error) as caught:
        f.extract(np.array([[0.0, np.inf] + [0.0] * 10], np.float32))
    assert caught.value.status == bp.Status.non_finite_logits and "row 0" in str(caught.value)
    with pytest.raises(bp.Error) as caught:
        f.extract(np.zeros((1, 4), np.float32))  # fewer tokens than top_k
    assert caught.value.status == bp.Status.invalid_argument
    with pytest.raises(ValueError):
        bp.CompactFeatures(top_k=0)
    with pytest.raises(bp.Error) as caught:
        bp.CompactFeatures(temperature=-1.0)
    assert caught.value.status == bp.Status.invalid_temperature


def test_predictor_loads_and_chooses_within_its_window(lookup_predictor_file):
    predictor = bp.Predictor.load(lookup_predictor_file, target_vocab=49152)
    assert predictor.vocab_size == 49152
    k, b = predictor.window_k, predictor.training_block_size
    assert predictor.block_sizes == list(range(b - k, b + k + 1))
    rng = np.random.default_rng(1)
    rows = (rng.standard_normal((6, 49152)) * 3).astype(np.float32)
    sizes, fallback = predictor.choose(rows)
    assert sizes.dtype == np.int32 and fallback.dtype == np.bool_
    assert not fallback.any() and set(sizes.tolist()) <= set(predictor.block_sizes)
    # The same row gives the same decision, alone or in a batch.
    assert predictor.choose(rows[3:4])[0][0] == sizes[3]
    rows[2, 5] = np.nan
    sizes, fallback = predictor.choose(rows)
    assert fallback.tolist() == [False, False, True, False, False, False] and sizes[2] == b


def test_predictor_files_are_checked(lookup_predictor_file, tmp_path):
    with pytest.raises(bp.Error, match="vocab_size"):
        bp.Predictor.load(lookup_predictor_file, target_vocab=32000)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(lookup_predictor_file.read_bytes()[:1000])
    with pytest.raises(bp.Error, match="truncated.safetensors") as caught:
        bp.Predictor.load(truncated)
    assert caught.value.status is None
    pooled = lookup_predictor_file.with_name("T0-pooled-cross-entropy.safetensors")
    with pytest.raises(bp.Error, match="pooled_rows"):
        bp.Predictor.load(pooled)


def test_every_status_has_its_sentence():
    statuses = list(bp.Status)
    assert [int(s) for s in statuses] == list(range(len(statuses)))
    assert all(s.message and s.message != "unknown status" for s in statuses)
    assert len({s.message for s in statuses}) == len(statuses)
