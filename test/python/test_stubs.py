"""The committed type stub of the extension module is the one the installed module gives."""

import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_committed_stub_is_current(tmp_path):
    pytest.importorskip("nanobind")
    if shutil.which("python3") is None:
        pytest.skip("no python3 on PATH")
    fresh = tmp_path / "_blockpilot.pyi"
    subprocess.run(["bash", str(REPO / "python" / "generate-stubs.sh"), str(fresh)], check=True)
    committed = REPO / "python" / "blockpilot" / "_blockpilot.pyi"
    assert fresh.read_text() == committed.read_text(), "run python/generate-stubs.sh after changing the binding"
