#!/usr/bin/env python3
"""Training prompts for the DFlash drafter at scale, from text that ships with Debian 12 and the
project's training prompt files, none of it evaluated on. Standard library only.

Sources (training side of every split the project evaluates on):
  - chat: ShareGPT lines 1-30 and COPA lines 1-60 (examples/data/prompts; the mixed workload's training
    lines; ShareGPT 31-60 and COPA 61-100 are validation and held-out prompts);
  - docs: README passages of the Debian packages that scripts/build-mixed-workload.py puts in its
    training split (by a hash of the package), every passage, each in one of the mix's four copy tasks;
  - code: functions and methods (200-1,200 characters) of the Python 3.11 standard library modules of
    that training split, each in one of the mix's four code tasks;
  - pydoc: prose passages of the Python 3.11 documentation (package python3.11-doc, fetched with
    `apt-get download` and unpacked into the work folder, not installed), each in one of four
    instructions.
A prompt is dropped when an 80-character span of its text (every 10th offset; the text without its task's
wording) occurs in an evaluation prompt (the mix's validation, held-out and confirmation files, ShareGPT 31-60, COPA 61-100) or when it
shares an 8-word sequence with ShareGPT 41-60; the counts are printed and stored beside the prompts.
The sources are interleaved in a fixed hashed order, so any prefix mixes them.

  python3 make_prompts.py [--out ~/.cache/blockpilot/dflash-train/prompts.jsonl]

Output: one JSON object per line, {"prompt", "family", "task", "source"}, as the `blockpilot`
program reads prompt files; and OUT with .summary.json: the counts per family and what was dropped.
"""

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from common import REPO, read_lines, work_dir

DEBIAN_PACKAGE = "python3.11-doc"
SOURCES_SUBDIR = "usr/share/doc/python3.11/html/_sources"
PYDOC_TASKS = {
    "explain": "Explain the following passage from the Python documentation in simple words:\n\n{}",
    "summarise": "Summarize this text:\n\n{}",
    "example": "{}\n\nWhat does this mean? Give a short example.",
    "key-points": "A student read this in a manual:\n\n{}\n\nWhat are the key points?",
}


def mixed_builder():
    """scripts/build-mixed-workload.py as a module: its sources, tasks and split by package / module."""
    spec = importlib.util.spec_from_file_location("build_mixed_workload", REPO / "scripts/build-mixed-workload.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fetch_debian_docs(text_dir: Path) -> Path:
    """The reST sources of python3.11-doc, downloaded and unpacked into text_dir once."""
    sources = text_dir / SOURCES_SUBDIR
    if sources.is_dir():
        return sources
    text_dir.mkdir(parents=True, exist_ok=True)
    print(f"fetching {DEBIAN_PACKAGE} into {text_dir}", file=sys.stderr)
    subprocess.run(["apt-get", "download", DEBIAN_PACKAGE], cwd=text_dir, check=True)
    deb = sorted(text_dir.glob(f"{DEBIAN_PACKAGE}_*.deb"))[-1]
    subprocess.run(["dpkg-deb", "-x", str(deb), str(text_dir)], check=True)
    (text_dir / "PACKAGE").write_text(deb.name + "\n")
    return sources


ROLE = re.compile(r":[a-zA-Z:+-]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")
LITERAL = re.compile(r"``([^`]*)``")
LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")


def clean(paragraph: str) -> str:
    text = " ".join(line.strip() for line in paragraph.splitlines())
    text = ROLE.sub(r"\1", text)
    text = LINK.sub(r"\1", text)
    text = LITERAL.sub(r"\1", text)
    text = text.replace("`", "").replace("**", "").replace("*", "")
    return re.sub(r"\s+", " ", text).strip()


def prose_passages(sources: Path, low=250, high=900):
    """Runs of prose paragraphs (no directives, code blocks, headings, tables or list fragments) of
    each reST file, joined up to `high` characters; those of at least `low` characters."""
    out = []
    for path in sorted(sources.rglob("*.rst.txt")):
        rel = str(path.relative_to(sources))
        paragraphs = re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace"))
        current = ""
        for par in paragraphs:
            lines = [l for l in par.splitlines() if l.strip()]
            prose = (lines and not par.startswith((" ", "\t", "..")) and not any(
                re.fullmatch(r"\s*([=\-~^*#+`'\"])\1{2,}\s*", l) for l in lines) and not par.lstrip().startswith(
                ("*", "-", "|", "+", ">>>", ":")) and not par.rstrip().endswith("::"))
            text = clean(par) if prose else ""
            if prose and len(text) >= 40 and len(current) + len(text) + 1 <= high:
                current = (current + " " + text).strip()
                continue
            if len(current) >= low:
                out.append((rel, current))
            current = text if prose and len(text) <= high else ""
        if len(current) >= low:
            out.append((rel, current))
    return out


def stdlib_functions(root: Path, module_wanted, low=200, high=1200):
    """(file:line, source) of every function and method of the wanted standard library modules."""
    for path in sorted(root.glob("*.py")):
        if not module_wanted(path.stem):
            continue
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                src = ast.get_source_segment(text, node)
                if src and low <= len(src) <= high and "\t" not in src:
                    yield f"{path}:{node.lineno}", textwrap.dedent(" " * node.col_offset + src)


def shingles(text: str, n=8):
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(max(0, len(words) - n + 1))}


def word_line(text: str) -> str:
    """The text's words, lower case, one space apart and around."""
    return " " + " ".join(re.findall(r"\w+", text.lower())) + " "


def spans(text: str, span=80, stride=10):
    """The text's span-character windows at every stride-th offset: with every offset of one text and every tenth
    of the other, any common run of span + 9 characters shows."""
    return {text[i:i + span] for i in range(0, max(1, len(text) - span + 1), stride)}


def digest(text: str) -> int:
    return int(hashlib.sha1(text.encode()).hexdigest(), 16)


def evaluation_check():
    """check(prompt, text=None): why a prompt (and the text it wraps) must not be trained on, or None. Refused:
    80 characters of the text in common with any prompt the project evaluates on (ShareGPT 31-60, COPA 61-100,
    the mix's validation, held-out and confirmation files, whose texts are compared without their task), the
    whole of such a prompt shorter than that (of 4 words or more) among its words, or an 8-word sequence of the
    prompt in common with ShareGPT 41-60. check.checked counts the evaluation prompts, check.reasons names the
    refusals."""
    prompts_dir = REPO / "examples/data/prompts"
    sharegpt, copa = read_lines(prompts_dir / "sharegpt_60.txt"), read_lines(prompts_dir / "copa.txt")
    evaluated = [sharegpt[n - 1] for n in range(31, 61)] + [copa[n - 1] for n in range(61, 101)]
    for split in ("validation", "heldout", "confirmation"):
        with open(prompts_dir / "mixed" / f"{split}.jsonl", encoding="utf-8") as f:
            evaluated += [json.loads(line)["prompt"].split("\n\n", 1)[-1] for line in f if line.strip()]
    eval_spans = set().union(*(spans(t, stride=1) for t in evaluated))
    eval_shingles = set().union(*(shingles(sharegpt[n - 1]) for n in range(41, 61)))
    short = [w for w in (word_line(t) for t in evaluated if len(t) < 80) if w.count(" ") > 4]

    def check(prompt, text=None):
        if spans(text or prompt) & eval_spans:
            return "shares_80_characters_with_evaluation"
        if any(w in word_line(prompt) for w in short):
            return "holds_a_short_evaluation_prompt"
        if shingles(prompt) & eval_shingles:
            return "shares_8_words_with_sharegpt_41_60"
        return None

    check.checked = len(evaluated)
    check.reasons = ("shares_80_characters_with_evaluation", "holds_a_short_evaluation_prompt",
                     "shares_8_words_with_sharegpt_41_60")
    return check


def tasked(items, tasks, family):
    """(source, text) items as prompts, the tasks in turn in a fixed hashed order."""
    names = list(tasks)
    rows = []
    for k, (where, text) in enumerate(sorted(items, key=lambda t: digest(t[0] + t[1]))):
        task = names[k % len(names)]
        rows.append({"prompt": tasks[task].format(text), "family": family, "task": task, "source": where, "text": text})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=work_dir() / "prompts.jsonl")
    ap.add_argument("--docs", type=Path, default=Path("/usr/share/doc"))
    ap.add_argument("--stdlib", type=Path, default=Path("/usr/lib/python3.11"))
    ap.add_argument("--text-dir", type=Path, default=work_dir() / DEBIAN_PACKAGE,
                    help=f"unpacked {DEBIAN_PACKAGE} (fetched with apt-get download when absent)")
    args = ap.parse_args()
    mix = mixed_builder()
    prompts_dir = REPO / "examples/data/prompts"

    check = evaluation_check()
    sharegpt, copa = read_lines(prompts_dir / "sharegpt_60.txt"), read_lines(prompts_dir / "copa.txt")

    chat = [{"prompt": sharegpt[n - 1], "family": "chat", "task": "open", "source": f"sharegpt_60.txt:{n}"}
            for n in range(1, 31) if sharegpt[n - 1].strip()]
    chat += [{"prompt": copa[n - 1], "family": "copa", "task": "open", "source": f"copa.txt:{n}"}
             for n in range(1, 61) if copa[n - 1].strip()]
    def gathered(name, items):
        print(f"{name}: {len(items)} texts", file=sys.stderr, flush=True)
        return items

    docs = gathered("docs", [(where, text) for package, where, text in mix.doc_passages(args.docs)
                             if mix.split_of(f"docs:{package}") == "train"])
    code = gathered("code", list(stdlib_functions(args.stdlib, lambda module: mix.split_of(f"code:{module}") == "train")))
    pydoc = gathered("pydoc", [(f"{DEBIAN_PACKAGE}:{rel}", text)
                               for rel, text in prose_passages(fetch_debian_docs(args.text_dir))])
    families = [chat, tasked(docs, mix.DOC_TASKS, "docs"), tasked(code, mix.CODE_TASKS, "code"),
                tasked(pydoc, PYDOC_TASKS, "pydoc")]

    rows, seen, dropped = [], set(), {"duplicate": 0, **{reason: 0 for reason in check.reasons}}
    for n, family in enumerate(families):
        print(f"checking {len(family)} prompts of family {n + 1} of {len(families)} against the evaluation prompts",
              file=sys.stderr, flush=True)
        for r in family:
            text = r.pop("text", r["prompt"])
            if r["prompt"] in seen:
                dropped["duplicate"] += 1
            elif reason := check(r["prompt"], text):
                dropped[reason] += 1
            else:
                seen.add(r["prompt"])
                rows.append(r)
    rows.sort(key=lambda r: digest(r["source"] + r["prompt"]))
    counts = {}
    for r in rows:
        counts[r["family"]] = counts.get(r["family"], 0) + 1
    write_prompts(args.out, rows, {"prompts": len(rows), "by_family": counts, "dropped": dropped,
                                   "evaluation_prompts_checked": check.checked})


def write_prompts(out: Path, rows, summary: dict):
    """The prompts as JSON lines, and the summary beside them (OUT.summary.json)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary), file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
