#!/usr/bin/env python3
# SmolLM2-135M on this CPU, in one run: bench/bench_llama (ours, fp32 and quantised weight storage) and
# llama.cpp (through llama-cpp-python, built from source with -march=native) on the same GGUF file, the
# same token ids and the same thread counts; prints one table with the memory-bandwidth bound of decode
# (read bandwidth measured by bench_llama in this run / bytes of weights per token), the 2-thread
# speedups, and the score(b) / score(1) curve of both storages.
#
# Usage:
#   python3 -m venv ~/.cache/blockpilot/venv-llama-cpp
#   CMAKE_BUILD_PARALLEL_LEVEL=2 ~/.cache/blockpilot/venv-llama-cpp/bin/pip install -r bench/requirements-llama-cpp.txt
#   ninja -C build bench/bench_llama
#   ~/.cache/blockpilot/venv-llama-cpp/bin/python bench/compare_llama_cpp.py [--build build] [--repeats 3]
# The GGUF comes from $BLOCKPILOT_SMOLLM2_GGUF or ~/.cache/blockpilot (scripts/fetch-smollm2.sh).
# Every figure is the best of --repeats runs (the least disturbed one: on a shared machine the others
# only add waiting); the load average before and after is printed with the table.
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import llama_cpp


def tokens(n, salt):
    """The token ids of bench/bench_llama.cpp."""
    return [(1000 + 7919 * (i + 31 * salt)) % 49152 for i in range(n)]


def run_ours(binary, repeats):
    """The fastest repetition of each benchmark (its counters), by run name."""
    out = subprocess.run([str(binary), "--benchmark_format=json", f"--benchmark_repetitions={repeats}"],
                         check=True, capture_output=True, text=True)
    best = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("run_type") == "iteration" and b.get("error_occurred") is not True:
            if b["run_name"] not in best or b["real_time"] < best[b["run_name"]]["real_time"]:
                best[b["run_name"]] = b
    return best


def run_llama_cpp(path, threads, repeats):
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    prompt, decode_prompt = tokens(128, 1), tokens(64, 2)
    prefill, decode = [], []
    for _ in range(repeats + 1):  # the first round warms up
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        prefill.append(128 / (time.perf_counter() - t0))
        llm.reset()
        llm.eval(decode_prompt)
        step = 17
        t0 = time.perf_counter()
        for _ in range(64):
            llm.eval([step])
            step = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        decode.append(64 / (time.perf_counter() - t0))
    try:
        weight_bytes = llm._model.size()
    except AttributeError:
        weight_bytes = path.stat().st_size
    return max(prefill[1:]), max(decode[1:]), weight_bytes


def main():
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default=str(here.parent / "build"), help="Meson build folder with bench/bench_llama")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    path = Path(os.environ.get("BLOCKPILOT_SMOLLM2_GGUF",
                               Path(os.environ.get("BLOCKPILOT_CACHE", Path.home() / ".cache/blockpilot")) /
                               "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not path.is_file():
        sys.exit(f"{path} is absent: run scripts/fetch-smollm2.sh")
    binary = Path(args.build) / "bench" / "bench_llama"
    load_before = os.getloadavg()[0]

    ours = run_ours(binary, args.repeats)
    cpp = {t: run_llama_cpp(path, t, args.repeats) for t in (1, 2)}
    load_after = os.getloadavg()[0]

    bandwidth = {t: ours[f"memory_read/{t}/real_time"]["GB_per_s"] * 1e9 for t in (1, 2)}
    rows = []
    for storage, name in ((0, "ours, fp32 weights"), (1, "ours, quantised weights (Q4_1 + Q8_0 blocks)")):
        get = lambda kind, t: ours[f"llama_{kind}/storage:{storage}/threads:{t}/real_time"]
        rows.append((name, get("decode", 1)["weight_MB"] * 1e6, get("prefill", 1)["tokens_per_s"],
                     get("prefill", 2)["tokens_per_s"], get("decode", 1)["tokens_per_s"], get("decode", 2)["tokens_per_s"]))
    rows.append((f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", cpp[1][2], cpp[1][0], cpp[2][0], cpp[1][1],
                 cpp[2][1]))

    print(f"SmolLM2-135M-Instruct Q4_1 GGUF; best of {args.repeats} runs; read bandwidth {bandwidth[1] / 1e9:.1f} GB/s "
          f"(1 thread), {bandwidth[2] / 1e9:.1f} GB/s (2 threads); load average {load_before:.2f} before, "
          f"{load_after:.2f} after\n")
    print("| implementation | weights (MB) | prefill tok/s, 1 thread | 2 threads | decode tok/s, 1 thread | 2 threads "
          "| 2-thread speedup, prefill / decode | decode bound tok/s, 1 / 2 threads | decode / bound, 1 / 2 threads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, weight_bytes, p1, p2, d1, d2 in rows:
        b1, b2 = bandwidth[1] / weight_bytes, bandwidth[2] / weight_bytes
        print(f"| {name} | {weight_bytes / 1e6:.1f} | {p1:.0f} | {p2:.0f} | {d1:.1f} | {d2:.1f} | "
              f"{p2 / p1:.2f} / {d2 / d1:.2f} | {b1:.0f} / {b2:.0f} | {d1 / b1:.2f} / {d2 / b2:.2f} |")

    print("\nscore(b) / score(1):\n")
    sizes = (1, 2, 4, 8, 16, 32)
    print("| storage, threads | " + " | ".join(f"b = {b}" for b in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for storage, name in ((0, "fp32"), (1, "quantised")):
        for t in (1, 2):
            times = [ours[f"llama_score/storage:{storage}/b:{b}/threads:{t}/isa:3/real_time"]["real_time"] for b in sizes]
            curve = [x / times[0] for x in times]
            ms = times[0]
            print(f"| {name}, {t} thread{'s' if t > 1 else ''} (score(1) = {ms:.1f} ms) | " +
                  " | ".join(f"{c:.2f}" for c in curve) + " |")


if __name__ == "__main__":
    main()
