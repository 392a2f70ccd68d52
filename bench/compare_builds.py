#!/usr/bin/env python3
"""The score curve of two or more builds of bench/bench_llama (say, two commits) in one run.

Rounds alternate the builds (the order reversed every other round), so that drift of a shared machine
hits all of them; every figure is the median over rounds, and each ratio to the first build comes with
its range over rounds. Measured per build: score(b), the time of one pass over b new tokens with the
logits of every row after a 64-token prompt, for b = 1 .. 16, by storage and thread count, the same at
1,024 positions of context (b = 1 and 8, 1 thread), and the read bound of a step (the weights' bytes over
the read bandwidth measured in the same run).

Usage:
  python3 bench/compare_builds.py NAME=PATH/TO/bench_llama NAME=... [--rounds 3] [--out DIR]
With --out: DIR/compare_builds.json, and DIR/compare_builds.png (tokens scored per second against b;
matplotlib, when installed; `--plot DIR` draws it again from the JSON, say with another Python).
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

SIZES = (1, 2, 4, 8, 16)
STORAGES = {0: "fp32 weights", 2: "quantised blocks, int8 activations"}
THREADS = (1, 2)
PATTERN = "memory_read|llama_score/storage:(0|2)/b:(1|2|4|8|16)/|llama_score_context/storage:2/b:(1|8)/context:1024"


def run(binary):
    """One run of a build: real time (ms) and counters by benchmark name."""
    out = subprocess.run([binary, f"--benchmark_filter={PATTERN}", "--benchmark_min_time=0.3",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True)
    return {b["name"].removesuffix("/real_time"): b for b in json.loads(out.stdout)["benchmarks"]
            if b.get("run_type") == "iteration" and not b.get("error_occurred")}


def span(values, digits=2):
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def plot(result, out):
    """DIR/compare_builds.png from the results: tokens scored per second against b, per storage."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is absent: no plot", file=sys.stderr)
        return
    names = list(result["builds"])
    fig, axes = plt.subplots(1, len(STORAGES), figsize=(11, 4.2))
    for (s, storage), ax in zip(STORAGES.items(), axes):
        for t in THREADS:
            label = f"{t} thread{'s' * (t > 1)}"
            for i, n in enumerate(names):
                curve = {int(b): ms for b, ms in result["curves"][f"{n}: {storage}, {label}"].items()}  # (JSON keys are strings)
                ax.plot(SIZES, [b / (curve[b] / 1e3) for b in SIZES], marker="o", label=f"{n}, {label}",
                        linestyle="-" if i == len(names) - 1 else "--", color=f"C{t - 1}", alpha=1 if i == len(names) - 1 else 0.5)
            bound = result["bound_ms"][f"{storage}, {label}"]
            ax.plot(SIZES, [b / (bound / 1e3) for b in SIZES], color=f"C{t - 1}", linestyle=":",
                    label=f"b tokens per read of the weights, {label}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(SIZES, [str(b) for b in SIZES])
        ax.set_xlabel("tokens scored in one pass (b)")
        ax.set_title(storage)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("tokens scored per second")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(out) / "compare_builds.png", dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="*", help="NAME=PATH of a bench_llama binary; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="folder for the JSON results and the plot")
    parser.add_argument("--plot", metavar="DIR", help="only draw DIR/compare_builds.png from DIR/compare_builds.json")
    args = parser.parse_args()
    if args.plot:
        return plot(json.loads((Path(args.plot) / "compare_builds.json").read_text()), args.plot)
    if not args.builds:
        parser.error("name at least one build")
    builds = dict(b.split("=", 1) for b in args.builds)
    names = list(builds)
    runs = {n: [] for n in names}
    for r in range(args.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            runs[n].append(run(builds[n]))
            print(f"round {r + 1} of {args.rounds}: {n} done", file=sys.stderr)

    def times(n, name, key="real_time"):
        return [x[name][key] for x in runs[n]]

    # the read bound of a step by storage (fp32: over 512 MB; quantised: over 97 MB) and threads, all builds' runs
    bandwidth = {(s, t): statistics.median(v for n in names for v in times(n, f"memory_read/threads:{t}/MB:{512 if s == 0 else 97}", "GB_per_s")) * 1e9
                 for s in STORAGES for t in THREADS}
    weight = {s: max(runs[n][0][f"llama_score/storage:{s}/b:1/threads:1"].get("weight_MB", 0) for n in names) for s in STORAGES}
    result = {"rounds": args.rounds, "builds": builds, "curves": {}, "bound_ms": {}}
    print(f"{args.rounds} rounds; medians [range over rounds]; read bandwidth, 1 / 2 threads: "
          f"{bandwidth[(0, 1)] / 1e9:.1f} / {bandwidth[(0, 2)] / 1e9:.1f} GB/s over 512 MB, "
          f"{bandwidth[(2, 1)] / 1e9:.1f} / {bandwidth[(2, 2)] / 1e9:.1f} GB/s over 97 MB\n")
    print("| build | storage, threads | " + " | ".join(f"b = {b} (ms)" for b in SIZES) +
          " | score(8) / score(1) | score(16) / score(1) | score(1) / bound |")
    print("|---|---|" + "---|" * (len(SIZES) + 3))
    for s, storage in STORAGES.items():
        for t in THREADS:
            curve = lambda n: {b: times(n, f"llama_score/storage:{s}/b:{b}/threads:{t}") for b in SIZES}
            for n in names:
                c = curve(n)
                ratio = lambda b: [x / y for x, y in zip(c[b], c[1])]
                bound = weight[s] * 1e6 / bandwidth[(s, t)] * 1e3 if weight[s] else float("nan")
                print(f"| {n} | {storage}, {t} | " + " | ".join(f"{statistics.median(c[b]):.1f}" for b in SIZES) +
                      f" | {span(ratio(8))} | {span(ratio(16))} | {statistics.median(c[1]) / bound:.2f} |")
                result["curves"][f"{n}: {storage}, {t} thread{'s' * (t > 1)}"] = {b: statistics.median(c[b]) for b in SIZES}
                result["bound_ms"][f"{storage}, {t} thread{'s' * (t > 1)}"] = bound
    if len(names) > 1:
        print(f"\nTime of the same score, each build over {names[0]}, same round:\n")
        print("| build | storage, threads | " + " | ".join(f"b = {b}" for b in SIZES) + " | b = 1, 1,024 positions | b = 8, 1,024 positions |")
        print("|---|---|" + "---|" * (len(SIZES) + 2))
        for s, storage in STORAGES.items():
            for t in THREADS:
                for n in names[1:]:
                    cells = [span([x / y for x, y in zip(times(n, f"llama_score/storage:{s}/b:{b}/threads:{t}"),
                                                          times(names[0], f"llama_score/storage:{s}/b:{b}/threads:{t}"))]) for b in SIZES]
                    context = ["—", "—"]
                    if s == 2 and t == 1:
                        key = lambda b: f"llama_score_context/storage:2/b:{b}/context:1024"
                        if all(key(1) in x for x in runs[names[0]]):
                            context = [span([x / y for x, y in zip(times(n, key(b)), times(names[0], key(b)))]) for b in (1, 8)]
                    print(f"| {n} | {storage}, {t} | " + " | ".join(cells) + " | " + " | ".join(context) + " |")
    for n in names:
        key = lambda b: f"llama_score_context/storage:2/b:{b}/context:1024"
        if all(key(1) in x for x in runs[n]):
            c = {b: times(n, key(b)) for b in (1, 8)}
            print(f"\n{n}, quantised blocks with int8 activations, 1 thread, 1,024 positions of context: score(1) "
                  f"{span(c[1], 1)} ms, score(8) {span(c[8], 1)} ms, score(8) / score(1) {span([x / y for x, y in zip(c[8], c[1])])}")
            result["context_1024"] = result.get("context_1024", {}) | {n: {b: statistics.median(c[b]) for b in c}}

    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare_builds.json").write_text(json.dumps(result, indent=1))
        plot(result, out)

if __name__ == "__main__":
    main()
