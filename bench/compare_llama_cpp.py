#!/usr/bin/env python3
# SmolLM2-135M on this CPU, ours against llama.cpp in one run: bench/bench_llama (fp32 weights, the
# file's quantised blocks with fp32 and with int8 activations) and llama.cpp (through llama-cpp-python,
# built from source with -march=native) on the same GGUF file, the same token ids and thread counts.
# Rounds alternate the two (ours first in odd rounds), so that drift of a shared machine hits both;
# every figure is the median over rounds, and ratios come with their range over rounds.
#
# Measured: prefill and decode tokens/s, the read bandwidth (the bound of decode: bandwidth / weight
# bytes), the core's multiply-add peak (fp32 FMAs, int8 dot products: with the read, the roofline of a
# step, the larger of the weights' read and the step's multiply-adds at that peak), and the curve that
# decides speculative decoding: the time of scoring b tokens in one batched pass (logits of every row)
# for b = 1 .. 16, ours and llama.cpp's (`eval` of b tokens after a 64-token prompt, logits_all, the b
# rows removed from the cache before the next call as llama.cpp's eval does; the last of three calls of
# the same b, as ours repeats each b).
#
# Usage:
#   python3 -m venv ~/.cache/blockpilot/venv-llama-cpp
#   CMAKE_BUILD_PARALLEL_LEVEL=2 ~/.cache/blockpilot/venv-llama-cpp/bin/pip install -r bench/requirements-llama-cpp.txt
#   ninja -C build bench/bench_llama
#   ~/.cache/blockpilot/venv-llama-cpp/bin/python bench/compare_llama_cpp.py [--build build] [--rounds 3] [--out DIR]
# The GGUF comes from $BLOCKPILOT_SMOLLM2_GGUF or ~/.cache/blockpilot (scripts/fetch-smollm2.sh). With
# --out, the results go to DIR/llama_cpp_comparison.json and the curve to DIR/llama_cpp_comparison.png
# (matplotlib, when installed).
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp

SIZES = (1, 2, 4, 8, 16)
STORAGES = {0: "ours, fp32 weights", 1: "ours, quantised blocks", 2: "ours, quantised blocks, int8 activations"}


def tokens(n, salt):
    """The token ids of bench/bench_llama.cpp."""
    return [(1000 + 7919 * (i + 31 * salt)) % 49152 for i in range(n)]


def run_ours(binary):
    """One run of bench_llama: real time (ms) and counters by benchmark name."""
    pattern = "memory_read|multiply_add_peak|llama_prefill|llama_decode|llama_score/.*/b:(1|2|4|8|16)/"
    out = subprocess.run([str(binary), f"--benchmark_filter={pattern}", "--benchmark_min_time=0.3",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True)
    return {b["name"].removesuffix("/real_time"): b for b in json.loads(out.stdout)["benchmarks"]
            if b.get("run_type") == "iteration" and not b.get("error_occurred")}


def run_llama_cpp(path, threads, repeats=5):
    """Prefill and decode tokens/s and the score time (ms) by b, median of `repeats` each."""
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=threads,
                          n_threads_batch=threads, logits_all=True, verbose=False)
    prefill, decode, score = [], [], {b: [] for b in SIZES}
    def last_of(runs, f):
        """The time of the last of `runs` calls of f in a row: llama.cpp builds its graph anew when the batch
        shape changes, and ours runs each shape over and over as well."""
        for _ in range(runs):
            t0 = time.perf_counter()
            f()
            seconds = time.perf_counter() - t0
        return seconds

    def prefill_once():
        llm.reset()
        llm.eval(tokens(128, 1))

    def score_once(b):
        llm.n_tokens = 64  # eval removes the cache rows from n_tokens on
        llm.eval(tokens(b, 4))

    for _ in range(repeats + 1):  # the first round warms up
        prefill.append(128 / last_of(2, prefill_once))
        llm.reset()
        llm.eval(tokens(64, 2))
        t0 = time.perf_counter()
        for _ in range(64):
            llm.eval([17])
        decode.append(64 / (time.perf_counter() - t0))
        llm.reset()
        llm.eval(tokens(64, 3))
        for b in SIZES:
            score[b].append(1e3 * last_of(3, lambda: score_once(b)))
    try:
        weight_bytes = llm._model.size()
    except AttributeError:
        weight_bytes = path.stat().st_size
    return {"prefill": statistics.median(prefill[1:]), "decode": statistics.median(decode[1:]),
            "score_ms": {b: statistics.median(v[1:]) for b, v in score.items()}, "weight_bytes": weight_bytes}


def span(values):
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def main():
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default=str(here.parent / "build"), help="Meson build folder with bench/bench_llama")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="folder for the JSON results and the plot")
    args = parser.parse_args()
    path = Path(os.environ.get("BLOCKPILOT_SMOLLM2_GGUF",
                               Path(os.environ.get("BLOCKPILOT_CACHE", Path.home() / ".cache/blockpilot")) /
                               "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not path.is_file():
        sys.exit(f"{path} is absent: run scripts/fetch-smollm2.sh")
    binary = Path(args.build) / "bench" / "bench_llama"
    load_before = os.getloadavg()[0]

    ours, theirs = [], []
    for r in range(args.rounds):
        steps = [lambda: ours.append(run_ours(binary)),
                 lambda: theirs.append({t: run_llama_cpp(path, t) for t in (1, 2)})]
        for step in (steps if r % 2 == 0 else steps[::-1]):
            step()
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    load_after = os.getloadavg()[0]

    def o(name, key="real_time"):
        return [run[name][key] for run in ours]

    # read bandwidth over a buffer of the fp32 weights' size (beyond any cache) and of the quantised size
    # (which a large last-level cache may hold): the bounds of a step, by storage (0: fp32) and threads
    read = {(mb, t): statistics.median(o(f"memory_read/threads:{t}/MB:{mb}", "GB_per_s")) * 1e9
            for mb in (512, 97) for t in (1, 2)}
    bandwidth = lambda s, t: read[(512 if s == 0 else 97, t)]
    # multiply-adds per second at the core's peak (0: no such kernel on this CPU), by activations and threads
    peak = {(int8, t): statistics.median(o(f"multiply_add_peak/threads:{t}/int8:{int8}", "GMAC_per_s")) * 1e9
            if all(f"multiply_add_peak/threads:{t}/int8:{int8}" in run for run in ours) else 0.0
            for int8 in (0, 1) for t in (1, 2)}
    print(f"SmolLM2-135M-Instruct Q4_1 GGUF; {args.rounds} rounds (medians, [range over rounds]); read bandwidth "
          f"{read[(512, 1)] / 1e9:.1f} / {read[(512, 2)] / 1e9:.1f} GB/s over 512 MB, {read[(97, 1)] / 1e9:.1f} / "
          f"{read[(97, 2)] / 1e9:.1f} GB/s over 97 MB; multiply-add peak, fp32 {peak[(0, 1)] / 1e9:.0f} / "
          f"{peak[(0, 2)] / 1e9:.0f}, int8 {peak[(1, 1)] / 1e9:.0f} / {peak[(1, 2)] / 1e9:.0f} GMAC/s (1 / 2 "
          f"threads); load average {load_before:.2f} before, {load_after:.2f} after; llama-cpp-python "
          f"{llama_cpp.__version__}\n")

    print("| implementation | weights (MB) | prefill tok/s, 1 / 2 threads | decode tok/s, 1 / 2 threads "
          "| decode bound tok/s, 1 / 2 threads |")
    print("|---|---|---|---|---|")
    result = {"rounds": args.rounds, "bandwidth_GB_per_s": {f"{mb} MB, {t} threads": b / 1e9 for (mb, t), b in read.items()},
              "peak_GMAC_per_s": {f"{'int8' if k else 'fp32'}, {t} threads": p / 1e9 for (k, t), p in peak.items()},
              "curves": {}}
    for s, name in STORAGES.items():
        mb = ours[0][f"llama_decode/storage:{s}/threads:1"]["weight_MB"]
        p = [statistics.median(o(f"llama_prefill/storage:{s}/threads:{t}", "tokens_per_s")) for t in (1, 2)]
        d = [statistics.median(o(f"llama_decode/storage:{s}/threads:{t}", "tokens_per_s")) for t in (1, 2)]
        print(f"| {name} | {mb:.1f} | {p[0]:.0f} / {p[1]:.0f} | {d[0]:.1f} / {d[1]:.1f} | "
              f"{bandwidth(s, 1) / mb / 1e6:.0f} / {bandwidth(s, 2) / mb / 1e6:.0f} |")
    mb = theirs[0][1]["weight_bytes"] / 1e6
    p = [statistics.median(run[t]["prefill"] for run in theirs) for t in (1, 2)]
    d = [statistics.median(run[t]["decode"] for run in theirs) for t in (1, 2)]
    print(f"| llama.cpp | {mb:.1f} | {p[0]:.0f} / {p[1]:.0f} | {d[0]:.1f} / {d[1]:.1f} | "
          f"{bandwidth(1, 1) / mb / 1e6:.0f} / {bandwidth(1, 2) / mb / 1e6:.0f} |")

    print("\nTime of scoring b tokens in one pass (ms), and score(b) / score(1):\n")
    print("| implementation, threads | " + " | ".join(f"b = {b}" for b in SIZES) + " | score(8) / score(1) "
          "| score(16) / score(1) | score(1) / time of reading the weights | score(8), score(16) / roofline |")
    print("|---|" + "---|" * (len(SIZES) + 4))
    for t in (1, 2):
        for s, name in STORAGES.items():
            times = {b: o(f"llama_score/storage:{s}/b:{b}/threads:{t}") for b in SIZES}
            weight = ours[0][f"llama_decode/storage:{s}/threads:1"]["weight_MB"] * 1e6
            ratio = lambda b: [x / y for x, y in zip(times[b], times[1])]
            roof = [statistics.median(o(f"llama_score/storage:{s}/b:{b}/threads:{t}", "vs_roofline"))
                    if all("vs_roofline" in run[f"llama_score/storage:{s}/b:{b}/threads:{t}"] for run in ours) else None
                    for b in (8, 16)]
            print(f"| {name}, {t} | " + " | ".join(f"{statistics.median(times[b]):.1f}" for b in SIZES) +
                  f" | {span(ratio(8))} | {span(ratio(16))} | "
                  f"{statistics.median(times[1]) / 1e3 * bandwidth(s, t) / weight:.2f} | " +
                  ", ".join("—" if r is None else f"{r:.2f}" for r in roof) + " |")
            result["curves"][f"{name}, {t} thread{'s' * (t > 1)}"] = {b: statistics.median(times[b]) for b in SIZES}
        times = {b: [run[t]["score_ms"][b] for run in theirs] for b in SIZES}
        ratio = lambda b: [x / y for x, y in zip(times[b], times[1])]
        print(f"| llama.cpp, {t} | " + " | ".join(f"{statistics.median(times[b]):.1f}" for b in SIZES) +
              f" | {span(ratio(8))} | {span(ratio(16))} | "
              f"{statistics.median(times[1]) / 1e3 * bandwidth(1, t) / theirs[0][t]['weight_bytes']:.2f} | |")
        result["curves"][f"llama.cpp, {t} thread{'s' * (t > 1)}"] = {b: statistics.median(times[b]) for b in SIZES}

    print("\nOurs (quantised blocks) / llama.cpp, time of the same score in the same round:\n")
    print("| activations, threads | " + " | ".join(f"b = {b}" for b in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for t in (1, 2):
        for s in (1, 2):
            cells = [span([run[f"llama_score/storage:{s}/b:{b}/threads:{t}"]["real_time"] / th[t]["score_ms"][b]
                           for run, th in zip(ours, theirs)]) for b in SIZES]
            print(f"| {'int8' if s == 2 else 'fp32'}, {t} | " + " | ".join(cells) + " |")

    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "llama_cpp_comparison.json").write_text(json.dumps(result, indent=1))
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is absent: no plot", file=sys.stderr)
            return
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for t, ax in zip((1, 2), axes):
            for name, curve in result["curves"].items():
                if name.endswith(f"{t} thread{'s' * (t > 1)}"):
                    ax.plot(SIZES, [b / (curve[b] / 1e3) for b in SIZES], marker="o",
                            label=name.rsplit(",", 1)[0], linestyle="--" if name.startswith("llama.cpp") else "-")
            weight = ours[0]["llama_decode/storage:1/threads:1"]["weight_MB"] * 1e6
            ax.plot(SIZES, [b * bandwidth(1, t) / weight for b in SIZES], color="grey", linestyle=":",
                    label="b tokens per read of the quantised weights (bound)")
            if peak[(1, t)] > 0:  # the roofline of the int8 path: the read, or the multiply-adds at the int8 peak
                macs = ours[0]["llama_score/storage:2/b:1/threads:1"]["macs_per_token"]
                ax.plot(SIZES, [b / max(weight / bandwidth(1, t), b * macs / peak[(1, t)]) for b in SIZES], color="black",
                        linestyle="-.", label="roofline, int8 activations (read or multiply-adds at peak)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(SIZES, [str(b) for b in SIZES])
            ax.set_xlabel("b (tokens scored in one pass)")
            ax.set_title(f"{t} thread{'s' * (t > 1)}")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("tokens scored per second")
        axes[1].legend(fontsize=7)
        fig.suptitle("SmolLM2-135M Q4_1 on the CPU: batched scoring, ours vs llama.cpp (same run)")
        fig.tight_layout()
        fig.savefig(out / "llama_cpp_comparison.png", dpi=110)


if __name__ == "__main__":
    main()
