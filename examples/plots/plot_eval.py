"""Plots a `blockpilot eval --json-out` report: mean tau (or, with --objective speed, the estimated
speedup) per policy relative to the reference fixed size (oracle marked), and the chosen-vs-best
confusion matrix of each mlp:* and pooled:* policy.
usage: plot_eval.py REPORT.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

report = json.load(open(sys.argv[1]))
policies = report["policies"]
lo, hi = report["window"]
ref = report["reference"]
sizes = list(range(lo, hi + 1))
oracle = policies[0]["mean_tau"] + policies[0]["regret"]  # every policy's regret is against the same oracle
base = policies[0]["reference_mean_tau"]  # the mean tau of fixed:ref
value = "estimated speedup" if report.get("objective") == "speed" else "mean tau"
mlps = [p for p in policies if p["policy"].startswith(("mlp:", "pooled:"))]

fig = plt.figure(figsize=(6 + 3.6 * len(mlps), 4.8))
grid = fig.add_gridspec(1, 1 + len(mlps), width_ratios=[1.6] + [1] * len(mlps))
bars = fig.add_subplot(grid[0])
gains = [100 * (p["mean_tau"] / base - 1) for p in policies]
colors = ["tab:red" if p["policy"] == "oracle" else "tab:blue" if p["policy"].startswith(("mlp:", "pooled:")) else "tab:grey"
          for p in policies]
bars.bar(range(len(policies)), gains, color=colors)
bars.axhline(0, color="black", linewidth=0.8)
bars.axhline(100 * (oracle / base - 1), color="tab:red", linestyle="--", linewidth=1, label="per-prompt oracle")
for i, (p, g) in enumerate(zip(policies, gains)):
    bars.annotate(f"{p['mean_tau']:.3f}\n{g:+.2f} %", (i, g), xytext=(0, 3 if g >= 0 else -3),
                  textcoords="offset points", ha="center", va="bottom" if g >= 0 else "top", fontsize=8)
bars.set_xticks(range(len(policies)), [p["policy"] for p in policies], rotation=20, ha="right")
bars.margins(y=0.25)
bars.set_ylabel(f"{value} vs fixed:{ref} (%)")
bars.set_title(f"{report['dataset']}: {report['prompts']} prompts, window {lo}..{hi}")
bars.legend(loc="upper left", fontsize=8)

for j, p in enumerate(mlps):
    ax = fig.add_subplot(grid[1 + j])
    m = p["confusion"]
    top = max(max(r) for r in m) or 1
    ax.imshow(m, cmap="Blues", vmin=0, vmax=top, origin="lower")
    for c, row in enumerate(m):
        for b, n in enumerate(row):
            ax.text(b, c, n, ha="center", va="center", fontsize=8, color="white" if n > 0.6 * top else "black")
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_yticks(range(len(sizes)), sizes)
    ax.set_xlabel("best block size")
    ax.set_ylabel("chosen block size")
    share = "n/a" if p["gain_share"] is None else f"{p['gain_share']:.0%}"
    ax.set_title(f"{p['policy']}\naccuracy {p['accuracy']:.1%}, gain share {share}", fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
print(f"wrote {sys.argv[2]}")
