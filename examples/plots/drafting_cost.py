"""A drafter's step cost and what it buys: `bench_llama --benchmark_filter=dflash_draft` (its JSON output:
draft step over a target step per drafter form and b, medians of the repetitions) beside `blockpilot
measure --json-out` reports (decode speed of each policy over the first, with 95 % bootstrap intervals
over prompts).
usage: drafting_cost.py OUT.png BENCH.json REPORT.json [REPORT.json ...]"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from measure_speedup import interval, per_prompt, speedup

out, bench_path, reports = sys.argv[1], sys.argv[2], sys.argv[3:]
medians = {}
for b in json.load(open(bench_path))["benchmarks"]:
    if b.get("aggregate_name") == "median" and b["run_name"].startswith("dflash_draft/"):
        args = dict(part.split(":") for part in b["run_name"].split("/")[1:4])
        medians[(int(args["weights"]), int(args["vocab"]), int(args["b"]))] = b["vs_score1"]
sizes = sorted({k[2] for k in medians})
forms = sorted({k[:2] for k in medians}, key=lambda f: -sum(medians[(*f, b)] for b in sizes))

fig, axes = plt.subplots(1, 1 + len(reports), figsize=(5.8 * (1 + len(reports)), 4.6), squeeze=False)
ax = axes[0][0]
width = 0.8 / len(forms)
for i, (weights, vocab) in enumerate(forms):
    label = f"{'fp32' if weights == 0 else 'Q8_0'} weights, {'all' if vocab == 0 else f'{vocab:,}'} tokens"
    ax.bar([j + (i - (len(forms) - 1) / 2) * width for j in range(len(sizes))],
           [medians[(weights, vocab, b)] for b in sizes], width, label=label)
ax.set_xticks(range(len(sizes)), [f"b = {b}" for b in sizes])
ax.set_ylabel("draft step / target step of one token")
ax.set_title("a DFlash draft step (bench_llama dflash_draft)", fontsize=10)
ax.legend(fontsize=8)

for ax, path in zip(axes[0][1:], reports):
    report = json.load(open(path))
    policies, n = report["policies"], len(report["prompts"])
    base = per_prompt(policies[0], n)
    idx = list(range(n))
    names, values, lows, highs = [], [], [], []
    for p in policies:
        pp = per_prompt(p, n)
        s = speedup(pp, base, idx)
        lo, hi = interval(pp, base, idx)
        name = p["policy"].replace("examples/data/drafters/", "")
        names.append(name.replace(",weights=quantized_int8", ",Q8_0").replace("@dflash:smollm2-dflash", "@"))
        values.append(s)
        lows.append(s - lo)
        highs.append(hi - s)
    ax.bar(range(len(values)), values, yerr=[lows, highs], capsize=3, color="tab:blue")
    ax.axhline(1, color="black", linewidth=0.8)
    for i, (p, s) in enumerate(zip(policies, values)):
        ax.annotate(f"{s:.3f}x\ntau {p['mean_tau']:.3f}", (i, s + highs[i]), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(values)), names, rotation=25, ha="right", fontsize=7)
    ax.set_ylim(0, max(v + h for v, h in zip(values, highs)) * 1.25)
    ax.set_ylabel(f"decode tokens/s vs {names[0]}")
    ax.set_title(f"{n} prompts, {report['rounds']} rounds, T = {report['temperature']:g}, rule {report['rule']}", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=120)
print(f"wrote {out}")
