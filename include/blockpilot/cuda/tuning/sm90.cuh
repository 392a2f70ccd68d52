// Launch shapes of the CUDA kernels, as data (DESIGN.md: tuning is a constexpr table per architecture).
// Chosen for compute capability 9.0; measured on an H200 where docs/cuda.md says so.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/tuning/sm90.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cstdint>

namespace blockpilot::cuda_detail {

/// The compact feature pass: one block of `threads` per segment of `segment` logits; a segment is staged
/// in shared memory (32 KB), and the last block of a row merges the segments' candidates.
struct feature_tuning {
  int threads;
  int segment;
  int merge_capacity;  ///< candidates the merge keeps in shared memory; more are selected from global memory
};

/// Acceptance: one block of `threads` per segment of `segment` logits of a row; each thread keeps
/// `unroll` 16-byte loads in flight.
struct acceptance_tuning {
  int threads;
  int segment;
  int unroll;
};

/// The batched GEMV of the MLP: one warp per output neuron and input slice, `rows_per_block` batch rows
/// sharing each weight load; the input is split so that about `target_warps` warps run per layer.
struct gemv_tuning {
  int warps_per_block;
  int rows_per_block;
  int target_warps;
  int min_slice;  ///< inputs per warp below which the input is not split further
};

/// sm_90 (H100, H200): 132 SMs of 2048 threads.
/// - features: 256 threads x 8192 logits (32 floats a thread), 32 KB of shared memory a block; measured
///   against 4096 and 2048 on an H200 (first kernel version: at most 12 % slower at k = 64, 1.4-3x faster
///   at k = 256 and 1024);
/// First choices, not yet measured against others:
/// - acceptance: 256 threads x 16384 logits; 10 segments a row at V = 151,936, so a batch of 64 x 17 rows is
///   about 11,000 blocks (no wave-quantisation tail) and 4 x 16 B loads a thread are in flight;
/// - GEMV: 8 warps a block, 4 batch rows per weight load, about 8192 warps per layer (62 per SM).
inline constexpr feature_tuning sm90_features{256, 8192, 8192};
inline constexpr acceptance_tuning sm90_acceptance{256, 16384, 4};
inline constexpr gemv_tuning sm90_gemv{8, 4, 8192, 1024};

}  // namespace blockpilot::cuda_detail
