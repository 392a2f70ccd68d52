// The CUDA backend tag: carries the stream every op of a request is enqueued on.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/backend.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_runtime.h>

#include "blockpilot/backend.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

struct cuda_backend {
  cudaStream_t stream = nullptr;
};

namespace cuda_detail {

/// Maps a CUDA error to a status and clears it (sticky errors stay, as CUDA defines).
[[nodiscard]] inline status check(cudaError_t e) {
  if (e == cudaSuccess) return status::success;
  (void)cudaGetLastError();
  if (e == cudaErrorMemoryAllocation) return status::out_of_memory;
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? status::no_device : status::cuda_error;
}

}  // namespace cuda_detail
}  // namespace blockpilot
