"""A drafter's acceptance in the C++ decode loop, from `blockpilot measure --json-out` runs of plain
decoding and fixed sizes (one file per temperature): per size b, the mean tau over the prompts, the
decode speed over plain decoding with a 95 % bootstrap interval over prompts (rounds of a prompt move
together); per block position j, the acceptance rate (the share of steps that drafted position j and
kept it, all sizes pooled); per prompt, the size of its largest tau. A Markdown table on stdout, and a
plot of tau(b) and of the acceptance per position.
usage: drafter_report.py OUT.png LABEL=REPORT.json [LABEL=REPORT.json ...] > table.md"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from measure_speedup import interval, per_prompt, speedup

out, runs = sys.argv[1], [a.rsplit("=", 1) for a in sys.argv[2:]]


def acceptance_by_position(p):
    """Steps that drafted position j (block size > j) and kept it (committed > j), pooled over prompts."""
    proposed, kept = {}, {}
    for by_block, by_length in zip(p["steps_by_block"], p["steps_by_length"]):
        for j in range(1, len(by_block) - 1):
            proposed[j] = proposed.get(j, 0) + sum(by_block[j + 1:])
            kept[j] = kept.get(j, 0) + sum(by_length[j + 1:])
    return {j: kept[j] / proposed[j] for j in sorted(proposed) if proposed[j] > 0}


fig, (ax_tau, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
for label, path in runs:
    report = json.load(open(path))
    n = len(report["prompts"])
    policies = {p["policy"]: p for p in report["policies"]}
    base = per_prompt(policies["none"], n)
    sizes = sorted(int(name.split(":")[1]) for name in policies if name.startswith("fixed:"))
    print(f"\n{label}: {report['workload'].get('drafter', '')} {n} prompts, rule {report['rule']}\n")
    print("| b | mean tau | decode speed over plain | 95 % interval |")
    print("|---|---|---|---|")
    taus = []
    for b in sizes:
        p = policies[f"fixed:{b}"]
        a, idx = per_prompt(p, n), list(range(n))
        r, (lo, hi) = speedup(a, base, idx), interval(a, base, idx)
        taus.append(p["mean_tau"])
        print(f"| {b} | {p['mean_tau']:.3f} | {r:.2f}x | [{lo:.2f}, {hi:.2f}] |")
    largest = policies[f"fixed:{sizes[-1]}"]
    acc = acceptance_by_position(largest)
    print(f"\nacceptance per position at b = {sizes[-1]}: " + ", ".join(f"{j}: {a:.3f}" for j, a in acc.items()))
    peaks = {}
    for i in range(n):  # per prompt: the size with the largest tau (rounds pooled), the smallest on a tie
        tau_i = [sum(t for r, t in enumerate(policies[f"fixed:{b}"]["tau"]) if r % n == i) for b in sizes]
        best = sizes[max(range(len(sizes)), key=lambda k: (round(tau_i[k], 9), -k))]
        peaks[best] = peaks.get(best, 0) + 1
    print("size of each prompt's largest tau (prompts): " + ", ".join(f"b = {b}: {c}" for b, c in sorted(peaks.items())))
    ax_tau.plot(sizes, taus, marker="o", label=label)
    ax_acc.plot(list(acc), list(acc.values()), marker="o", label=f"{label}, b = {sizes[-1]}")
ax_tau.set(xlabel="block size b", ylabel="mean tau (tokens per target step)", title="tau(b), C++ decode loop")
ax_acc.set(xlabel="block position j", ylabel="share of steps keeping position j", title="acceptance per position",
           ylim=(0, None))
for ax in (ax_tau, ax_acc):
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
fig.savefig(out, dpi=120)
