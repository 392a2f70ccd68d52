"""Small models written in Python for the binding's tests: a target whose rows depend on the whole
prefix (so that a wrong cache crop shows), drafters that propose from a corrupted copy of it."""

from __future__ import annotations

import math

import numpy as np


def softmax(row: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = np.asarray(row, dtype=np.float64) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


class PrefixTarget:
    """Logits of the token after `prefix` = W[last] + V[(len + sum) % vocab]: a function of the whole prefix."""

    def __init__(self, vocab: int = 16, seed: int = 0, scale: float = 2.0):
        rng = np.random.default_rng(seed)
        self.vocab_size = vocab
        self.W = (rng.standard_normal((vocab, vocab)) * scale).astype(np.float32)
        self.V = (rng.standard_normal((vocab, vocab)) * scale * 0.5).astype(np.float32)
        self.context: list[int] = []
        self.scored: list[int] = []
        self.calls = 0

    def row(self, prefix) -> np.ndarray:
        return self.W[prefix[-1]] + self.V[(len(prefix) + int(np.sum(prefix))) % self.vocab_size]

    # --- the verifier protocol ---
    def prefill(self, prompt):
        self.context = [int(t) for t in prompt]
        self.scored = []
        return self.row(self.context)[None, :]

    def score(self, block):
        self.calls += 1
        self.scored = [int(t) for t in block]
        prefix = list(self.context)
        rows = []
        for t in self.scored:
            prefix.append(t)
            rows.append(self.row(prefix))
        return np.stack(rows).astype(np.float32)

    def commit(self, n):
        self.context += self.scored[:n]

    # --- references ---
    def greedy(self, prompt, n: int) -> list[int]:
        prefix, out = [int(t) for t in prompt], []
        for _ in range(n):
            t = int(np.argmax(self.row(prefix)))
            prefix.append(t)
            out.append(t)
        return out

    def probability(self, prompt, continuation, temperature: float = 1.0) -> float:
        prefix, p = [int(t) for t in prompt], 1.0
        for t in continuation:
            p *= softmax(self.row(prefix), temperature)[t]
            prefix.append(int(t))
        return p


class CyclingTarget(PrefixTarget):
    """PrefixTarget's rows plus a margin on a fixed successor of the last token: its greedy text runs round
    the successor permutation's cycles, so that prompt lookup finds what comes next."""

    def __init__(self, vocab: int = 16, seed: int = 0, margin: float = 4.0):
        super().__init__(vocab, seed, scale=0.5)
        self.successor = np.random.default_rng(seed + 1000).permutation(vocab)
        self.margin = margin

    def row(self, prefix) -> np.ndarray:
        r = super().row(prefix).copy()
        r[self.successor[prefix[-1]]] += self.margin
        return r


class NoisyDrafter:
    """Proposes from the target's rows plus noise: greedy at T = 0, samples of q = softmax(noisy / T) otherwise.
    `claimed_q` replaces the q it reports (a drafter that lies about its distribution)."""

    def __init__(self, target: PrefixTarget, noise: float = 1.5, seed: int = 1, claimed_q=None):
        self.target = target
        self.vocab_size = target.vocab_size
        self.max_draft_rows = 15
        self.noise = noise
        self.seed = seed
        self.claimed_q = claimed_q
        self.commits: list[int] = []

    def noisy_row(self, prefix):
        h = (len(prefix) * 7919 + int(np.sum(prefix)) * 104729) % 2**32
        return self.target.row(prefix) + self.noise * np.random.default_rng(h).standard_normal(self.vocab_size)

    def begin(self, prompt):
        self.commits = []

    def commit(self, n):
        self.commits.append(n)

    def draft(self, context, n, temperature, seed, step):
        rng = np.random.default_rng([self.seed, seed, step])
        prefix = [int(t) for t in context]
        tokens, q = [], np.zeros((n, self.vocab_size), dtype=np.float32)
        for j in range(n):
            row = self.noisy_row(prefix)
            if temperature < 1e-5:
                t = int(np.argmax(row))
                q[j, t] = 1.0
            else:
                probs = softmax(row, temperature)
                t = int(rng.choice(self.vocab_size, p=probs))
                q[j] = probs if self.claimed_q is None else self.claimed_q(probs)
            tokens.append(t)
            prefix.append(t)
        return np.asarray(tokens, dtype=np.int32), q


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic over the cells with expected count >= 5, the rest pooled into one cell (merged
    into the smallest kept cell when it too expects fewer than 5); inf when a token of probability 0 was
    drawn."""
    expected = probabilities * counts.sum()
    if np.any((expected == 0) & (counts > 0)):
        return math.inf, max(int(np.count_nonzero(expected >= 5)) - 1, 1)
    big = expected >= 5
    obs, exp = counts[big].astype(float), expected[big].astype(float)
    pooled_obs, pooled_exp = float(counts[~big].sum()), float(expected[~big].sum())
    if pooled_exp >= 5:
        obs, exp = np.append(obs, pooled_obs), np.append(exp, pooled_exp)
    elif pooled_exp > 0:  # (observations there with nothing expected returned inf above)
        smallest = int(np.argmin(exp))
        obs[smallest] += pooled_obs
        exp[smallest] += pooled_exp
    return float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1


def chi_square_critical(dof: int, z: float = 3.719) -> float:
    """The chi-square quantile at the normal quantile z (3.719: p = 1e-4), Wilson-Hilferty."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3
