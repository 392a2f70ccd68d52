"""The committed type stub of the extension module is the one the installed module gives (the stub
describes the build with CUDA, whose members are a superset)."""

import os
import pathlib
import subprocess
import sys

import pytest

import blockpilot as bp

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_committed_stub_is_current(tmp_path):
    pytest.importorskip("nanobind")
    if not bp.cuda_built:
        pytest.skip("this build has no CUDA; the committed stub describes the build with it")
    fresh = tmp_path / "_blockpilot.pyi"
    subprocess.run(["bash", str(REPO / "python" / "generate-stubs.sh"), str(fresh)], check=True,
                   env={**os.environ, "PYTHON": sys.executable})
    committed = REPO / "python" / "blockpilot" / "_blockpilot.pyi"
    assert fresh.read_text() == committed.read_text(), "run python/generate-stubs.sh after changing the binding"
