// One variant of the CPU row kernels: cpu/row_kernels.hpp includes this inside each variant's namespace
// and target region, after defining `vector_bytes`.
#include "blockpilot/cpu/kernels/simd.inl"
#include "blockpilot/cpu/kernels/exp.inl"
#include "blockpilot/cpu/kernels/row_scans.inl"
#include "blockpilot/cpu/kernels/compact_pass.inl"
