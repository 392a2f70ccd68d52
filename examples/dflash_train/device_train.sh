#!/usr/bin/env bash
# Trains the DFlash drafter on a remote machine with a CUDA device and PyTorch but no network, in one
# run of at most MINUTES (data, features, training and export together), from inputs gathered in STAGE
# (default /tmp/blockpilot-stage) by earlier calls (stage_for_device.sh cuts them into pieces a call can carry):
#   *.whl                     wheels of what that machine lacks (dflash, gguf), installed when missing
#   gguf.part-*               the target's GGUF in parts, joined in name order
#   data*.safetensors         make_continuations.py's data files (all are joined), or
#   prompts.jsonl             make_prompts.py's prompts, continued here first by the target on the GPU
#                             (make_continuations.py --engine torch: greedy, and T = 1 for every 4th chunk,
#                             both at once, starting no chunk after a third of MINUTES)
#   init/ (optional)          an exported drafter (config.json, model.safetensors) that the run continues
#                             (train.py --init-from) under a new schedule
# It trains with train.py on the GPU (BLOCKPILOT_DEVICE, default cuda), its schedule sized to the time left
# (--steps 0) unless the options give --steps, and leaves in OUT at most four files, each small enough to
# come back: model.safetensors (the drafter's weights), run.tar.gz (config.json, training.json,
# loss_log.json, loss_curve.png, train.log) and the data files made here (data-T0/T1.safetensors: keep them
# for later runs).
#   bash examples/dflash_train/device_train.sh OUT MINUTES [train.py options...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1" minutes="$2"
shift 2
deadline=$(( $(date +%s) + ${minutes%.*} * 60 ))
stage="${BLOCKPILOT_STAGE:-/tmp/blockpilot-stage}"
export PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"

if compgen -G "$stage/*.whl" >/dev/null && ! "$py" -c "import dflash.model, gguf" 2>/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$stage/site" "$stage"/*.whl
  export PYTHONPATH="$stage/site${PYTHONPATH:+:$PYTHONPATH}"
fi
gguf="$stage/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$gguf" ] || cat "$stage"/gguf.part-* > "$gguf"
device="${BLOCKPILOT_DEVICE:-cuda}"
mkdir -p "$out"
if ! compgen -G "$stage/data*.safetensors" >/dev/null; then
  [ -f "$stage/prompts.jsonl" ] || { echo "no data*.safetensors and no prompts.jsonl in $stage" >&2; exit 1; }
  continue_prompts() {
    "$py" "$here/make_continuations.py" --engine torch --device "$device" --gguf "$gguf" --prompts "$stage/prompts.jsonl" \
      --chunk 500 --max-minutes "$(awk "BEGIN { print $minutes * 0.35 }")" "$@"
  }
  continue_prompts --out "$stage/data-T0.safetensors" &
  greedy=$!
  continue_prompts --temperature 1 --every 4 --out "$stage/data-T1.safetensors"
  wait "$greedy"
  cp "$stage"/data-T*.safetensors "$out"/
fi
data=("$stage"/data*.safetensors)
left=$(( deadline - $(date +%s) - 30 ))  # the rest, less the packing
[ "$left" -gt 60 ] || { echo "no time left to train (${left} s): no drafter made" >&2; ls -la "$out"; exit 1; }
init=()
[ -f "$stage/init/model.safetensors" ] && init=(--init-from "$stage/init")
run="$stage/run"
rm -rf "$run"  # a run of an earlier call on a machine still held would be resumed instead of init/ continued
"$py" "$here/train.py" --device "$device" --gguf "$gguf" --data "${data[@]}" --out "$run" --steps 0 \
  --max-minutes "$(awk "BEGIN { print $left / 60 }")" "${init[@]}" "$@" 2>&1 | tee "$run.log"

cp "$run"/drafter/model.safetensors "$out"/
cp "$run.log" "$run"/train.log
tar -C "$run" -czf "$out/run.tar.gz" train.log training.json loss_log.json loss_curve.png -C drafter config.json
ls -la "$out"
