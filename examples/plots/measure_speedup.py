"""Decode speedups from `blockpilot measure --json-out`: per-prompt sums (rounds pooled) and the ratio of
two policies over a set of prompts with a 95 % bootstrap interval over those prompts: the estimate of `measure`'s
own table (decode_speedup in eval/measure.hpp), for any subset of the prompts, such as one prompt family."""
import random


def per_prompt(policy, n):
    """Decode tokens after the first and decode seconds per prompt (request r is prompt r mod n), summed over rounds."""
    tok, sec = [0.0] * n, [0.0] * n
    for r, (t, s) in enumerate(zip(policy["tokens"], policy["decode_seconds"])):
        tok[r % n] += t - 1
        sec[r % n] += s
    return tok, sec


def speedup(a, base, idx):
    """Tokens per second of a over base (per_prompt pairs) on the prompts idx."""
    tok, sec = a
    btok, bsec = base
    return (sum(tok[i] for i in idx) / sum(sec[i] for i in idx)) / (sum(btok[i] for i in idx) / sum(bsec[i] for i in idx))


def interval(a, base, idx, draws=2000):
    """95 % bootstrap interval of speedup(a, base, idx), resampling the prompts."""
    rng = random.Random(7)
    xs = sorted(speedup(a, base, [rng.choice(idx) for _ in idx]) for _ in range(draws))
    return xs[int(0.025 * (draws - 1))], xs[int(0.975 * (draws - 1))]
