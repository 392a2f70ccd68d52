"""Fixed block sizes, live: mean tau, tokens/s and speedup over b = 1 per size, from sweep journals.

Usage: plot_sweep.py OUT.png LABEL=SWEEP_FOLDER...
Prints a Markdown table per sweep (every size decoded every prompt, so the sizes compare on the same
requests; tokens/s is total generated tokens over total wall seconds, prefill included) and plots
tau(b) and the speedup beside each other.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def per_size(folder):
    rows = [json.loads(line) for line in open(f"{folder}/journal.jsonl") if line.strip()]
    sizes = rows[0]["sizes"]
    tau = [sum(r["tau"][i] for r in rows) / len(rows) for i in range(len(sizes))]
    speed = [sum(r["tokens"][i] for r in rows) / sum(r["seconds"][i] for r in rows) for i in range(len(sizes))]
    return len(rows), sizes, tau, speed


def main(out, runs):
    fig, (tau_ax, speed_ax) = plt.subplots(1, 2, figsize=(10, 4))
    smallest = set()
    for run in runs:
        label, folder = run.rsplit("=", 1)
        prompts, sizes, tau, speed = per_size(folder)
        speedup = [s / speed[0] for s in speed]
        smallest.add(sizes[0])
        print(f"\n{label} ({prompts} prompts)\n\n| b | " + " | ".join(map(str, sizes)) + " |")
        print("|---|" + "---|" * len(sizes))
        print("| mean tau | " + " | ".join(f"{t:.3f}" for t in tau) + " |")
        print("| tokens/s | " + " | ".join(f"{s:.1f}" for s in speed) + " |")
        print(f"| speed vs b = {sizes[0]} | " + " | ".join(f"{s:.2f}x" for s in speedup) + " |")
        tau_ax.plot(sizes, tau, marker="o", label=label)
        speed_ax.plot(sizes, speedup, marker="o", label=label)
    tau_ax.set(xlabel="block size b", ylabel="mean tau (tokens per target step)", title="Acceptance length")
    base = f"b = {smallest.pop()}" if len(smallest) == 1 else "each run's smallest b"
    speed_ax.set(xlabel="block size b", ylabel=f"tokens/s relative to {base}", title="Measured speed")
    speed_ax.axhline(1.0, color="grey", linewidth=0.8)
    for ax in (tau_ax, speed_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
