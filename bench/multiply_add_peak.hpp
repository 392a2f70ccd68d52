// The multiply-add rate of one core at its peak: independent chains of the instruction that the weight
// products' kernels issue for each kind of activations (fp32: the widest FMA this CPU runs; int8: AVX-512
// VNNI's vpdpbusd, or AVX2's byte multiply-add and 16-bit sum), nothing else in the loop. A step of b
// tokens cannot cost less than its multiply-adds at this rate, as it cannot cost less than one read of
// its weights: with the read bound, the roofline of bench_llama's score curve.
#pragma once

#include <chrono>
#include <cstdint>

#include "blockpilot_workbench/models/kernels/weight_products.hpp"

namespace blockpilot::bench {

// Each loop is written out in its own target region: a shared template outside them would be compiled
// for the translation unit's target and could not inline the vector steps.
#if defined(BLOCKPILOT_X86_KERNELS)
/// `rounds` rounds of 12 independent accumulators (more than latency x issue rate of any of these
/// instructions) updated by `step`, then the rate: `macs` multiply-adds an update over the loop's time.
#define BLOCKPILOT_PEAK_LOOP(V, start, step, macs)                                                   \
  V acc[12];                                                                                       \
  for (V & a : acc) a = (start);                                                                   \
  const auto t0 = std::chrono::steady_clock::now();                                                \
  for (long r = 0; r < rounds; ++r)                                                                \
    _Pragma("GCC unroll 12") for (V & a : acc) a = (step);                                         \
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();   \
  for (V & a : acc) asm volatile("" : : "v"(a)); /* the results are used */                        \
  return (macs) * 12.0 * static_cast<double>(rounds) / s

BLOCKPILOT_TARGET_BEGIN("avx2,fma")
/// fp32 multiply-adds per second with 256-bit FMAs.
inline double fp32_peak_avx2(long rounds) {
  __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
  asm volatile("" : "+v"(m), "+v"(c));  // (not constants the compiler could fold)
  BLOCKPILOT_PEAK_LOOP(__m256, _mm256_set1_ps(1.0f), _mm256_fmadd_ps(a, m, c), 8.0);
}
/// int8 multiply-adds per second with the pair the AVX2 int8 kernels issue per 32 products: a 256-bit
/// byte multiply-add into 16 bits (vpmaddubsw) and its 16-bit sum (the accumulator's bytes are the
/// unsigned operand, so that the product is not loop-invariant).
inline double int8_peak_avx2(long rounds) {
  __m256i x = _mm256_set1_epi8(1);
  asm volatile("" : "+v"(x));
  BLOCKPILOT_PEAK_LOOP(__m256i, _mm256_set1_epi8(3), _mm256_add_epi16(a, _mm256_maddubs_epi16(a, x)), 32.0);
}
BLOCKPILOT_TARGET_END

BLOCKPILOT_TARGET_BEGIN("avx512f,avx512vnni")
/// fp32 multiply-adds per second with 512-bit FMAs.
inline double fp32_peak_avx512(long rounds) {
  __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
  asm volatile("" : "+v"(m), "+v"(c));
  BLOCKPILOT_PEAK_LOOP(__m512, _mm512_set1_ps(1.0f), _mm512_fmadd_ps(a, m, c), 16.0);
}
/// int8 multiply-adds per second with 512-bit vpdpbusd (4 byte products in each of 16 lanes).
inline double int8_peak_vnni(long rounds) {
  __m512i u = _mm512_set1_epi8(3), x = _mm512_set1_epi8(1);
  asm volatile("" : "+v"(u), "+v"(x));
  BLOCKPILOT_PEAK_LOOP(__m512i, _mm512_setzero_si512(), _mm512_dpbusd_epi32(a, u, x), 64.0);
}
BLOCKPILOT_TARGET_END
#undef BLOCKPILOT_PEAK_LOOP
#endif

/// Multiply-adds per second of one core with the instructions the kernels of this CPU use for fp32
/// (`int8` false) or int8 activations; 0 where there is no such kernel to bound (no AVX2).
inline double multiply_add_peak(bool int8, long rounds) {
#if defined(BLOCKPILOT_X86_KERNELS)
  const cpu_isa isa = detected_cpu_isa();
  if (int8 && isa >= cpu_isa::avx512_vnni) return int8_peak_vnni(rounds);
  if (int8) return isa >= cpu_isa::avx2 ? int8_peak_avx2(rounds) : 0.0;
  if (isa >= cpu_isa::avx512) return fp32_peak_avx512(rounds);
  if (isa >= cpu_isa::avx2) return fp32_peak_avx2(rounds);
#endif
  (void)int8;
  (void)rounds;
  return 0.0;
}

}  // namespace blockpilot::bench
