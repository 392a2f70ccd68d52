"""Fits the synthetic drafter's acceptance model to measured mean tau(b) (docs/synthetic.md).

The model (T = 0): per prompt z ~ U(0,1), n ~ N(0,1); b* = clamp(round(16 + c + s(z - 1/2) + m n), 13, 19);
alpha_j(b) = min(0.999, A(z) d^(j-1) pen(b) (j >= 16 ? u : 1)), A(z) = min(0.999, a0 + a1 z);
pen(b) = exp(-g_lo (b* - b)) for b <= b*, exp(-g_hi (b - b*)) above; tau(b) = 1 + sum_j prod_{i<=j} alpha_i.
The loss matches the mean tau per size, the oracle gain over fixed 16 (+3.5 %) and the share of
prompts whose best size is 14..18. usage: calibrate.py [ACCEPTANCE_DIR]  (needs numpy and scipy)"""
import json
import pathlib
import sys

import numpy as np
from scipy.optimize import minimize

folder = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2] / "examples/data/acceptance/gsm8k_T0"
files = {int(p.stem): json.loads(p.read_text()) for p in folder.glob("*.json") if p.stem.isdigit()}
sizes = np.array(sorted(files))
prompts = sorted(files[sizes[0]], key=int)
table = np.array([[files[b][k] for b in sizes] for k in prompts])
real = table.mean(0)
window = [list(sizes).index(b) for b in range(14, 19)]
best = table[:, window].argmax(1)
share = np.bincount(best, minlength=5) / len(prompts)

rng = np.random.default_rng(0)
z, noise = rng.random(4000), rng.normal(0, 1, 4000)


def tau_curves(p):
    a0, a1, d, g_lo, g_hi, u, c, s, m = p
    a = np.minimum(a0 + a1 * z, 0.999)
    b_star = np.clip(np.round(16 + c + s * (z - 0.5) + m * noise), 13, 19)
    out = np.zeros((len(z), len(sizes)))
    for k, b in enumerate(sizes):
        pen = np.where(b <= b_star, np.exp(-g_lo * (b_star - b)), np.exp(-g_hi * (b - b_star)))
        j = np.arange(1, b)
        alpha = a[:, None] * d ** (j - 1)[None, :] * pen[:, None] * np.where(j >= 16, u, 1.0)[None, :]
        out[:, k] = 1 + np.cumprod(np.minimum(alpha, 0.999), axis=1).sum(1)
    return out


def loss(p):
    t = tau_curves(p)
    m = t.mean(0)
    gain = t[:, window].max(1).mean() / m[list(sizes).index(16)] - 1
    sh = np.bincount(t[:, window].argmax(1), minlength=5) / len(z)
    return np.sum((m / real - 1) ** 2) + 40 * (gain - 0.035) ** 2 + 0.02 * np.sum((sh - share) ** 2)


start = [0.95, 0.05, 0.96, 0.01, 0.05, 0.1, 0.3, 3, 0.7]
bounds = [(0.5, 1.0), (0, 0.3), (0.9, 1.0), (0, 0.2), (0, 1), (0, 1), (-1, 2), (0, 6), (0, 2)]
fit = minimize(loss, start, bounds=bounds, method="Powell")
names = ["acceptance_base", "acceptance_slope", "position_decay", "shorter_penalty", "longer_penalty",
         "untrained_factor", "preferred_offset", "preferred_slope", "preferred_noise"]
for name, value in zip(names, fit.x):
    print(f"{name} = {value:.4f}")
print("size  model  real")
for b, t, r in zip(sizes, tau_curves(fit.x).mean(0), real):
    print(f"{b:4d}  {t:.4f}  {r:.4f}")
curves = tau_curves(fit.x)
gain = curves[:, window].max(1).mean() / curves[:, list(sizes).index(16)].mean() - 1
print(f"oracle gain over fixed 16: model {100 * gain:.2f} %, real "
      f"{100 * (table[:, window].max(1).mean() / table[:, list(sizes).index(16)].mean() - 1):.2f} %")
print("best-size shares 14..18: model", np.round(np.bincount(curves[:, window].argmax(1), minlength=5) / len(z), 3),
      "real", np.round(share, 3))
