// Compiles the kernels of BLOCKPILOT_VARIANT_KERNELS (a file name, defined by the includer) once per
// fp32 variant of weight_products.hpp — generic, avx2, avx512 — inside that variant's namespace and
// target region, on its primitives (vec, lanes, load, store, splat, fmadd, zero, max_accumulators).
//   #define BLOCKPILOT_VARIANT_KERNELS "blockpilot_workbench/models/kernels/x.inl"
//   #include "blockpilot_workbench/models/kernels/fp32_variants.inl"
namespace generic {
#include BLOCKPILOT_VARIANT_KERNELS
}  // namespace generic

#if defined(BLOCKPILOT_X86_KERNELS)
BLOCKPILOT_TARGET_BEGIN("avx2,fma,f16c")
namespace avx2 {
#include BLOCKPILOT_VARIANT_KERNELS
}  // namespace avx2
BLOCKPILOT_TARGET_END

BLOCKPILOT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace avx512 {
#include BLOCKPILOT_VARIANT_KERNELS
}  // namespace avx512
BLOCKPILOT_TARGET_END
#endif

#undef BLOCKPILOT_VARIANT_KERNELS
