// Umbrella header for nvcc code: the CUDA backend and every op specialised for it (feature pass,
// predictor MLP, acceptance rules). Host-only code includes blockpilot/blockpilot.hpp instead.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include "blockpilot/cuda/acceptance.cuh"
#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/compact_features.cuh"
#include "blockpilot/cuda/mlp.cuh"
#include "blockpilot/cuda/mlp_view.cuh"
#include "blockpilot/cuda/workspace.cuh"
