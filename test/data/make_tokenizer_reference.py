#!/usr/bin/env python3
# Writes test/data/tokenizer_reference.json: Hugging Face `tokenizers` ids of every shared prompt (raw and
# ChatML-templated), with the SmolLM2 tokenizer rebuilt from the GGUF's vocabulary and merges.
#
# Usage: python3 test/data/make_tokenizer_reference.py [GGUF] [PROMPTS_DIR]
#   needs: pip install tokenizers gguf numpy
#   GGUF defaults to $BLOCKPILOT_SMOLLM2_GGUF or ~/.cache/blockpilot/SmolLM2-135M-Instruct.Q4_1.gguf
#   (scripts/fetch-smollm2.sh), PROMPTS_DIR to examples/data/prompts.
#
# No PyPI package ships SmolLM2's tokenizer.json, so the pipeline of that file is rebuilt here with the
# `tokenizers` library (a Rust implementation independent of the C++ one): no normalizer,
# pre_tokenizer Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false,
# trim_offsets=true, use_regex=true)], BPE model (no dropout, no unk, no byte fallback), ByteLevel
# decoder, and the GGUF's type-3 tokens as special added tokens. Only vocabulary, merges and token
# types come from the GGUF (read with the `gguf` package, not with the C++ reader).
import json
import os
import sys
from pathlib import Path

from smollm2_tokenizer import DEFAULT_SYSTEM, chat_template, gguf_tokenizer


def main():
    here = Path(__file__).resolve().parent
    gguf_path = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "BLOCKPILOT_SMOLLM2_GGUF", Path.home() / ".cache/blockpilot/SmolLM2-135M-Instruct.Q4_1.gguf"))
    prompts_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else here.parent.parent / "examples/data/prompts"

    tok = gguf_tokenizer(gguf_path)

    cases = []
    for name in ("copa.txt", "sharegpt_60.txt"):
        text = (prompts_dir / name).read_text(encoding="utf-8")
        for line in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):  # not splitlines: U+2028
            raw = tok.encode(line, add_special_tokens=False).ids
            chat = tok.encode(chat_template(line), add_special_tokens=False).ids
            assert tok.decode(raw, skip_special_tokens=False) == line
            cases.append({"source": name, "text": line, "ids": raw, "chat_ids": chat})

    out = here / "tokenizer_reference.json"
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"generator": "test/data/make_tokenizer_reference.py",
                   "tokenizers_version": __import__("tokenizers").__version__,
                   "gguf": gguf_path.name, "system": DEFAULT_SYSTEM, "cases": cases},
                  f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{out}: {len(cases)} prompts")


if __name__ == "__main__":
    main()
