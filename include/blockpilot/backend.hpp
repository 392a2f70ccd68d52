// Backend tags: each op is one template specialised per backend (DESIGN.md).
#pragma once

namespace blockpilot {

/// Host execution with Eigen / plain loops; the reference every other backend is tested against.
struct cpu_backend {};

/// CUDA execution on a stream; defined in blockpilot/cuda/backend.cuh (nvcc only).
struct cuda_backend;

}  // namespace blockpilot
