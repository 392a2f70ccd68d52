"""How much a per-step policy could gain, from `blockpilot replay-steps --json-out` files: each file's
best fixed size, and the gain over it of the per-prompt oracle, the speed cut-off (any `speed` policy)
and the per-step oracle, in estimated speedup (committed tokens per unit of step cost, as replay-steps
prints it). A Markdown table on stdout and a grouped bar plot.
usage: step_headroom.py OUT.png LABEL=REPLAY.json [LABEL=REPLAY.json ...] > table.md"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def speedups(path):
    """Policy name -> estimated speedup over plain decoding, as replay-steps prints it."""
    report = json.load(open(path))
    return {p["policy"]: sum(t - 1 for t in p["tokens"]) / (1e3 * sum(p["decode_seconds"])) for p in report["policies"]}


out, runs = sys.argv[1], [arg.split("=", 1) for arg in sys.argv[2:]]
columns = {"per-prompt oracle": lambda s: next(k for k in s if k.startswith("oracle:")),
           "speed cut-off": lambda s: next(k for k in s if k.startswith("speed")),
           "per-step oracle": lambda s: "step-oracle"}
gains = {name: [] for name in columns}
print("| replay | best fixed size | " + " | ".join(f"{c}, over it" for c in columns) + " |")
print("|---|---|" + "---|" * len(columns))
for label, path in runs:
    s = speedups(path)
    best = max((k for k in s if k.startswith("fixed:")), key=s.get)
    cells = []
    for name, pick in columns.items():
        gains[name].append(100 * (s[pick(s)] / s[best] - 1))
        cells.append(f"{s[pick(s)]:.3f} ({gains[name][-1]:+.1f} %)")
    print(f"| {label} | {best.split(':')[1]}: {s[best]:.3f} | " + " | ".join(cells) + " |")

fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(runs), 3.8))
width = 0.8 / len(columns)
for j, (name, values) in enumerate(gains.items()):
    ax.bar([i + (j - (len(columns) - 1) / 2) * width for i in range(len(runs))], values, width, label=name)
ax.set_xticks(range(len(runs)), [label for label, _ in runs], fontsize=8)
ax.set_ylabel("estimated speedup over the best fixed size, %")
ax.axhline(10, color="grey", linestyle=":", linewidth=1)
ax.legend(fontsize=8)
ax.set_title("What deciding per step could gain, by machine's step cost", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=120)
