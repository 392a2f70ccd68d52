// Umbrella header for nvcc code: everything in blockpilot.hpp plus the CUDA backend.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include "blockpilot/cuda/backend.cuh"
