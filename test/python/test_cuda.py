"""The CUDA half of the package against the CPU on the same inputs and random streams: the three rules on a
ragged batch, the predictor's decision. Skipped without a CUDA build, a device or PyTorch with CUDA."""

import numpy as np
import pytest

import blockpilot as bp

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (bp.cuda_built and bp.cuda_device_count() > 0 and torch.cuda.is_available()),
                                reason="needs a build with CUDA and a CUDA device")


def ragged_batch(vocab, counts, seed):
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    rows = int(offsets[-1]) + len(counts)
    logits = (rng.standard_normal((rows, vocab)) * 2).astype(np.float32)
    q = rng.dirichlet(np.full(vocab, 0.3), size=int(offsets[-1])).astype(np.float32)
    blocks = np.zeros(rows, dtype=np.int32)
    for r, d in enumerate(counts):
        first = offsets[r] + r
        blocks[first] = rng.integers(vocab)
        for j in range(d):  # drafts sampled from q, the first often the target's argmax
            blocks[first + 1 + j] = rng.choice(vocab, p=q[offsets[r] + j] / q[offsets[r] + j].sum())
            if rng.random() < 0.5:
                blocks[first + 1 + j] = logits[first + j].argmax()
    return logits, blocks, offsets, q


@pytest.mark.parametrize("rule", bp.RULES)
@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
@pytest.mark.parametrize("controls", [{}, {"top_k": 20, "top_p": 0.9}])
def test_device_decides_as_the_cpu(rule, temperature, controls):
    counts = [0, 1, 3, 7, 15, 2, 4, 31]
    logits, blocks, offsets, q = ragged_batch(3000, counts, seed=len(rule))
    seeds = np.arange(len(counts), dtype=np.uint64) * 977 + 5
    kwargs = dict(seeds=seeds, offsets=3, temperature=temperature, **controls)
    cpu = bp.accept(rule, logits, blocks, offsets, draft_probs=q if rule == "rejection" else None, **kwargs)
    cuda = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
    gpu = bp.accept(rule, cuda(logits), cuda(blocks), cuda(offsets),
                    draft_probs=cuda(q) if rule == "rejection" else None, **kwargs)
    assert gpu.accepted.tolist() == cpu.accepted.tolist()
    assert gpu.bonus.tolist() == cpu.bonus.tolist()


def test_device_refuses_what_the_cpu_refuses():
    logits, blocks, offsets, _ = ragged_batch(100, [2, 3], seed=1)
    cuda = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
    with pytest.raises(ValueError, match="must not decrease"):
        bp.accept("greedy", cuda(logits), cuda(blocks), cuda(np.array([0, 3, 2], np.int32)))
    with pytest.raises(ValueError, match="rows"):
        bp.accept("greedy", cuda(logits[:-1]), cuda(blocks[:-1]), cuda(offsets))
    bad = blocks.copy()
    bad[4] = 100
    out = bp.accept("greedy", cuda(logits), cuda(bad), cuda(offsets), check=False)
    assert out.status.tolist() == [int(bp.Status.success), int(bp.Status.invalid_token)]


def test_device_arrays_are_never_converted():
    logits, blocks, offsets, _ = ragged_batch(100, [2, 3], seed=1)
    cuda = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
    with pytest.raises(TypeError, match="blocks on the device must be int32, got int64"):
        bp.accept("greedy", cuda(logits), cuda(blocks).long(), cuda(offsets))
    with pytest.raises(TypeError, match="draft_offsets on the device must be int32, got int64"):
        bp.accept("greedy", cuda(logits), cuda(blocks), cuda(offsets).long())
    with pytest.raises(TypeError, match="target_logits on the device must be float32, got bfloat16"):
        bp.accept("greedy", cuda(logits).bfloat16(), cuda(blocks), cuda(offsets))
    with pytest.raises(TypeError, match="C-contiguous"):
        bp.accept("greedy", cuda(np.ascontiguousarray(logits.T)).t(), cuda(blocks), cuda(offsets))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_arrays_on_two_devices_are_refused(lookup_predictor_file):
    logits, blocks, offsets, _ = ragged_batch(100, [2, 3], seed=1)
    on = lambda a, d: torch.from_numpy(a).to(f"cuda:{d}")  # noqa: E731
    with pytest.raises(ValueError, match="blocks is on another device"):
        bp.accept("greedy", on(logits, 1), on(blocks, 0), on(offsets, 1))
    with torch.cuda.device(0):  # the call runs on the arrays' device, whichever is current
        cpu = bp.accept("greedy", logits, blocks, offsets)
        gpu = bp.accept("greedy", on(logits, 1), on(blocks, 1), on(offsets, 1))
    assert gpu.accepted.tolist() == cpu.accepted.tolist() and gpu.bonus.tolist() == cpu.bonus.tolist()
    predictor = bp.Predictor.load(lookup_predictor_file)
    with torch.cuda.device(0):
        on_device = bp.CudaPredictor(predictor)
    rows = np.zeros((2, predictor.vocab_size), np.float32)
    with pytest.raises(ValueError, match="rows on cuda:1, the predictor on cuda:0"):
        on_device.choose(on(rows, 1))


def test_device_predictor_takes_turns_between_threads(lookup_predictor_file):
    from concurrent.futures import ThreadPoolExecutor

    predictor = bp.Predictor.load(lookup_predictor_file)
    on_device = bp.CudaPredictor(predictor)
    rng = np.random.default_rng(4)
    batches = [(rng.standard_normal((8, predictor.vocab_size)) * 3).astype(np.float32) for _ in range(16)]
    expected = [predictor.choose(rows)[0].tolist() for rows in batches]
    device_rows = [torch.from_numpy(rows).cuda() for rows in batches]
    torch.cuda.synchronize()
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda rows: on_device.choose(rows)[0].tolist(), device_rows))
    assert got == expected


def test_device_predictor_waits_for_the_stream_that_writes_the_rows(lookup_predictor_file):
    # The rows are written on a side stream (non-blocking, as PyTorch makes them) after a long sleep: a
    # decision that did not wait for that stream would read the NaN rows and fall back.
    predictor = bp.Predictor.load(lookup_predictor_file)
    on_device = bp.CudaPredictor(predictor)
    rng = np.random.default_rng(5)
    real = torch.from_numpy((rng.standard_normal((4, predictor.vocab_size)) * 3).astype(np.float32)).cuda()
    expected = predictor.choose(real.cpu().numpy())
    rows = torch.full_like(real, float("nan"))
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        rows.copy_(real)
        sizes, fallback = on_device.choose(rows)  # PyTorch's current stream: the side stream
    assert not fallback.any() and sizes.tolist() == expected[0].tolist()


def test_device_predictor_decides_as_the_cpu(lookup_predictor_file):
    predictor = bp.Predictor.load(lookup_predictor_file)
    on_device = bp.CudaPredictor(predictor)
    rng = np.random.default_rng(2)
    rows = (rng.standard_normal((16, predictor.vocab_size)) * 3).astype(np.float32)
    rows[5, 7] = np.nan
    cpu_sizes, cpu_fallback = predictor.choose(rows)
    gpu_sizes, gpu_fallback = on_device.choose(torch.from_numpy(rows).cuda())
    assert gpu_fallback.tolist() == cpu_fallback.tolist() and gpu_fallback[5]
    assert gpu_sizes.tolist() == cpu_sizes.tolist()


class DeviceRows:
    """A verifier whose rows are CUDA tensors: a toy target's rows copied to the device."""

    def __init__(self, target):
        self.target, self.vocab_size = target, target.vocab_size

    def prefill(self, prompt):
        return torch.from_numpy(self.target.prefill(prompt)).cuda()

    def score(self, block):
        return torch.from_numpy(self.target.score(block)).cuda()

    def commit(self, n):
        self.target.commit(n)


@pytest.mark.parametrize("rule", bp.RULES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_loop_on_device_rows_gives_the_host_loops_tokens(rule, temperature, lookup_predictor_file):
    from test_engine_loop import WideTarget, engine_loop

    predictor = bp.Predictor.load(lookup_predictor_file)
    prompt = (np.arange(40, dtype=np.int32) * 7) % 64
    kwargs = dict(rule=rule, temperature=temperature, seed=3, max_new_tokens=32)
    host, host_stats = engine_loop.decode(WideTarget(predictor.vocab_size, seed=2), bp.LookupDrafter(predictor.vocab_size),
                                          prompt, predictor, **kwargs)
    device, device_stats = engine_loop.decode(DeviceRows(WideTarget(predictor.vocab_size, seed=2)),
                                              bp.LookupDrafter(predictor.vocab_size), prompt,
                                              bp.CudaPredictor(predictor), **kwargs)
    assert device_stats.block_size == host_stats.block_size
    assert device.tolist() == host.tolist()


@pytest.mark.parametrize("rule", bp.RULES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batch_loop_on_device_rows_gives_the_host_loops_tokens(rule, temperature):
    from test_engine_loop import BATCH_PROMPTS, COSTS, engine_loop
    from toy_models import CyclingTarget

    def run(wrap):
        return engine_loop.decode_batch(engine_loop.PerRequest([wrap(CyclingTarget(vocab=16, seed=6)) for _ in BATCH_PROMPTS]),
                                        bp.LookupDrafter(16, confidence="evidence"), BATCH_PROMPTS,
                                        (bp.SpeedCutoff(COSTS, learn_costs=False), bp.BatchPlan([1.0] * 12)), rule=rule,
                                        temperature=temperature, max_new_tokens=32, seeds=np.arange(5) + 11)

    host, host_stats = run(lambda target: target)
    device, device_stats = run(DeviceRows)
    assert [t.tolist() for t in device] == [t.tolist() for t in host]
    assert device_stats.rows == host_stats.rows and device_stats.drafted > 0
