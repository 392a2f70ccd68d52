"""Plots a `blockpilot compare --json-out` report: tau(b)/tau(16) of the synthetic pair next to
the measured DFlash data, and mean tau per policy. usage: plot_compare.py REPORT.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

report = json.load(open(sys.argv[1]))
sources = [("synthetic", "synthetic pair")] + ([("real", "measured DFlash (gsm8k, T=0)")] if "real" in report else [])
fig, (curve, bars) = plt.subplots(1, 2, figsize=(12, 4.5))
for key, label in sources:
    fixed = {int(b): t for b, t in report[key]["fixed"].items()}
    base = fixed.get(16) or max(fixed.values())
    sizes = sorted(fixed)
    curve.plot(sizes, [fixed[b] / base for b in sizes], marker="o", label=label)
curve.axvline(16, color="grey", linestyle=":", linewidth=1)
curve.set_xlabel("block size b")
curve.set_ylabel("mean tau(b) / mean tau(16)")
curve.set_title("Acceptance length per block size")
curve.legend()

policies = ["fixed 16", "best fixed", "oracle window", "oracle all"]
width = 0.8 / len(sources)
for i, (key, label) in enumerate(sources):
    r = report[key]
    values = [r["fixed"].get("16", float("nan")), r["best_fixed"]["tau"], r["oracle_window"], r["oracle_all"]]
    base = values[0]
    xs = [p + i * width for p in range(len(policies))]
    bars.bar(xs, [v / base for v in values], width, label=label)
bars.set_xticks([p + width * (len(sources) - 1) / 2 for p in range(len(policies))], policies)
bars.set_ylim(0.95, None)
bars.set_ylabel("mean tau / fixed 16")
bars.set_title("Policies (oracle window {}..{})".format(*report["synthetic"]["window"]))
bars.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
print(f"wrote {sys.argv[2]}")
