#!/usr/bin/env bash
# Trains the DFlash drafter on a lent machine with a CUDA device and PyTorch but no network, in one
# bounded run, from inputs gathered in STAGE (default /tmp/blockpilot-stage) by earlier calls:
#   *.whl                     wheels of what that machine lacks (dflash, gguf), installed when missing
#   gguf.part-*               the target's GGUF in parts (`split -b 12M -d`: a call carries the repository too), joined in name order
#   data*.safetensors         make_continuations.py's data files (all are joined)
#   resume.part-* (optional)  weights of an earlier run (`resume.pt` split as written below)
# stage_for_device.sh gathers them here in pieces that fit a call.
# It trains with train.py on the GPU (BLOCKPILOT_DEVICE, default cuda) for at most MINUTES, then leaves in OUT: the drafter
# (config.json, model.safetensors), training.json, loss_log.json, loss_curve.png and resume.pt in parts
# of 12 MiB, small enough to be carried back (model weights, step, log and scheduler; the optimiser's
# moments start again on resume).
#   bash examples/dflash_train/device_train.sh OUT MINUTES [train.py options...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1" minutes="$2"
shift 2
stage="${BLOCKPILOT_STAGE:-/tmp/blockpilot-stage}"
export PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"

if compgen -G "$stage/*.whl" >/dev/null && ! "$py" -c "import dflash.model, gguf" 2>/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$stage/site" "$stage"/*.whl
  export PYTHONPATH="$stage/site${PYTHONPATH:+:$PYTHONPATH}"
fi
gguf="$stage/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$gguf" ] || cat "$stage"/gguf.part-* > "$gguf"
run="$stage/run"
mkdir -p "$run"
if compgen -G "$stage/resume.part-*" >/dev/null && [ ! -f "$run/state.pt" ]; then
  cat "$stage"/resume.part-* > "$run/resume.pt"
  "$py" - "$run" <<'PY'
import sys, torch
run = sys.argv[1]
torch.save(torch.load(f"{run}/resume.pt", weights_only=False), f"{run}/state.pt")
PY
fi
data=("$stage"/data*.safetensors)
"$py" "$here/train.py" --device "${BLOCKPILOT_DEVICE:-cuda}" --gguf "$gguf" --data "${data[@]}" --out "$run" --max-minutes "$minutes" "$@"

mkdir -p "$out"
cp "$run"/drafter/config.json "$run"/drafter/model.safetensors "$run"/training.json "$run"/loss_log.json \
   "$run"/loss_curve.png "$out"/
"$py" - "$run" <<'PY'
import sys, torch
run = sys.argv[1]
state = torch.load(f"{run}/state.pt", weights_only=False, map_location="cpu")
state["optimizer"] = None  # the moments would not come back within the limits: they start again
torch.save(state, f"{run}/resume.pt")
PY
split -b 12M -d "$run/resume.pt" "$out/resume.part-"
ls -la "$out"
