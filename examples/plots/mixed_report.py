"""The mixed workload's live comparison by prompt family, from `blockpilot measure --json-out` on a
JSON-lines prompt file: a Markdown table of each policy's decode speedup over the first policy with a
95 % bootstrap interval over the family's prompts (rounds of a prompt move together), the best fixed
size per prompt chosen after the fact (the per-request oracle over the fixed sizes measured; optimistic,
as it picks on the same noisy timings), and a plot of the speedups and of the scored block sizes per family.
usage: mixed_report.py REPORT.json PROMPTS.jsonl OUT.png > table.md"""
import json
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import measure_speedup

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from prompt_lines import file_lines  # noqa: E402

report_path, prompts_path, out = sys.argv[1:4]
report = json.load(open(report_path))
lines = file_lines(prompts_path)
keys = report["prompts"]
family = [json.loads(lines[int(k.rsplit(":", 1)[1]) - 1])["family"] for k in keys]
policies = report["policies"]
n = len(keys)


data = {p["policy"]: measure_speedup.per_prompt(p, n) for p in policies}
names = [p["policy"] for p in policies]
# After the fact, per prompt: the fixed size (plain decoding included) with the most decode tokens
# per second there — the per-request oracle over the sizes measured, on the same timings.
fixed = [m for m in names if m == "none" or m.startswith("fixed:")]
best = [max(fixed, key=lambda m: data[m][0][i] / data[m][1][i]) for i in range(n)]
oracle = "best fixed size per prompt (after the fact)"
data[oracle] = ([data[best[i]][0][i] for i in range(n)], [data[best[i]][1][i] for i in range(n)])
names.append(oracle)


def short(name):
    """A policy's name with predictor files shown by their stem (mlp:DIR/T0-x.safetensors -> mlp:T0-x)."""
    return re.sub(r"[^:,]*/([^/,]+?)\.safetensors", r"\1", name)


def speedup(name, idx, base=None):
    return measure_speedup.speedup(data[name], data[base or names[0]], idx)


def interval(name, idx, base=None):
    return measure_speedup.interval(data[name], data[base or names[0]], idx)


families = ["all"] + sorted(set(family))
members = {f: [i for i in range(n) if f == "all" or family[i] == f] for f in families}
tau = {p["policy"]: p["tau"] for p in policies}
print(f"{n} prompts, {report.get('rounds', 1)} round(s), T = {report['temperature']:g}, rule {report['rule']}, "
      f"drafter {report['workload'].get('drafter')}, storage {report['workload'].get('storage')}; "
      f"decode speedup over {names[0]} [95 % interval]\n")
best_fixed = max(fixed, key=lambda m: speedup(m, members["all"]))
print("| policy | " + " | ".join(f"{f} ({len(members[f])})" for f in families) + f" | all, vs {best_fixed} | mean tau |")
print("|---|" + "---|" * (len(families) + 2))
for name in names:
    cells = []
    for f in families:
        lo, hi = interval(name, members[f])
        cells.append(f"{speedup(name, members[f]):.3f} [{lo:.2f}, {hi:.2f}]")
    t = tau.get(name)
    mean_tau = f"{sum(t) / len(t):.3f}" if t else "—"
    lo, hi = interval(name, members["all"], best_fixed)
    cells.append(f"{speedup(name, members['all'], best_fixed):.3f} [{lo:.2f}, {hi:.2f}]")
    print(f"| {short(name)} | " + " | ".join(cells) + f" | {mean_tau} |")

fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 6))
width = 0.8 / len(names)
for k, name in enumerate(names):
    ys = [speedup(name, members[f]) for f in families]
    bounds = [interval(name, members[f]) for f in families]
    errs = [[y - lo for y, (lo, _) in zip(ys, bounds)], [hi - y for y, (_, hi) in zip(ys, bounds)]]
    ax.bar([i + k * width for i in range(len(families))], ys, width, yerr=errs, capsize=2, label=short(name))
ax.axhline(1, color="black", linewidth=0.8)
ax.set_xticks([i + 0.4 - width / 2 for i in range(len(families))], families)
ax.set_ylabel(f"decode tokens/s vs {names[0]}")
ax.legend(fontsize=7, loc="upper center", ncol=3, bbox_to_anchor=(0.5, -0.07))
ax.set_title(f"{'estimated (replay-steps)' if 'replay' in report else 'live'} speedup by prompt family (95 % bootstrap intervals)",
             fontsize=10)
# Scored block sizes of the per-step policies: share of steps by size, per family.
per_step = [p for p in policies if p["policy"].startswith(("adaptive", "cutoff", "speed")) and "steps_by_block" in p]
sizes = range(1, 17)
for k, p in enumerate(per_step):
    for f, style in zip(families[1:], ["-", "--", ":", "-."]):
        counts = [0] * 17
        for r, steps in enumerate(p["steps_by_block"]):
            if family[r % n] == f:
                for b, c in enumerate(steps[:17]):
                    counts[b] += c
        total = sum(counts) or 1
        bx.plot(sizes, [counts[b] / total for b in sizes], style, color=f"C{k}", label=f"{short(p['policy'])}, {f}")
bx.set_xlim(1, 8)
bx.set_xlabel("scored block size b")
bx.set_ylabel("share of steps")
bx.legend(fontsize=6, ncol=2)
bx.set_title("block sizes the per-step policies scored", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=120)
print(f"\n(plot: {out})")
