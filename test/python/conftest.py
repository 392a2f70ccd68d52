import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def lookup_predictor_file():
    return REPO / "examples" / "data" / "predictors" / "smollm2-lookup" / "T0-compact-cross-entropy.safetensors"
