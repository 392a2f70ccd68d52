#!/usr/bin/env bash
# The GPU check: builds the CUDA tests and the GPU benchmarks in release mode, runs the tests with
# BLOCKPILOT_REQUIRE_GPU=1 (a missing GPU fails), the benchmarks, and, time permitting, the small test
# cases under compute-sanitizer; writes everything to one results file. Meant to finish within 5 minutes
# on an H200 with 16 cores; every step has a timeout and a failing step does not stop the others.
#
#   bench/gpu/run.sh [RESULTS_FILE]      default: $OUT/gpu-results.txt, else results/gpu/gpu-results.txt
#
# Build: Meson when it configures (it needs Eigen, Boost.Test, nlohmann-json, fmt and Google Benchmark),
# else nvcc directly (needs only Eigen, for the CPU reference the tests compare against: /usr/include/eigen3,
# $EIGEN_INCLUDE_DIR or build-gpu-deps/eigen3), else binaries prepared by bench/gpu/prepare.sh in
# build-gpu-prebuilt/. BLOCKPILOT_GPU_JOBS sets the build's parallelism (16); BLOCKPILOT_GPU_BUILD=nvcc
# or =prebuilt skips the earlier ways; no sanitizer case starts after BLOCKPILOT_GPU_SANITIZE_UNTIL seconds (230).
set -u

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ $# -ge 1 ]; then
  results=$1
elif [ -n "${OUT:-}" ]; then
  results=$OUT/gpu-results.txt
else
  results=$repo/results/gpu/gpu-results.txt
fi
out_dir=$(dirname "$results")
mkdir -p "$out_dir"
: > "$results"
build_log=$out_dir/gpu-build.log
: > "$build_log"
jobs=${BLOCKPILOT_GPU_JOBS:-16}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
say() { printf '%s\n' "$*" | tee -a "$results"; }
section() { say ""; say "== $* (at $(elapsed) s)"; }

tests=(philox_cuda compact_features_cuda mlp_cuda acceptance_cuda decoder_cuda)
declare -A exe=()

say "BlockPilot GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
section "device"
timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$results"
timeout 30 nvcc --version 2>&1 | tail -2 | tee -a "$results"

section "build"
# 1. Meson, release, only the CUDA targets.
meson_build=$repo/build-gpu-release
way=${BLOCKPILOT_GPU_BUILD:-meson}
if [ "$way" != meson ]; then
  say "meson skipped (BLOCKPILOT_GPU_BUILD=$way)"
elif command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
  if [ -f "$meson_build/build.ninja" ]; then
    setup_args=(--reconfigure)
  else
    setup_args=()
  fi
  if timeout 120 meson setup "${setup_args[@]}" "$meson_build" "$repo" --buildtype=release -Dcuda=enabled -Dtests=true \
       -Dbenchmarks=true -Dexamples=false -Dfuzz=false -Dnative_arch=false >> "$build_log" 2>&1; then
    targets=(bench/gpu/bench_gpu)
    for t in "${tests[@]}"; do targets+=("test/test_$t"); done
    timeout 300 ninja -C "$meson_build" -j "$jobs" "${targets[@]}" >> "$build_log" 2>&1
    say "meson: ninja exit status $?"
    for t in "${tests[@]}"; do [ -x "$meson_build/test/test_$t" ] && exe[$t]=$meson_build/test/test_$t; done
    [ -x "$meson_build/bench/gpu/bench_gpu" ] && exe[bench_gpu]=$meson_build/bench/gpu/bench_gpu
  else
    say "meson: configure failed (see gpu-build.log); building with nvcc directly"
  fi
else
  say "meson or ninja not found; building with nvcc directly"
fi

# 2. nvcc directly, for whatever Meson did not build.
missing=()
for t in "${tests[@]}" bench_gpu; do [ -z "${exe[$t]:-}" ] && missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ] && [ "$way" != prebuilt ]; then
  nv_build=$repo/build-gpu-nvcc
  mkdir -p "$nv_build"
  nvcc_flags=(-O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90
              -gencode=arch=compute_90,code=compute_90 -I"$repo/include" -I"$repo/test" -I"$repo/test/cuda")
  eigen=""
  for dir in "${EIGEN_INCLUDE_DIR:-}" /usr/include/eigen3 /usr/local/include/eigen3 "$repo/build-gpu-deps/eigen3"; do
    if [ -n "$dir" ] && [ -f "$dir/Eigen/Core" ]; then eigen=$dir; break; fi
  done
  reference=""
  if [ -n "$eigen" ]; then
    if timeout 240 g++ -std=c++20 -O2 -I"$repo/include" -isystem "$eigen" -c "$repo/test/cuda/cpu_reference.cpp" \
         -o "$nv_build/cpu_reference.o" >> "$build_log" 2>&1; then
      reference=$nv_build/cpu_reference.o
    else
      say "nvcc build: the CPU reference did not compile (see gpu-build.log)"
    fi
  else
    say "nvcc build: no Eigen found: only philox_cuda and bench_gpu can be built"
  fi
  pids=()
  for t in "${missing[@]}"; do
    if [ "$t" = bench_gpu ]; then
      src=$repo/bench/gpu/bench_gpu.cu
      extra=()
    else
      src=$repo/test/cuda/test_$t.cu
      extra=()
      if [ "$t" != philox_cuda ]; then
        [ -z "$reference" ] && continue
        extra=("$reference")
      fi
    fi
    (timeout 300 nvcc "${nvcc_flags[@]}" "$src" "${extra[@]}" -o "$nv_build/$t" > "$nv_build/$t.log" 2>&1) &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  for t in "${missing[@]}"; do
    [ -f "$nv_build/$t.log" ] && { echo "--- nvcc $t"; cat "$nv_build/$t.log"; } >> "$build_log"
    if [ -x "$nv_build/$t" ]; then exe[$t]=$nv_build/$t; say "nvcc: built $t"; else say "nvcc: $t did not build"; fi
  done
fi

# 3. Binaries prepared elsewhere (bench/gpu/prepare.sh), for what is still missing.
for t in "${tests[@]}" bench_gpu; do
  if [ -z "${exe[$t]:-}" ] && [ -x "$repo/build-gpu-prebuilt/$t" ]; then
    exe[$t]=$repo/build-gpu-prebuilt/$t
    say "using the prepared binary build-gpu-prebuilt/$t"
  fi
done
say "build finished at $(elapsed) s; log: $build_log"
grep -E "error|warning: " "$build_log" | head -20 | tee -a "$results"

section "tests (BLOCKPILOT_REQUIRE_GPU=1)"
declare -A verdict=()
for t in "${tests[@]}"; do
  if [ -z "${exe[$t]:-}" ]; then
    verdict[$t]="NOT BUILT"
    continue
  fi
  say "--- $t"
  BLOCKPILOT_REQUIRE_GPU=1 timeout 180 "${exe[$t]}" > "$out_dir/$t.log" 2>&1
  rc=$?
  if [ "$(wc -l < "$out_dir/$t.log")" -le 150 ]; then
    cat "$out_dir/$t.log" >> "$results"
  else
    { head -n 100 "$out_dir/$t.log"; echo "[...]"; tail -n 40 "$out_dir/$t.log"; } >> "$results"
  fi
  tail -n 3 "$out_dir/$t.log"
  case $rc in
    0) verdict[$t]="PASS" ;;
    124|137) verdict[$t]="TIMEOUT" ;;
    *) verdict[$t]="FAIL (exit $rc)" ;;
  esac
  say "$t: ${verdict[$t]} at $(elapsed) s"
  rm -f "$out_dir/$t.log"
done

section "benchmarks"
bench_verdict="NOT BUILT"
if [ -n "${exe[bench_gpu]:-}" ]; then
  timeout 240 "${exe[bench_gpu]}" "$out_dir/gpu-bench.json" > "$out_dir/bench.log" 2>&1
  rc=$?
  tee -a "$results" < "$out_dir/bench.log"
  rm -f "$out_dir/bench.log"
  case $rc in
    0) bench_verdict="RAN" ;;
    124|137) bench_verdict="TIMEOUT" ;;
    *) bench_verdict="FAILED (exit $rc)" ;;
  esac
fi

section "compute-sanitizer on the small cases (BLOCKPILOT_QUICK=1), while time allows"
declare -A sanitized=()
sanitizer=$(command -v compute-sanitizer 2>/dev/null)
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
for candidate in "$nvcc_dir/compute-sanitizer" "$nvcc_dir/../compute-sanitizer/compute-sanitizer"; do
  [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer=$candidate
done
if [ -n "$sanitizer" ]; then
  for tool in memcheck racecheck; do
    for t in compact_features_cuda acceptance_cuda mlp_cuda decoder_cuda; do
      [ -z "${exe[$t]:-}" ] && continue
      if [ "$(elapsed)" -gt "${BLOCKPILOT_GPU_SANITIZE_UNTIL:-230}" ]; then
        say "skipped $tool $t: out of time"
        continue
      fi
      BLOCKPILOT_QUICK=1 BLOCKPILOT_REQUIRE_GPU=1 timeout 60 "$sanitizer" --tool "$tool" --error-exitcode 99 \
        "${exe[$t]}" > "$out_dir/sanitizer.log" 2>&1
      rc=$?
      case $rc in
        0) sanitized["$tool $t"]="clean" ;;
        99) sanitized["$tool $t"]="ERRORS" ;;
        124|137) sanitized["$tool $t"]="timeout" ;;
        *) sanitized["$tool $t"]="exit $rc" ;;
      esac
      say "--- $tool $t: ${sanitized["$tool $t"]}"
      if [ "$rc" -ne 0 ]; then tail -n 60 "$out_dir/sanitizer.log" | tee -a "$results"; fi
      rm -f "$out_dir/sanitizer.log"
    done
  done
else
  say "compute-sanitizer not found"
fi

section "summary"
for t in "${tests[@]}"; do say "$(printf '%-24s %s' "$t" "${verdict[$t]:-NOT BUILT}")"; done
say "$(printf '%-24s %s' bench_gpu "$bench_verdict")"
for k in "${!sanitized[@]}"; do say "$(printf '%-24s %s' "$k" "${sanitized[$k]}")"; done
say "total $(elapsed) s; results: $results"
