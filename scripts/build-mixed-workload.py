#!/usr/bin/env python3
"""Builds the mixed workload (examples/data/prompts/mixed/): copy-heavy tasks on real text and code
that ship with Debian 12 (package documentation under /usr/share/doc, the Python 3.11 standard
library), beside the open-chat ShareGPT and the COPA prompt files. Splits go by source (a package, a
module, a prompt file's line range), so no text of a held-out prompt appears in training.

    python3 scripts/build-mixed-workload.py [--out examples/data/prompts/mixed]
    python3 scripts/build-mixed-workload.py --check    # the committed files: held out by text, chat by line

The committed files were made on a Debian 12 machine; the package set differs between machines, so a
rebuild elsewhere gives other prompts (the files record every prompt's source).
"""
import argparse
import ast
import gzip
import hashlib
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "python"))
from prompt_lines import file_lines  # noqa: E402 (a prompt file's lines, numbered as the C++ tools do)

DOC_TASKS = {
    "rewrite": "Rewrite the following text in plain English, keeping every detail:\n\n{}",
    "summarise": "Summarise the following text in a few sentences:\n\n{}",
    "proofread": "Copy the following text, correcting any spelling or grammar mistakes:\n\n{}",
    "extract": "List every program, file name and option mentioned in the text below:\n\n{}",
}
CODE_TASKS = {
    "docstring": "Add a docstring to this Python function and return the whole function:\n\n{}",
    "rename": "Rename the variables of this Python function to clearer names and return the whole function:\n\n{}",
    "explain": "Explain what this Python function does, step by step:\n\n{}",
    "annotate": "Add type hints to this Python function and return the whole function:\n\n{}",
}
SPLITS = ("train", "validation", "heldout", "confirmation")
# Per copy family. "confirmation" takes the next texts of the held-out sources' bucket: copy tasks decoded
# once, after the held-out split had informed a change to the drafter (docs/results.md).
PER_SPLIT = {"train": 60, "validation": 20, "heldout": 30, "confirmation": 30}
MIN_CHARS, MAX_CHARS = 300, 900


def digest(text):
    return int(hashlib.sha1(text.encode()).hexdigest(), 16)


def split_of(source):
    """60 / 20 / 20 by a hash of the source (a package or a module)."""
    r = digest(source) % 10
    return "train" if r < 6 else "validation" if r < 8 else "heldout"


def read_text(path):
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="strict")


def doc_passages(root):
    """(package, file, passage) for paragraphs of README files, joined up to MAX_CHARS."""
    for path in sorted(root.glob("*/README*")):
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = read_text(path)
        except (UnicodeDecodeError, OSError, EOFError):
            continue
        paragraphs = [re.sub(r"[ \t]+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
        passage = ""
        for p in paragraphs:
            if not p or sum(c.isalpha() for c in p) < 0.6 * len(p):
                continue
            passage = f"{passage}\n\n{p}" if passage else p
            if len(passage) >= MIN_CHARS:
                if len(passage) <= MAX_CHARS:
                    yield path.parent.name, str(path), passage
                passage = ""


def code_functions(root):
    """(module, file, source) of top-level functions of the standard library."""
    for path in sorted(root.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                src = ast.get_source_segment(text, node)
                if src and MIN_CHARS <= len(src) <= MAX_CHARS and "\t" not in src:
                    yield path.stem, f"{path}:{node.lineno}", src


def pick(items, tasks, family):
    """Per split, PER_SPLIT items: at most two per source, the tasks in turn, in a fixed hashed order.
    A text shipped by several packages (the same README in each) counts once, in one split."""
    out = {s: [] for s in SPLITS}
    per_source = {}
    names = list(tasks)
    items = list(items)
    seen = {}
    for source, where, text in items:
        seen[text] = seen.get(text, 0) + 1
    for source, where, text in sorted(items, key=lambda t: digest(t[1] + t[2])):
        split = split_of(f"{family}:{source}")
        if split == "heldout" and len(out[split]) >= PER_SPLIT[split]:
            split = "confirmation"
        if len(out[split]) >= PER_SPLIT[split] or per_source.get(source, 0) >= 2 or seen[text] > 1:
            continue
        per_source[source] = per_source.get(source, 0) + 1
        task = names[len(out[split]) % len(names)]
        out[split].append({"prompt": tasks[task].format(text), "family": family, "task": task, "source": where})
    return out


def prompt_file_lines(path, family, ranges):
    lines = file_lines(path)
    out = {s: [] for s in SPLITS}
    for split, (first, last) in ranges.items():
        for n in range(first, last + 1):
            if lines[n - 1].strip():
                out[split].append({"prompt": lines[n - 1], "family": family, "task": "open",
                                   "source": f"{path.name}:{n}"})
    return out


# Text that ShareGPT's users pasted into many prompts (a search tool's instructions), not a prompt's own text.
SHARED_BOILERPLATE = [
    "Make sure to cite results using [[number](URL)] notation after the reference. If the provided search results "
    "refer to multiple subjects with the same name, write separate answers for each subject.",
]


def check_disjoint(parts, span=80):
    """Fails unless no 80-character span of a held-out or confirmation text occurs in a training or validation
    text (every offset of those is indexed, so any common span of 89 characters or more is found), boilerplate
    aside."""
    body = lambda r: r["prompt"].split("\n\n", 1)[-1]
    seen = {}
    for part in parts:
        for split in ("train", "validation"):
            for r in part[split]:
                text = body(r)
                for i in range(max(1, len(text) - span + 1)):
                    seen.setdefault(text[i:i + span], r["source"])
    leaks = []
    for part in parts:
        for split in ("heldout", "confirmation"):
            for r in part[split]:
                text = body(r)
                for i in range(0, max(1, len(text) - span + 1), 10):
                    window = text[i:i + span]
                    if window in seen and not any(window in b for b in SHARED_BOILERPLATE):
                        leaks.append(f"{r['source']} ({split}) and {seen[window]}: {window!r}")
                        break
    if leaks:
        sys.exit("held-out prompts share text with training or validation:\n  " + "\n  ".join(leaks))
    print("held out: no 80-character span in common with train or validation", file=sys.stderr)


def check_committed(folder, prompts):
    """The committed splits: every chat prompt is the line of sharegpt_60.txt that its source names, and no held-out
    text occurs in training or validation."""
    lines = file_lines(prompts / "sharegpt_60.txt")
    parts = [{split: [json.loads(l) for l in open(folder / f"{split}.jsonl", encoding="utf-8")] for split in SPLITS}]
    for split, rows in parts[0].items():
        for r in rows:
            if r["family"] == "chat" and lines[int(r["source"].split(":")[1]) - 1] != r["prompt"]:
                sys.exit(f"{split}: the prompt of {r['source']} is not that line")
    print("chat prompts: each the line its source names", file=sys.stderr)
    check_disjoint(parts)


def main():
    here = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, default=here / "examples/data/prompts/mixed")
    ap.add_argument("--docs", type=pathlib.Path, default=pathlib.Path("/usr/share/doc"))
    ap.add_argument("--stdlib", type=pathlib.Path, default=pathlib.Path("/usr/lib/python3.11"))
    ap.add_argument("--check", action="store_true", help="check the files in --out instead of building them")
    args = ap.parse_args()
    prompts = here / "examples/data/prompts"
    if args.check:
        return check_committed(args.out, prompts)
    parts = [
        pick(doc_passages(args.docs), DOC_TASKS, "docs"),
        pick(code_functions(args.stdlib), CODE_TASKS, "code"),
        # ShareGPT: the studies' split (train 1-40, held out 41-60); COPA by line range.
        prompt_file_lines(prompts / "sharegpt_60.txt", "chat", {"train": (1, 30), "validation": (31, 40), "heldout": (41, 60)}),
        prompt_file_lines(prompts / "copa.txt", "copa", {"train": (1, 60), "validation": (61, 80), "heldout": (81, 100)}),
    ]
    check_disjoint(parts)
    args.out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        rows = [r for part in parts for r in part[split]]
        with open(args.out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        counts = {}
        for r in rows:
            counts[r["family"]] = counts.get(r["family"], 0) + 1
        print(f"{split}: {len(rows)} prompts {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
