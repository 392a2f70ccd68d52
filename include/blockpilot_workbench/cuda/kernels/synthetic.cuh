// Kernels of the device-resident synthetic target: expand each row's sparse form (a shift of the shared
// background plus a few candidate values, computed on the host by synthetic_world::sparse_logits) into a
// dense logits row, bit for bit what synthetic_world::fill_logits writes.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot_workbench/cuda/kernels/synthetic.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cstdint>

#include "blockpilot/types.hpp"

namespace blockpilot::cuda_detail {

/// rows[j][v] = background[v] + shifts[j]: blockIdx.y is the row, threads stride over the vocabulary.
/// One IEEE fp32 addition, as on the host. (Templates, so that every translation unit may define them.)
template <int Threads>
__global__ void __launch_bounds__(Threads)
    synthetic_background_kernel(const float* __restrict__ background, const float* __restrict__ shifts,
                                float* __restrict__ rows, std::int64_t vocab) {
  const float shift = shifts[blockIdx.y];
  float* row = rows + static_cast<std::int64_t>(blockIdx.y) * vocab;
  for (std::int64_t v = blockIdx.x * static_cast<std::int64_t>(Threads) + threadIdx.x; v < vocab;
       v += static_cast<std::int64_t>(gridDim.x) * Threads)
    row[v] = __fadd_rn(background[v], shift);
}

/// rows[j][tokens[j][i]] = values[j][i]: block j writes row j's candidates (after the background kernel on
/// the same stream). A token listed twice carries the same value both times, so the order does not matter.
template <int Threads>
__global__ void __launch_bounds__(Threads)
    synthetic_candidates_kernel(const token_id* __restrict__ tokens, const float* __restrict__ values, int candidates,
                                float* __restrict__ rows, std::int64_t vocab) {
  const std::int64_t j = blockIdx.x;
  for (int i = threadIdx.x; i < candidates; i += Threads) {
    const std::int64_t k = j * candidates + i;
    rows[j * vocab + tokens[k]] = values[k];
  }
}

}  // namespace blockpilot::cuda_detail
