#!/usr/bin/env python3
"""Self-instruct training prompts: requests that the target writes itself, so that the drafter also learns
how the target answers chat (make_prompts.py's prompts are mostly about documentation and code).

Each seed asks the target for one kind of request (a question, an explanation, a list, an email, a story,
a plan, code, advice, ...) about a topic: one of the everyday and school subjects below, or the short
description of a Debian package (`apt-cache dumpavail`: tools, libraries, games, fonts...). The target
answers the seeds at T = 0.8 (make_continuations.py, the C++ decoder, up to 64 new tokens); a quoted
request in its answer is taken, else the answer itself; requests under 15 characters, duplicates and any
that make_prompts.py's evaluation check refuses are dropped. Needs the training environment (the
tokenizer reads the answers back) and the built CLI.

  $PY make_self_instruct.py --count 2000 --workers 2     # -> $W/prompts-self-instruct.jsonl
  $PY make_self_instruct.py --count 4000 --seed 1 --package-share 1 --skip-seen ../data/prompts/self_instruct/prompts.jsonl \
      --out $W/prompts-self-instruct-2.jsonl              # a further batch, on package topics only

The prompts go beside make_prompts.py's (same fields; family "self_instruct", task the kind asked for,
source the topic); make_continuations.py --prompts continues them like the others.
"""

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

from common import IM_END, build_tokenizer, default_gguf, read_lines, work_dir
from make_prompts import evaluation_check, write_prompts

HERE = Path(__file__).resolve().parent

SUBJECTS = [
    "cooking", "baking bread", "healthy eating", "fitness", "running", "sleep", "stress", "first aid", "gardening",
    "houseplants", "pets", "dogs", "cats", "birds", "travel", "packing for a trip", "learning a language", "history",
    "ancient Rome", "the Second World War", "geography", "volcanoes", "the weather", "climate change", "space",
    "the solar system", "physics", "chemistry", "biology", "the human body", "mathematics", "fractions",
    "probability", "statistics", "economics", "personal finance", "saving money", "investing", "taxes",
    "starting a business", "marketing", "job interviews", "writing a resume", "career change", "working from home",
    "time management", "public speaking", "friendship", "family", "parenting", "teenagers", "school homework",
    "studying for exams", "music", "learning the guitar", "movies", "books", "poetry", "art", "photography",
    "video games", "board games", "football", "basketball", "chess", "cars", "bicycles", "home repair",
    "cleaning", "moving house", "renting an apartment", "law", "philosophy", "ethics", "psychology", "religion",
    "politics", "news", "social media", "smartphones", "computers", "the internet", "passwords and security",
    "Python programming", "JavaScript", "web development", "databases", "Linux", "machine learning",
    "spreadsheets", "email etiquette", "shopping", "fashion", "weddings", "birthdays", "holidays", "recycling",
    "energy at home", "oceans", "forests", "dinosaurs", "inventions", "famous scientists", "mythology",
]
KINDS = {
    "question": "Write one question that a user might ask an AI assistant about {}. Write only the question.",
    "explanation": "Write one request that a user might send to an AI assistant, asking it to explain something "
                   "about {}. Write only the request.",
    "list": "Write one request that a user might send to an AI assistant, asking for a list of ideas or tips "
            "about {}. Write only the request.",
    "email": "Write one request that a user might send to an AI assistant, asking it to write an email or a "
             "message about {}. Write only the request.",
    "story": "Write one request that a user might send to an AI assistant, asking for a short story or a poem "
             "about {}. Write only the request.",
    "plan": "Write one request that a user might send to an AI assistant, asking for a plan or step-by-step "
            "instructions about {}. Write only the request.",
    "code": "Write one request that a programmer might send to an AI assistant, asking for code about {}. "
            "Write only the request.",
    "advice": "Write one request that a user might send to an AI assistant, asking for advice about {}. "
              "Write only the request.",
    "comparison": "Write one question that a user might ask an AI assistant, comparing two things about {}. "
                  "Write only the question.",
    "definition": "Write one question that a user might ask an AI assistant about what a word or an idea means "
                  "in {}. Write only the question.",
    "howto": "Write one question that starts with \"How do I\" that a user might ask an AI assistant about {}. "
             "Write only the question.",
    "opinion": "Write one question that a user might ask an AI assistant for its opinion about {}. "
               "Write only the question.",
    "example": "Write one request that a user might send to an AI assistant, asking for an example about {}. "
               "Write only the request.",
    "summary": "Write one request that a user might send to an AI assistant, asking it to summarise or rewrite a "
               "text about {}. Write only the request.",
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=2000, help="seeds (the prompts kept are fewer)")
    p.add_argument("--package-share", type=float, default=0.3,
                   help="share of the topics taken from Debian packages (more when the subjects run out)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gguf", type=Path, default=default_gguf())
    p.add_argument("--out", type=Path, default=work_dir() / "prompts-self-instruct.jsonl")
    p.add_argument("--skip-seen", type=Path, nargs="*", default=[],
                   help="earlier prompt files: their requests are dropped as duplicates (a further batch, --seed k)")
    return p.parse_args()


def package_topics():
    """The short descriptions of Debian's packages (what apt knows, sorted, deduplicated)."""
    text = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    found = {m.group(1).strip() for m in re.finditer(r"^Description: (.+)$", text, re.M)}
    return sorted(d for d in found if 12 <= len(d) <= 80 and not d.lower().startswith(("transitional", "dummy")))


def request_of(answer: str):
    """The request in the target's answer: a quoted one if there is, else the answer up to 600 characters."""
    quoted = re.findall(r'"([^"\n]{15,600})"', answer)
    text = max(quoted, key=len) if quoted else answer
    text = re.sub(r"^(here'?s|here is|request|question)\b[^:\n]*:\s*", "", text.strip(), flags=re.I).strip()
    return text[:600] if len(text) >= 15 else None


def main():
    args = parse_args()
    rng = random.Random(args.seed)
    packages = package_topics()
    # Every (topic, kind) pair at most once: the decoder's T > 0 stream is the same for every prompt, so a
    # repeated seed would repeat its answer.
    subject_pairs = [(topic, kind) for topic in SUBJECTS for kind in sorted(KINDS)]
    rng.shuffle(subject_pairs)
    from_packages = max(round(args.count * args.package_share), args.count - len(subject_pairs))
    pairs = subject_pairs[:args.count - from_packages]
    pairs += [(topic.rstrip("."), rng.choice(sorted(KINDS))) for topic in rng.sample(packages, from_packages)]
    rng.shuffle(pairs)
    seeds = [{"prompt": KINDS[kind].format(topic), "family": "self_instruct_seed", "task": kind, "source": topic}
             for topic, kind in pairs]
    work = args.out.parent / (args.out.stem + "-work")
    work.mkdir(parents=True, exist_ok=True)
    seed_file = work / "seeds.jsonl"
    seed_file.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in seeds), encoding="utf-8")
    print(f"{len(seeds)} seeds ({len(packages)} package topics, {len(SUBJECTS)} subjects, {len(KINDS)} kinds)",
          file=sys.stderr, flush=True)
    # Named after the seeds: a run with other seeds (--seed, --count, ...) never joins this one's answers.
    answers = work / f"answers-{hashlib.sha256(seed_file.read_bytes()).hexdigest()[:12]}.safetensors"
    subprocess.run([sys.executable, str(HERE / "make_continuations.py"), "--prompts", str(seed_file), "--gguf", str(args.gguf),
                    "--temperature", f"{args.temperature:g}", "--new-tokens", "64", "--workers", str(args.workers),
                    "--out", str(answers)], check=True)

    from safetensors.numpy import load_file

    data = load_file(str(answers))
    tokens, generated, offsets = data["tokens"], data["generated"], data["offsets"].tolist()
    tokenizer = build_tokenizer(args.gguf)
    check = evaluation_check()
    seen = {json.loads(line)["prompt"] for path in args.skip_seen for line in read_lines(path) if line.strip()}
    rows, dropped = [], {"no_request": 0, "duplicate": 0, **{reason: 0 for reason in check.reasons}}
    for seed, a, b in zip(seeds, offsets, offsets[1:]):
        ids = [int(t) for t, g in zip(tokens[a:b], generated[a:b]) if g and t != IM_END]
        request = request_of(tokenizer.decode(ids))
        if request is None:
            dropped["no_request"] += 1
        elif request in seen:
            dropped["duplicate"] += 1
        elif reason := check(request):
            dropped[reason] += 1
        else:
            seen.add(request)
            rows.append({"prompt": request, "family": "self_instruct", "task": seed["task"], "source": seed["source"]})
    write_prompts(args.out, rows, {"seeds": len(seeds), "prompts": len(rows), "dropped": dropped,
                                   "temperature": args.temperature, "evaluation_prompts_checked": check.checked})


if __name__ == "__main__":
    main()
