"""A drafter's acceptance against its training: the mean tau of every fixed size b that all runs measured,
one `blockpilot measure --json-out` report (plain decoding and fixed sizes, the same prompts) per stage of
training, against the training sequences seen up to that stage (optimizer steps of one sequence each,
summed over the runs that led to it). A Markdown table on stdout, and the plot.
usage: drafter_progress.py OUT.png SEQUENCES=REPORT.json [SEQUENCES=REPORT.json ...] > table.md"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = sys.argv[1]
stages = sorted((int(seen), path) for seen, path in (a.split("=", 1) for a in sys.argv[2:]))


def mean_tau(path):
    return {int(p["policy"].split(":")[1]): p["mean_tau"]
            for p in json.load(open(path))["policies"] if p["policy"].startswith("fixed:")}


taus = [(seen, mean_tau(path)) for seen, path in stages]
sizes = sorted(set.intersection(*(set(t) for _, t in taus)))
print("| training sequences seen | " + " | ".join(f"tau, b = {b}" for b in sizes) + " |")
print("|---|" + "---|" * len(sizes))
for seen, t in taus:
    print(f"| {seen:,} | " + " | ".join(f"{t[b]:.3f}" for b in sizes) + " |")

fig, ax = plt.subplots(figsize=(6, 4))
for b in sizes:
    ax.plot([seen for seen, _ in taus], [t[b] for _, t in taus], "o-", label=f"b = {b}")
ax.set_xscale("log")
ax.set_xlabel("training sequences seen (optimizer steps)")
ax.set_ylabel("mean tau, held out")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(out, dpi=120)
