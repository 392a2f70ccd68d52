#!/usr/bin/env python3
"""The table and the plot of a side-by-side measurement (hf_side_by_side.py, examples/llama_cpp/
llama_cpp_decode, hf_batch.py), whose `seconds` and `tokens` are [round][unit] (a unit is a prompt, or a group
of prompts served together where the setup names `groups`): tokens/s per variant over all units, and its speed
relative to the reference variant unit by unit (each unit's tokens over its seconds, summed over the rounds),
as the mean and the 95 % t-interval over units.
Usage: side_by_side_report.py RESULT.json  (writes RESULT.md and RESULT.png)."""

from __future__ import annotations

import json
import math
import pathlib
import statistics
import sys

# The 97.5 % quantile of Student's t by degrees of freedom (past 30: the next smaller tabulated, conservatively).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
         21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}


def t_975(degrees: int) -> float:
    return T_975[max(k for k in T_975 if k <= degrees)]


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95 % t-interval (the mean twice for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def prompt_rates(variant: dict) -> list[float]:
    """Tokens/s of each prompt, over all rounds."""
    tokens = [sum(col) for col in zip(*variant["tokens"])]
    seconds = [sum(col) for col in zip(*variant["seconds"])]
    return [t / s for t, s in zip(tokens, seconds)]


def unit_of(setup: dict) -> str:
    """What a ratio is taken over: a group of prompts served together, or a prompt."""
    return "group" if "groups" in setup else "prompt"


def summarise(result: dict) -> list[dict]:
    variants = result["variants"]
    reference = next(v for v in variants if v["variant"] == result["reference"])
    base = prompt_rates(reference)
    rows = []
    for v in variants:
        rounds = [sum(t) / sum(s) for t, s in zip(v["tokens"], v["seconds"])]
        ratios = [a / b for a, b in zip(prompt_rates(v), base)]
        rows.append({**v, "tokens_per_second": interval(rounds), "ratio": interval(ratios)})
    return rows


def table(result: dict, rows: list[dict]) -> str:
    s = result["setup"]
    unit = unit_of(s)
    units = f", {s['groups']} groups" if "groups" in s else ""
    lines = [f"{s['model']}, {s['max_new_tokens']} new tokens, T = 0, {rows[0]['prompts']} prompts{units} ({s['prompts']}), "
             f"{s['rounds']} interleaved rounds, {s['device']}, {s['threads']} thread(s). Tokens/s: all prompts, mean "
             f"[95 % interval] over rounds; relative speed: {unit} by {unit}, mean [95 % interval] over {unit}s.",
             "", f"| variant | tokens/s | speed vs {result['reference']} | tau | outputs identical to {result['reference']} |",
             "|---|---|---|---|---|"]
    for row in rows:
        m, lo, hi = row["tokens_per_second"]
        rm, rlo, rhi = row["ratio"]
        tau = f"{row['tau']:.2f}" if "tau" in row else "–"
        lines.append(f"| {row['variant']} | {m:.1f} [{lo:.1f}, {hi:.1f}] | {rm:.2f}× [{rlo:.2f}, {rhi:.2f}] | {tau} | "
                     f"{row['identical_outputs']}/{row['prompts']} |")
    curves = s.get("step_seconds") or ({"the verifier": s["step_costs_measured"]} if "step_costs_measured" in s else {})
    for name, seconds in curves.items():
        lines.append(f"\nStep cost measured at load on {name}, b = 1..{len(seconds)} over b = 1: "
                     + ", ".join(f"{t / seconds[0]:.2f}" for t in seconds) + ".")
    for name, checks in s.get("block_invariance", {}).items():
        lines.append(f"\nRows of {name} in blocks against the same rows alone: " + "; ".join(
            f"b = {c['block_size']}: " + ("identical" if c["max_abs_difference"] == 0 else
                                          f"up to {c['max_abs_difference']:.3g} apart, {c['argmax_changes']} of "
                                          f"{c['rows']} argmaxes moved") for c in checks) + ".")
    for row in rows:
        if row["family"].endswith("learned"):
            lines.append(f"\n{row['variant']}: block sizes per prompt {row['block_sizes']}, "
                         f"decision {row['policy_seconds_per_request'] * 1e3:.3f} ms per request.")
    return "\n".join(lines) + "\n"


def plot(result: dict, rows: list[dict], path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette = ["#888888", "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * len(rows) + 1.3))
    for y, row in enumerate(rows):
        m, lo, hi = row["ratio"]
        ax.barh(y, m, xerr=[[m - lo], [hi - m]], capsize=3, color=palette[families.index(row["family"]) % len(palette)])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r["variant"] for r in rows])
    ax.invert_yaxis()
    unit = unit_of(result["setup"])
    ax.set_xlabel(f"speed vs {result['reference']}\n{unit} by {unit}: mean and 95 % interval over {unit}s")
    s = result["setup"]
    ax.set_title(f"{s['model']}\n{s['device']}, {s['threads']} thread(s), T = 0, {s['max_new_tokens']} new tokens", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write(path: pathlib.Path) -> str:
    """Writes PATH.md and PATH.png beside the result file; returns the table."""
    result = json.loads(path.read_text())
    rows = summarise(result)
    text = table(result, rows)
    path.with_suffix(".md").write_text(text)
    plot(result, rows, path.with_suffix(".png"))
    return text


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(write(pathlib.Path(sys.argv[1])), end="")
