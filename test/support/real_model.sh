# Sourced by the real-model test scripts: $model (SmolLM2-135M-Instruct's GGUF; exits 77, Meson's skip,
# when it is absent), $out (a temporary folder removed on exit) and `check JSON PYTHON-CONDITION`
# (asserts the condition on the parsed file r).
model=${BLOCKPILOT_SMOLLM2_GGUF:-${BLOCKPILOT_CACHE:-$HOME/.cache/blockpilot}/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "$model is absent (scripts/fetch-smollm2.sh): skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
check() { python3 -c "import json, sys; r = json.load(open(sys.argv[1])); assert ($2), sys.argv[1]" "$1"; }
