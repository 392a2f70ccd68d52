#!/usr/bin/env bash
# Trains the DFlash drafter on a lent machine with a CUDA device and PyTorch but no network, in one
# bounded run, from inputs gathered in STAGE (default /tmp/blockpilot-stage) by earlier calls:
#   *.whl                     wheels of what that machine lacks (dflash, gguf), installed when missing
#   gguf.part-*               the target's GGUF in parts (`split -b 12M -d`: a call carries the repository too), joined in name order
#   data*.safetensors         make_continuations.py's data files (all are joined), or
#   prompts.jsonl             make_prompts.py's prompts, continued here first by the target on the GPU
#                             (make_continuations.py --engine torch: greedy, and T = 1 for every 4th chunk)
#   resume.part-* (optional)  weights of an earlier run (`resume.pt` split as written below)
# stage_for_device.sh gathers them here in pieces that fit a call.
# It trains with train.py on the GPU (BLOCKPILOT_DEVICE, default cuda) for at most MINUTES, then leaves in OUT: the drafter
# (config.json, model.safetensors), training.json, loss_log.json, loss_curve.png and resume.pt in parts
# of 12 MiB, small enough to be carried back (model weights, step, log and scheduler; the optimiser's
# moments start again on resume). Data made here are left in OUT too, to be kept for later runs;
# MINUTES = 0 makes the data and stops (a call has 10 minutes: the data can take a call of their own).
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
device="${BLOCKPILOT_DEVICE:-cuda}"
mkdir -p "$out"
if ! compgen -G "$stage/data*.safetensors" >/dev/null; then
  [ -f "$stage/prompts.jsonl" ] || { echo "no data*.safetensors and no prompts.jsonl in $stage" >&2; exit 1; }
  continue_prompts() {
    "$py" "$here/make_continuations.py" --engine torch --device "$device" --gguf "$gguf" --prompts "$stage/prompts.jsonl" "$@"
  }
  continue_prompts --out "$stage/data-T0.safetensors"
  continue_prompts --temperature 1 --every 4 --out "$stage/data-T1.safetensors"
  cp "$stage"/data-T*.safetensors "$out"/
fi
[ "$minutes" != 0 ] || { ls -la "$out"; exit 0; }
data=("$stage"/data*.safetensors)
"$py" "$here/train.py" --device "$device" --gguf "$gguf" --data "${data[@]}" --out "$run" --max-minutes "$minutes" "$@"

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
