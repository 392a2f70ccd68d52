#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds, and runs the main job: the block-size policy
# comparison on the synthetic pair next to the replay of the measured DFlash data, as tables and a plot.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build examples/blockpilot
mkdir -p results
./build/examples/blockpilot compare --json-out results/compare.json "$@"
echo
./build/examples/blockpilot replay --acceptance-dir ../shared/data/acceptance/gsm8k_T0 \
  --selection ../shared/data/acceptance/gsm8k_T0/selected_by_reference_predictor.json
/usr/bin/python3 examples/plots/plot_compare.py results/compare.json results/compare.png
