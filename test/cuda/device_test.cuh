// What every CUDA test does first: skip (exit 77) without a device, unless
// BLOCKPILOT_REQUIRE_GPU=1 makes a missing device a failure.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

namespace blockpilot::testing {

inline void require_device_or_skip(const char* test) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return;
  (void)cudaGetLastError();
  const char* require = std::getenv("BLOCKPILOT_REQUIRE_GPU");
  if (require != nullptr && std::strcmp(require, "1") == 0) {
    std::fprintf(stderr, "%s: no CUDA device, and BLOCKPILOT_REQUIRE_GPU=1\n", test);
    std::exit(1);
  }
  std::fprintf(stderr, "%s: no CUDA device, skipped\n", test);
  std::exit(77);
}

}  // namespace blockpilot::testing
