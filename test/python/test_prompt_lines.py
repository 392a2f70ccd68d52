"""The examples' prompt lines are the C++ tools' lines: split at '\n' only, never inside a prompt."""

import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "python"))
from prompt_lines import load_prompts  # noqa: E402


def test_a_line_separator_inside_a_prompt_does_not_split_it(tmp_path):
    text = tmp_path / "prompts.txt"
    text.write_text("first\u2028still the first\nsecond\nthird\n", encoding="utf-8")
    assert load_prompts(text, "1:3") == ["first\u2028still the first", "second", "third"]
    assert load_prompts(text, "2:3") == ["second", "third"]
    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in ["a\u2028b", "c", "d", "e"]),
                    encoding="utf-8")
    assert load_prompts(rows, "1:4", every=2) == ["a\u2028b", "d"]


def test_carriage_returns_empty_lines_and_ranges_as_the_cpp_tools(tmp_path):
    text = tmp_path / "prompts.txt"
    text.write_bytes(b"x\ry\r\n\nz\n")
    assert load_prompts(text, "1:3") == ["x\ry", "z"]  # a lone CR stays, a CRLF ends the line, empty lines skip
    with pytest.raises(ValueError, match="past its last line 3"):
        load_prompts(text, "1:4")
    with pytest.raises(ValueError, match="FIRST"):
        load_prompts(text, "0:2")


def test_the_held_out_sharegpt_lines():
    lines = load_prompts(REPO / "examples/data/prompts/sharegpt_60.txt", "1:60")
    assert len(lines) == 60 and "\u2028" in lines[37]  # line 38 holds line separators
    assert load_prompts(REPO / "examples/data/prompts/sharegpt_60.txt", "54:54") == [
        "Explain quantum computing in simple terms"]
