#!/usr/bin/env bash
# The Python package on a GPU machine that cannot reach PyPI: installs the wheel that bench/gpu/prepare.sh
# built for this Python (build-gpu-prebuilt/wheels, with pytest's and the example's pure-Python wheels) into
# build-gpu-python/, runs test/python (test_cuda.py must run, not skip), and with a SmolLM2 file
# (BLOCKPILOT_SMOLLM2_GGUF, else the cache) the transformers side by side and batch on the GPU.
#
#   bench/gpu/python.sh [OUT_DIR [PYTEST_ARGS...]]   default: $OUT, else results/gpu; every test in test/python
#   BLOCKPILOT_GPU_SIDE_BY_SIDE_LINES=41:60 (the prompt lines), BLOCKPILOT_GPU_SIDE_BY_SIDE_ROUNDS=2;
#   then examples/python/hf_batch.py on the held-out mix (BLOCKPILOT_GPU_BATCH=0 skips it;
#   BLOCKPILOT_GPU_BATCH_SIZE=8, BLOCKPILOT_GPU_BATCH_ROUNDS=1)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-${OUT:-$repo/results/gpu}}
[ $# -gt 0 ] && shift
selection=("${@:-.}")
mkdir -p "$out"
python=${PYTHON:-python3}
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheels=$repo/build-gpu-prebuilt/wheels
wheel=$(ls "$wheels"/blockpilot-*-"$tag"-*.whl 2>/dev/null | head -n 1)
if [ -z "$wheel" ]; then
  echo "no blockpilot wheel for $tag in $wheels (bench/gpu/prepare.sh builds them)"
  exit 1
fi
site=$repo/build-gpu-python
rm -rf "$site"
"$python" -m pip install --quiet --no-index --no-deps --target "$site" "$wheel" || exit 1
for w in "$wheels"/*-py3-none-any.whl; do  # what this environment lacks of pytest, gguf, accelerate
  name=$(basename "$w" | cut -d- -f1)
  "$python" -c "import ${name//-/_}" 2>/dev/null || "$python" -m pip install --quiet --no-index --no-deps --target "$site" "$w"
done
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
rc=0
(cd "$repo/test/python" && timeout 300 "$python" -m pytest -q -rs --junitxml="$out/pytest-gpu.xml" "${selection[@]}") \
  | tee "$out/pytest-gpu.log" || rc=1
grep -q "SKIPPED.*test_cuda" "$out/pytest-gpu.log" && { echo "test_cuda.py was skipped on a GPU machine"; rc=1; }

model=${BLOCKPILOT_SMOLLM2_GGUF:-${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -f "$model" ]; then
  timeout 540 "$python" "$repo/examples/python/hf_side_by_side.py" --gguf "$model" --device cuda \
    --lines "${BLOCKPILOT_GPU_SIDE_BY_SIDE_LINES:-41:60}" --rounds "${BLOCKPILOT_GPU_SIDE_BY_SIDE_ROUNDS:-2}" --check-rows 2,4,8 \
    --out "$out/hf-side-by-side-gpu" || rc=1
  if [ "${BLOCKPILOT_GPU_BATCH:-1}" = 1 ]; then  # several requests in one batched cache, planned by width
    timeout 300 "$python" "$repo/examples/python/hf_batch.py" --gguf "$model" --device cuda \
      --batch "${BLOCKPILOT_GPU_BATCH_SIZE:-8}" --rounds "${BLOCKPILOT_GPU_BATCH_ROUNDS:-1}" \
      --out "$out/hf-batch-gpu" || rc=1
  fi
else
  echo "no SmolLM2 file at $model: the side by side skipped"
fi
exit $rc
