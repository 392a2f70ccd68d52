// Products of b activation rows with a weight matrix stored by rows (fp32, or GGUF's Q4_0 / Q4_1 /
// Q8_0 blocks as the file holds them): y[i][o] = Σ_k x[i][k] W[o][k]. One pass over each weight row
// serves up to 8 input rows, so that scoring a block of b tokens reads the weights about once, as one
// token does. Compiled for every x86-64 level in cpu_isa (target regions, no -m flags needed) and
// chosen at run time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BLOCKPILOT_X86_KERNELS 1
#endif

#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/kernels/cpu_isa.hpp"
#include "blockpilot/detail/target_region.hpp"

namespace blockpilot::cpu_kernels {

/// A weight matrix by rows: row o starts at data + o row_bytes; `cols` (a multiple of 32) elements of
/// `type` (f32, q4_0, q4_1 or q8_0) each.
struct weight_rows_view {
  io::ggml_type type = io::ggml_type::f32;
  const std::byte* data = nullptr;
  std::size_t row_bytes = 0;
  std::int64_t cols = 0;
};

/// Whether `multiply_rows` takes rows of `cols` elements of type `t`.
[[nodiscard]] constexpr bool supports(io::ggml_type t, std::int64_t cols) {
  return cols > 0 && cols % 32 == 0 &&
         (t == io::ggml_type::f32 || t == io::ggml_type::q4_0 || t == io::ggml_type::q4_1 || t == io::ggml_type::q8_0);
}

// ---- generic: the translation unit's own target ----
namespace generic {
#if defined(__GNUC__)
using vec = float __attribute__((vector_size(16)));
#else
using vec = float;
#endif
constexpr int lanes = sizeof(vec) / sizeof(float);
constexpr int max_group = 4;
constexpr int weight_rows_per_pass = 1;
constexpr int max_accumulators = 8;
inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline vec splat(float x) {
#if defined(__GNUC__)
  return vec{} + x;
#else
  return x;
#endif
}
/// a b + c, fused wherever the target has a fused multiply-add: left to the compiler, `a * b + c` is fused
/// in some instantiations and not in others, and a row's result would depend on the rows beside it.
inline vec fmadd(vec a, vec b, vec c) {
#if defined(__FP_FAST_FMAF) && defined(__GNUC__)
  vec r;
  for (int i = 0; i < lanes; ++i) r[i] = __builtin_fmaf(a[i], b[i], c[i]);
  return r;
#elif defined(__FP_FAST_FMAF)
  return std::fma(a, b, c);
#else  // no fused multiply-add on this target, so none can be formed
  return a * b + c;
#endif
}
inline vec zero() { return vec{}; }
inline float hsum(vec v) {
  float s[lanes];
  std::memcpy(s, &v, sizeof v);
  float t = 0;
  for (float x : s) t += x;
  return t;
}
/// The block decoded by the GGUF reader (the reference), then loaded.
template <io::ggml_type T, std::size_t Bytes>
inline void decode_block(const std::byte* b, vec* w) {
  float f[32];
  io::dequantize(T, std::span<const std::byte>(b, Bytes), f);
  for (int p = 0; p < 32 / lanes; ++p) w[p] = load(f + p * lanes);
}
inline void decode_q4_0(const std::byte* b, vec* w) { decode_block<io::ggml_type::q4_0, 18>(b, w); }
inline void decode_q4_1(const std::byte* b, vec* w) { decode_block<io::ggml_type::q4_1, 20>(b, w); }
inline void decode_q8_0(const std::byte* b, vec* w) { decode_block<io::ggml_type::q8_0, 34>(b, w); }
#include "blockpilot_workbench/models/kernels/weight_products.inl"
}  // namespace generic

#if defined(BLOCKPILOT_X86_KERNELS)
// Scales are IEEE halves; F16C converts them (both targets below have it).
#define BLOCKPILOT_HALF(p) _cvtsh_ss(io::gguf_detail::load_u16(p))

// ---- avx2: AVX2 + FMA + F16C, 8 lanes ----
BLOCKPILOT_TARGET_BEGIN("avx2,fma,f16c")
namespace avx2 {
using vec = __m256;
constexpr int lanes = 8;
constexpr int max_group = 4;  // 8 accumulators + 4 weight vectors of the 16 registers
constexpr int weight_rows_per_pass = 1;
constexpr int max_accumulators = 8;
inline vec load(const float* p) { return _mm256_loadu_ps(p); }
inline vec splat(float x) { return _mm256_set1_ps(x); }
inline vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec zero() { return _mm256_setzero_ps(); }
inline float hsum(vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
/// 16 bytes of nibbles: low nibbles are elements 0..15, high nibbles 16..31 (as integers).
inline void nibbles(const std::byte* q, __m256i* e) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), m = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  e[0] = _mm256_cvtepu8_epi32(lo);
  e[1] = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(lo, lo));
  e[2] = _mm256_cvtepu8_epi32(hi);
  e[3] = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(hi, hi));
}
inline void decode_q4_0(const std::byte* b, vec* w) {
  __m256i e[4];
  nibbles(b + 2, e);
  const vec d = _mm256_set1_ps(BLOCKPILOT_HALF(b));
  for (int p = 0; p < 4; ++p) w[p] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(e[p], _mm256_set1_epi32(8))), d);
}
inline void decode_q4_1(const std::byte* b, vec* w) {
  __m256i e[4];
  nibbles(b + 4, e);
  std::int32_t dm;  // d and m converted together
  std::memcpy(&dm, b, 4);
  const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
  const vec d = _mm256_broadcastss_ps(both), m = _mm256_broadcastss_ps(_mm_movehdup_ps(both));
  for (int p = 0; p < 4; ++p) w[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e[p]), d, m);
}
inline void decode_q8_0(const std::byte* b, vec* w) {
  const vec d = _mm256_set1_ps(BLOCKPILOT_HALF(b));
  for (int p = 0; p < 4; ++p) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * p));
    w[p] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
  }
}
#include "blockpilot_workbench/models/kernels/weight_products.inl"
}  // namespace avx2
BLOCKPILOT_TARGET_END

// ---- avx512: AVX-512 F/BW/VL/DQ + FMA + F16C, 16 lanes ----
BLOCKPILOT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace avx512 {
using vec = __m512;
constexpr int lanes = 16;
constexpr int max_group = 4;  // 2 weight rows x 4 input rows x 2 chains = 16 accumulators, + 2 x 2 weight vectors
constexpr int weight_rows_per_pass = 2;
constexpr int max_accumulators = 16;
inline vec load(const float* p) { return _mm512_loadu_ps(p); }
inline vec splat(float x) { return _mm512_set1_ps(x); }
inline vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline vec zero() { return _mm512_setzero_ps(); }
inline float hsum(vec v) {  // (the halves by shuffles: GCC 12's extract intrinsics warn falsely)
  const __m256 lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  return avx2::hsum(_mm256_add_ps(lo, hi));
}
inline void nibbles(const std::byte* q, __m512i* e) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), m = _mm_set1_epi8(15);
  e[0] = _mm512_cvtepu8_epi32(_mm_and_si128(b, m));
  e[1] = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), m));
}
inline void decode_q4_0(const std::byte* b, vec* w) {
  __m512i e[2];
  nibbles(b + 2, e);
  const vec d = _mm512_set1_ps(BLOCKPILOT_HALF(b));
  for (int p = 0; p < 2; ++p) w[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(e[p], _mm512_set1_epi32(8))), d);
}
inline void decode_q4_1(const std::byte* b, vec* w) {
  __m512i e[2];
  nibbles(b + 4, e);
  std::int32_t dm;  // d and m converted together
  std::memcpy(&dm, b, 4);
  const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
  const vec d = _mm512_broadcastss_ps(both), m = _mm512_broadcastss_ps(_mm_movehdup_ps(both));
  for (int p = 0; p < 2; ++p) w[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(e[p]), d, m);
}
inline void decode_q8_0(const std::byte* b, vec* w) {
  const vec d = _mm512_set1_ps(BLOCKPILOT_HALF(b));
  for (int p = 0; p < 2; ++p) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * p));
    w[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
  }
}
#include "blockpilot_workbench/models/kernels/weight_products.inl"
}  // namespace avx512
BLOCKPILOT_TARGET_END
#undef BLOCKPILOT_HALF
#endif  // BLOCKPILOT_X86_KERNELS

/// y[i ldy + o] = Σ_k x[i ldx + k] W[o][k] (or += when `accumulate`) for i < rows and o in
/// [first, first + count), with the kernels of `isa` (which this CPU must run: see resolve_cpu_isa;
/// `best` = the detected variant).
/// The weights are the file's values (Q4_1's q d + m fused into one rounding by the x86 variants);
/// the variants add the products in different orders (their vector widths), so they differ by float
/// rounding only.
inline void multiply_rows(cpu_isa isa, const weight_rows_view& w, const float* x, std::ptrdiff_t ldx, int rows,
                          std::int64_t first, std::int64_t count, float* y, std::ptrdiff_t ldy, bool accumulate) {
  if (isa == cpu_isa::best) isa = detected_cpu_isa();
#if defined(BLOCKPILOT_X86_KERNELS)
  if (isa >= cpu_isa::avx512) return avx512::multiply(w, x, ldx, rows, first, count, y, ldy, accumulate);
  if (isa == cpu_isa::avx2) return avx2::multiply(w, x, ldx, rows, first, count, y, ldy, accumulate);
#endif
  (void)isa;
  generic::multiply(w, x, ldx, rows, first, count, y, ldy, accumulate);
}

}  // namespace blockpilot::cpu_kernels
