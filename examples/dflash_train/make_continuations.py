#!/usr/bin/env python3
"""Self-distilled training data at scale: the target's own continuations of make_prompts.py's prompts, in
chunks of prompts, by one of two engines:
  cpp    the C++ decoder (`blockpilot measure --policy none --trace-out`, plain decoding, the quantised
         target with int8 activations: about 10x Hugging Face `generate` on a CPU), chunks run by parallel
         workers; standard library and numpy;
  torch  Hugging Face `generate` on the GGUF dequantised to float32 (load_target), prompts of a
         chunk batched by length: for a CUDA device, where the whole set should take minutes (the CPU
         decoder: about 70 minutes on two cores); needs the training environment (torch, transformers,
         tokenizers, gguf).
Each chunk's result is kept (the C++ trace layout, in chunks-<data file's name>/ beside the data file), so a
run started again goes on where it stopped; the chunks done are then joined into the data file train.py reads.

  python3 make_continuations.py --workers 2                       # greedy, every prompt
  python3 make_continuations.py --temperature 1 --every 4        # T = 1 samples of every 4th chunk
  $PY make_continuations.py --engine torch --device cuda          # the same on a GPU

Output (default $BLOCKPILOT_CACHE/dflash-train/data-T<temperature>.safetensors), the layout of
make_data.py: tokens (uint16 for vocabularies up to 65,536 ids, else int32: prompt in the chat template,
then the continuation), offsets (int64),
generated (uint8: 1 for the target's tokens), metadata "sources", "settings", "summary".
"""

import argparse
import hashlib
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import (ENDOFTEXT, IM_END, REPO, STOP_IDS, build_tokenizer, chat_text, continue_batched, default_gguf,
                    load_target, read_lines, work_dir)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=Path, default=work_dir() / "prompts.jsonl", help="make_prompts.py output")
    p.add_argument("--blockpilot", type=Path, default=REPO / "build/examples/blockpilot", help="the built CLI")
    p.add_argument("--gguf", type=Path, default=default_gguf())
    p.add_argument("--storage", default="quantized_int8", choices=("fp32", "quantized", "quantized_int8"))
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--every", type=int, default=1, help="continue every k-th chunk's prompts only (a sample)")
    p.add_argument("--lines", default="", help="A:B: only the prompts of these lines (1-based, inclusive; default all)")
    p.add_argument("--new-tokens", type=int, default=128, help="largest continuation per prompt")
    p.add_argument("--chunk", type=int, default=250, help="prompts per decoder run")
    p.add_argument("--workers", type=int, default=2, help="cpp: decoder runs at once (one thread each)")
    p.add_argument("--engine", default="cpp", choices=("cpp", "torch"), help="who writes the continuations")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="torch: where the target runs")
    p.add_argument("--batch", type=int, default=0, help="torch: prompts per generate call (0: 250 on CUDA, 16 on the CPU)")
    p.add_argument("--seed", type=int, default=0, help="torch: the sampling seed (T > 0)")
    p.add_argument("--out", type=Path, default=None, help="the data file (default: beside the prompts)")
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="torch: start no chunk after this long; the data file then joins the chunks done (0: no limit)")
    return p.parse_args()


def write_safetensors(path: Path, arrays: dict, metadata: dict):
    """The safetensors layout: an 8-byte little-endian header size, a JSON header, the raw tensors."""
    dtypes = {np.dtype(np.int32): "I32", np.dtype(np.int64): "I64", np.dtype(np.uint16): "U16", np.dtype(np.uint8): "U8"}
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        header[name] = {"dtype": dtypes[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    tmp.replace(path)


def run_cpp(args, chunk_dir: Path, todo):
    """The chunks in `todo` by the C++ decoder, args.workers at a time."""
    running, t0, finished = [], time.time(), 0
    while todo or running:
        while todo and len(running) < args.workers:
            first, last = todo.pop(0)
            trace = chunk_dir / f"{first}-{last}.json"
            cmd = [str(args.blockpilot), "measure", "--model", f"gguf:{args.gguf}", "--storage", args.storage,
                   "--drafter", "lookup", "--policy", "none", "--quiet", "--prompt-file", str(args.prompts),
                   "--lines", f"{first}:{last}", "--max-new-tokens", str(args.new_tokens),
                   "--temperature", f"{args.temperature:g}", "--trace-out", str(trace.with_suffix(".part"))]
            running.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL), trace))
        time.sleep(2)
        for proc, trace in list(running):
            if proc.poll() is None:
                continue
            running.remove((proc, trace))
            if proc.returncode != 0:
                sys.exit(f"{trace.stem}: the decoder failed ({proc.returncode})")
            trace.with_suffix(".part").replace(trace)
            finished += 1
            per_chunk = (time.time() - t0) / finished  # the workers' chunks overlap: wall time per chunk finished
            print(f"chunk {trace.stem} done: {finished}/{finished + len(todo) + len(running)} this run, "
                  f"ETA {per_chunk * (len(todo) + len(running)) / 60:.1f} min", file=sys.stderr, flush=True)


def run_torch(args, rows, chunk_dir: Path, todo):
    """The chunks in `todo` by Hugging Face `generate`, each chunk's prompts batched by length (left
    padding), written as the C++ trace of the chunk. Prompts are put in SmolLM2's chat template and
    tokenised by the reference tokenizer the C++ one is tested against, so the ids are the C++ ids.
    T > 0 samples the full distribution (no top-k or top-p cut)."""
    import torch
    from transformers import GenerationConfig

    device = args.device if args.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    batch = args.batch or (250 if device == "cuda" else 16)
    tokenizer = build_tokenizer(args.gguf)
    target = load_target(args.gguf).to(device)
    sampling = {"do_sample": True, "temperature": args.temperature, "top_k": 0, "top_p": 1.0} if args.temperature > 0 \
        else {"do_sample": False}
    config = GenerationConfig(max_new_tokens=args.new_tokens, num_beams=1, eos_token_id=list(STOP_IDS),
                              pad_token_id=ENDOFTEXT, **sampling)
    torch.manual_seed(args.seed)
    name = args.prompts.stem  # the C++ key of a prompt: NAME:LINE
    t0, written = time.time(), 0
    for n, (first, last) in enumerate(todo):
        if args.max_minutes > 0 and time.time() - t0 > 60 * args.max_minutes:
            print(f"stopped after {args.max_minutes} minutes: {len(todo) - n} chunks left", file=sys.stderr, flush=True)
            break
        lines = range(first, last + 1)
        ids = {i: tokenizer.encode(chat_text(rows[i - 1]["prompt"]), add_special_tokens=False).ids for i in lines}
        outputs = dict(zip(lines, continue_batched(target, [ids[i] for i in lines], config, batch, device)))
        written += sum(len(o) for o in outputs.values())
        trace = {"workload": {"engine": "torch", "device": device, "torch": torch.__version__},
                 "temperature": args.temperature, "max_new_tokens": args.new_tokens,
                 "requests": [{"prompt": f"{name}:{i}", "prompt_ids": ids[i], "tokens": outputs[i]} for i in lines]}
        path = chunk_dir / f"{first}-{last}.json"
        path.with_suffix(".part").write_text(json.dumps(trace) + "\n")
        path.with_suffix(".part").replace(path)
        elapsed = time.time() - t0
        print(f"chunk {first}-{last} done: {n + 1}/{len(todo)} this run, {written / elapsed:.0f} tokens/s, "
              f"ETA {elapsed / (n + 1) * (len(todo) - n - 1) / 60:.1f} min", file=sys.stderr, flush=True)


def main():
    args = parse_args()
    if args.engine == "cpp" and args.seed:
        sys.exit("--seed: the C++ decoder samples each prompt from its own fixed stream; --seed is --engine torch's")
    rows = [json.loads(line) for line in read_lines(args.prompts) if line.strip()]
    tag = f"T{args.temperature:g}"
    out = args.out or args.prompts.parent / f"data-{tag}.safetensors"
    # Beside the data file and named after it, and made from what made.json records: a run on other prompts or
    # settings stops rather than join another run's chunks (a resumed run on the same ones continues them).
    chunk_dir = out.parent / f"chunks-{out.stem}{'-torch' if args.engine == 'torch' else ''}"
    chunk_dir.mkdir(parents=True, exist_ok=True)
    made = {"prompts": hashlib.sha256(args.prompts.read_bytes()).hexdigest(), "temperature": args.temperature,
            "new_tokens": args.new_tokens, "storage": args.storage, "engine": args.engine, "gguf": args.gguf.name,
            "seed": args.seed}
    record = chunk_dir / "made.json"
    if record.is_file() and json.loads(record.read_text()) != made:
        sys.exit(f"{chunk_dir} holds continuations of other prompts or settings ({record}): give another --out, "
                 "or remove the folder")
    if not record.is_file():
        if any(chunk_dir.glob("*.json")):
            print(f"{chunk_dir}: chunks made before made.json existed; taken as made from these prompts and settings",
                  file=sys.stderr)
        record.write_text(json.dumps(made, indent=1) + "\n")
    lo, hi = (int(x) for x in args.lines.split(":")) if args.lines else (1, len(rows))
    if not 1 <= lo <= hi <= len(rows):
        sys.exit(f"--lines {args.lines}: the prompt file has lines 1..{len(rows)}")
    chunks = [(first, min(first + args.chunk - 1, hi))
              for k, first in enumerate(range(lo, hi + 1, args.chunk)) if k % args.every == 0]
    todo = [c for c in chunks if not (chunk_dir / f"{c[0]}-{c[1]}.json").exists()]
    print(f"{len(rows)} prompts, {len(chunks)} chunks of up to {args.chunk} at T = {args.temperature:g}, "
          f"{len(chunks) - len(todo)} done before", file=sys.stderr, flush=True)
    if args.engine == "cpp":
        run_cpp(args, chunk_dir, todo)
    else:
        run_torch(args, rows, chunk_dir, todo)

    tokens, generated, offsets, sources = [], [], [0], []
    for first, last in chunks:
        if not (chunk_dir / f"{first}-{last}.json").exists():
            continue  # left by --max-minutes
        trace = json.loads((chunk_dir / f"{first}-{last}.json").read_text())
        if len(trace["requests"]) != last - first + 1:
            sys.exit(f"{chunk_dir}/{first}-{last}.json holds {len(trace['requests'])} continuations, not {last - first + 1}")
        for r in trace["requests"]:
            line = int(r["prompt"].rsplit(":", 1)[1])
            cont = r["tokens"]
            if IM_END in cont:
                cont = cont[:cont.index(IM_END) + 1]
            tokens += r["prompt_ids"] + cont
            generated += [0] * len(r["prompt_ids"]) + [1] * len(cont)
            offsets.append(len(tokens))
            sources.append({k: rows[line - 1][k] for k in ("family", "task", "source")} | {"line": line})
    by_family = {}
    for s in sources:
        by_family[s["family"]] = by_family.get(s["family"], 0) + 1
    summary = {"sequences": len(sources), "by_family": by_family, "tokens": len(tokens),
               "generated_tokens": int(sum(generated)), "temperature": args.temperature,
               "ended_with_im_end": int(sum(tokens[o - 1] == IM_END for o in offsets[1:]))}
    decoder = "blockpilot measure --policy none" if args.engine == "cpp" else "transformers generate, float32"
    settings = {k: str(v) for k, v in vars(args).items()} | {"decoder": decoder}
    token_type = np.uint16 if max(tokens) < 1 << 16 else np.int32  # SmolLM2's 49,152 ids fit 16 bits: half the file
    write_safetensors(out, {"tokens": np.asarray(tokens, token_type), "offsets": np.asarray(offsets, np.int64),
                            "generated": np.asarray(generated, np.uint8)},
                      {"sources": json.dumps(sources), "settings": json.dumps(settings), "summary": json.dumps(summary),
                       "made_by": "examples/dflash_train/make_continuations.py"})
    print(json.dumps(summary), file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
