"""Plots `blockpilot measure --json-out` reports side by side: per policy, the measured decode
speedup over the first policy (bars) and the mean tau (labels), one panel per report.
usage: plot_measure.py OUT.png REPORT.json [REPORT.json ...]"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

out, paths = sys.argv[1], sys.argv[2:]
fig, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 4.6), squeeze=False)
for ax, path in zip(axes[0], paths):
    report = json.load(open(path))
    policies = report["policies"]
    base = policies[0]["decode_tokens_per_second"]
    speedups = [p["decode_tokens_per_second"] / base for p in policies]
    colors = ["tab:red" if p["policy"] == "oracle" else "tab:blue" if p["policy"].startswith(("mlp:", "refine:"))
              else "tab:grey" for p in policies]
    ax.bar(range(len(policies)), speedups, color=colors)
    ax.axhline(1, color="black", linewidth=0.8)
    for i, (p, s) in enumerate(zip(policies, speedups)):
        ax.annotate(f"{s:.3f}x\ntau {p['mean_tau']:.3f}", (i, s), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
    names = [p["policy"].split("/")[-1].removesuffix(".safetensors") for p in policies]
    ax.set_xticks(range(len(policies)), names, rotation=25, ha="right")
    ax.set_ylim(0, max(speedups) * 1.25)
    ax.set_ylabel(f"decode tokens/s vs {names[0]}")
    ax.set_title(f"{len(report['prompts'])} prompts, T = {report['temperature']:g}, rule {report['rule']}", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=120)
print(f"wrote {out}")
