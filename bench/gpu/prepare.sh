#!/usr/bin/env bash
# Prepares a GPU check on a machine whose own build may fail: copies Eigen's headers to
# build-gpu-deps/eigen3 (run.sh's nvcc build finds them there) and builds the CUDA tests and benchmarks
# into build-gpu-prebuilt/ (run.sh runs those when it cannot build), with the Python package's wheels for
# every Python 3.10+ found here and the pure-Python wheels its tests and example need (python.sh installs
# them there). Both folders are git-ignored: name them in the device run's carry list. The binaries target
# x86-64 without -march=native.
set -eu
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
eigen=${EIGEN_INCLUDE_DIR:-/usr/include/eigen3}
mkdir -p "$repo/build-gpu-deps/eigen3" "$repo/build-gpu-prebuilt"
cp -r "$eigen/Eigen" "$repo/build-gpu-deps/eigen3/"
flags=(-O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90
       -gencode=arch=compute_90,code=compute_90 -I"$repo/include" -I"$repo/test" -I"$repo/test/cuda")
out=$repo/build-gpu-prebuilt
g++ -std=c++20 -O2 -I"$repo/include" -isystem "$eigen" -c "$repo/test/cuda/cpu_reference.cpp" -o "$out/cpu_reference.o"
jobs=${BLOCKPILOT_GPU_JOBS:-2}
build() { nvcc "${flags[@]}" "$@"; }
pids=()
for t in compact_features_cuda mlp_cuda acceptance_cuda decoder_cuda; do
  build "$repo/test/cuda/test_$t.cu" "$out/cpu_reference.o" -o "$out/$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
build "$repo/test/cuda/test_philox_cuda.cu" -o "$out/philox_cuda"
build "$repo/bench/gpu/bench_gpu.cu" -o "$out/bench_gpu"
for pid in "${pids[@]}"; do wait "$pid"; done
rm -f "$out/cpu_reference.o"
mkdir -p "$out/wheels"
declare -A built=()
for py in python3 python3.10 python3.11 python3.12 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python3; do
  tag=$("$py" -c 'import sys; assert sys.version_info >= (3, 10); print(sys.version_info[:2])' 2>/dev/null) || continue
  [ -n "${built[$tag]:-}" ] && continue
  "$py" -m pip wheel --quiet --no-deps -w "$out/wheels" "$repo" && built[$tag]=1
done
python3 -m pip download --quiet --no-deps -d "$out/wheels" pytest iniconfig pluggy packaging gguf accelerate
du -sh "$repo/build-gpu-deps" "$out"
