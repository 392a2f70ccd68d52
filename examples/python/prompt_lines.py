"""Prompts from the project's prompt files, read as the C++ tools read them (cli::read_prompt_lines)."""

from __future__ import annotations

import json
import pathlib


def file_lines(path) -> list[str]:
    """A file's lines as the C++ tools number them (line n at index n - 1): split at '\\n' only, a trailing
    '\\r' dropped. str.splitlines and universal newlines would also split at U+2028 or a lone '\\r' inside a
    prompt (ShareGPT line 38 holds ten U+2028) and shift every later line."""
    text = pathlib.Path(path).read_bytes().decode("utf-8")
    lines = text.split("\n")
    return [line.removesuffix("\r") for line in (lines[:-1] if text.endswith("\n") else lines)]


def load_prompts(path: pathlib.Path, lines: str, every: int = 1) -> list[str]:
    """The prompts of lines FIRST:LAST (1-based, inclusive) of a text file (a prompt a line) or of JSON lines
    with a 'prompt' field, every `every`-th of them, numbered by file_lines. Empty lines are no prompts; a
    range past the end of the file raises ValueError."""
    path = pathlib.Path(path)
    first, last = (int(x) for x in lines.split(":"))
    if not 1 <= first <= last or every < 1:
        raise ValueError(f"lines {lines!r} (every {every}): needs 1 <= FIRST <= LAST and every >= 1")
    numbered = file_lines(path)
    if last > len(numbered):
        raise ValueError(f"{path}: lines {lines} go past its last line {len(numbered)}")
    texts = [t for t in numbered[first - 1:last] if t]
    if path.suffix == ".jsonl":
        texts = [json.loads(t)["prompt"] for t in texts]
    return texts[::every]
