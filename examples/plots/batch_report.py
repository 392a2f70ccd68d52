"""Serving several requests at once: decode tokens per second of every request served together, per policy and
batch size, from `blockpilot measure --batch N --json-out` (N = 1 is a plain `measure` run), as a table and a plot.

    python3 batch_report.py OUT.png N1.json N2.json N4.json ...
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from measure_speedup import per_prompt, speedup, interval  # noqa: E402


def units(run, policy):
    """(tokens after the first, decode seconds) per unit of the bootstrap, summed over the rounds as `measure`
    pools them: a group of the batch, or a prompt."""
    if "groups" in policy:
        g = policy["groups"]
        return per_prompt(g, len(g["tokens"]) // run["rounds"])
    return per_prompt(policy, len(run["prompts"]))


def main(out, files):
    runs = [json.load(open(f)) for f in files]
    names = [p["policy"] for p in runs[0]["policies"]]
    rates = {name: [] for name in names}
    print("| batch | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for run in runs:
        policies = {p["policy"]: p for p in run["policies"]}
        base = units(run, policies[names[0]])
        idx = list(range(len(base[0])))
        cells = []
        for name in names:
            u = units(run, policies[name])
            rate = sum(u[0]) / sum(u[1])
            rates[name].append(rate)
            lo, hi = interval(u, base, idx)
            cells.append(f"{rate:.1f} tokens/s, {speedup(u, base, idx):.3f}× [{lo:.2f}, {hi:.2f}]")
        print(f"| {run.get('batch', 1)} | " + " | ".join(cells) + " |")
    batches = [run.get("batch", 1) for run in runs]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        ax.bar([i + k * width for i in range(len(batches))], rates[name], width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(batches))], [f"{b} at a time" for b in batches])
    ax.set_ylabel("decode tokens/s, all requests together")
    ax.set_title("Requests served together, their blocks scored in one pass")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
