// Umbrella header for nvcc code: the CUDA backend, every op specialised for it (feature pass, predictor
// MLP, acceptance rules), the decoder's stage and the BlockPilot policy on it. Host-only code includes
// blockpilot/blockpilot.hpp instead; the device-resident synthetic pair is blockpilot_workbench/cuda/synthetic.cuh.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include "blockpilot/cuda/acceptance.cuh"
#include "blockpilot/cuda/backend.cuh"
#include "blockpilot/cuda/blockpilot_policy.cuh"
#include "blockpilot/cuda/compact_features.cuh"
#include "blockpilot/cuda/decode_stage.cuh"
#include "blockpilot/cuda/device_memory.cuh"
#include "blockpilot/cuda/mlp.cuh"
#include "blockpilot/cuda/mlp_view.cuh"
#include "blockpilot/cuda/workspace.cuh"
