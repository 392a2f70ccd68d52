#!/usr/bin/env python3
# Writes test/data/tokenizer_reference.json: Hugging Face `tokenizers` ids of every shared prompt (raw and
# ChatML-templated), with the SmolLM2 tokenizer rebuilt from the GGUF's vocabulary and merges.
#
# Usage: python3 test/data/make_tokenizer_reference.py [GGUF] [PROMPTS_DIR]
#   needs: pip install tokenizers gguf numpy
#   GGUF defaults to $BLOCKPILOT_SMOLLM2_GGUF or ~/.cache/blockpilot/SmolLM2-135M-Instruct.Q4_1.gguf
#   (scripts/fetch-smollm2.sh), PROMPTS_DIR to ../shared/data/prompts.
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

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def chat_template(user):
    return (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def main():
    here = Path(__file__).resolve().parent
    gguf_path = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "BLOCKPILOT_SMOLLM2_GGUF", Path.home() / ".cache/blockpilot/SmolLM2-135M-Instruct.Q4_1.gguf"))
    prompts_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else here.parent.parent.parent / "shared/data/prompts"

    reader = gguf.GGUFReader(str(gguf_path))
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    merges = field_strings(reader, "tokenizer.ggml.merges")
    types = field_ints(reader, "tokenizer.ggml.token_type")
    pre = bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre

    vocab = {t: i for i, t in enumerate(tokens)}
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs, dropout=None, unk_token=None,
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False,
                                       single_word=False) for t, ty in zip(tokens, types) if ty == 3])

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
