"""Prompts from the project's prompt files, numbered as the C++ tools number them."""

from __future__ import annotations

import json
import pathlib


def load_prompts(path: pathlib.Path, lines: str, every: int = 1) -> list[str]:
    """Lines FIRST:LAST (1-based, inclusive) of a text file (a prompt a line) or of JSON lines with a 'prompt'
    field, every `every`-th. Lines end at '\\n' only: str.splitlines would also split at U+2028 inside a prompt
    (ShareGPT line 38 holds ten) and shift every later line."""
    first, last = (int(x) for x in lines.split(":"))
    text = pathlib.Path(path).read_text(encoding="utf-8").removesuffix("\n").split("\n")[first - 1:last:every]
    return [json.loads(line)["prompt"] for line in text] if pathlib.Path(path).suffix == ".jsonl" else text
