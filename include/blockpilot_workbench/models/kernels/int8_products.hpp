// Products of quantised weights (Q4_0 / Q4_1 / Q8_0) with activations quantised to int8 per block of 32
// (d = max |x| / 127, as llama.cpp's Q8_1), as integer dot products, on the operands of int8_layout.hpp.
// With AVX-512 VNNI a block of 32 elements is 8 integer instructions per activation row for 16 output
// rows, the sums land in the output rows' lanes (no horizontal sums), each weight chunk loaded serves
// up to 8 activation rows and each activation broadcast two groups of 16 output rows.
//
// Every row o's result is computed as, for blocks k in order (i: the activation row):
//   isum = Σ_j u[o][k][j] q[i][k][j] − z Σ_j q[i][k][j]      (exact, in int32)
//   acc  = fma(float(isum), d[o][k] · dx[i][k], acc)
//   acc  = fma(m[o][k], dx[i][k] Σ_j q[i][k][j], acc)         (Q4_1 only)
// with u the unsigned quants (Q4: the nibble; Q8_0: the value + 128) and z the zero point (Q4_0: 8,
// Q8_0: 128, Q4_1: 0, whose offset m is the second fma). The AVX2 kernel (16-bit byte multiply-adds, 8
// lanes) and the portable one reach the same integer sums and do the same float operations in the same
// order, so every variant gives the same result bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "blockpilot_workbench/models/kernels/cpu_isa.hpp"
#include "blockpilot/detail/target_region.hpp"
#include "blockpilot_workbench/models/kernels/int8_layout.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"

namespace blockpilot::cpu_kernels {

namespace int8_generic {

/// Per block of 32: d = max |x| / 127, q = round-to-nearest-even(x (1 / d)) (q = 0 when d = 0). Every
/// float operation is exact or correctly rounded, so every variant and CPU gives the same result. A block
/// holding a NaN or an infinity is stored as q = 0 with d = NaN (int8_detail::finish_non_finite), so that
/// every product it enters is NaN, as in float arithmetic, whichever variant ran.
inline void quantize(io::ggml_type weight_type, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t cols,
                     int8_activations& out) {
  int8_detail::start(weight_type, rows, cols, out);
  for (int i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < cols / 32; ++k) {
      const float* xb = x + i * ldx + 32 * k;
      const auto at = out.at(i, k);
      std::int8_t* q = out.values.data() + 32 * at;
      float amax = 0.0f;
      bool finite = true;
      for (int j = 0; j < 32; ++j) {
        finite = finite && std::isfinite(xb[j]);
        amax = std::max(amax, std::abs(xb[j]));
      }
      if (!finite) {
        int8_detail::finish_non_finite(out, at);
        continue;
      }
      const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        // (1 / d overflows for d below 2^-128: an element then gives -127, as the vector conversions do)
        const float r = std::nearbyint(xb[j] * inv);
        const int v = r >= -127.0f && r <= 127.0f ? static_cast<int>(r) : -127;
        q[j] = static_cast<std::int8_t>(v);
        sum += v;
      }
      int8_detail::finish_block(out, at, d, sum);
    }
}

/// The portable kernel: the operations of the VNNI one, a lane at a time.
inline void multiply(const interleaved_blocks& w, const int8_activations& a, std::int64_t first, std::int64_t count,
                     float* y, std::ptrdiff_t ldy, bool accumulate) {
  using namespace int8_detail;
  const io::ggml_type t = w.type();
  const bool q4 = t != io::ggml_type::q8_0, offsets = t == io::ggml_type::q4_1;
  for (std::int64_t o = first; o < first + count; ++o) {
    const std::int64_t g = o / group_rows;
    const auto lane = static_cast<std::size_t>(o % group_rows);
    for (int i = 0; i < a.rows; ++i) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < w.blocks(); ++k) {
        const std::byte* tile = w.tile(g, k);
        const auto at = a.at(i, k);
        const std::int8_t* q = a.values.data() + 32 * at;
        std::int32_t isum = 0;
        for (int c = 0; c < 8; ++c)  // chunk c of the vector kernel: elements 4c..4c+3
          for (int j = 0; j < 4; ++j) {
            const auto byte = static_cast<unsigned>(tile[quant_offset(t, lane, static_cast<std::size_t>(4 * (c % (q4 ? 4 : 8)) + j))]);
            const unsigned u = !q4 ? byte : c < 4 ? byte & 15u : byte >> 4;
            isum += static_cast<std::int32_t>(u) * q[4 * c + j];
          }
        if (!offsets) isum += a.zero_offsets[at];
        const float d = io::gguf_detail::load_half(tile + scale_offset(lane, 0));
        acc = std::fma(static_cast<float>(isum), d * a.scales[at], acc);
        if (offsets) acc = std::fma(io::gguf_detail::load_half(tile + scale_offset(lane, 1)), a.scaled_sums[at], acc);
      }
      float& out = y[i * ldy + o];
      out = accumulate ? out + acc : acc;
    }
  }
}

}  // namespace int8_generic

#if defined(BLOCKPILOT_X86_KERNELS)
BLOCKPILOT_TARGET_BEGIN("avx2,fma,f16c")
namespace int8_avx2 {

/// int8_generic::quantize with 8 lanes (the same operations).
inline void quantize(io::ggml_type weight_type, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t cols,
                     int8_activations& out) {
  int8_detail::start(weight_type, rows, cols, out);
  const __m256 sign = _mm256_set1_ps(-0.0f), largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256i top = _mm256_set1_epi32(127), bottom = _mm256_set1_epi32(-127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // the dwords of two packs, in element order
  for (int i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < cols / 32; ++k) {
      const float* xb = x + i * ldx + 32 * k;
      const auto at = out.at(i, k);
      __m256 v[4], m = _mm256_setzero_ps();
      int finite = 0xff;
      for (int p = 0; p < 4; ++p) {
        v[p] = _mm256_loadu_ps(xb + 8 * p);
        const __m256 magnitude = _mm256_andnot_ps(sign, v[p]);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(magnitude, largest, _CMP_LE_OQ));  // false for NaN and ±inf
        m = _mm256_max_ps(m, magnitude);
      }
      if (finite != 0xff) {
        int8_detail::finish_non_finite(out, at);
        continue;
      }
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
      const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
      __m256i q[4], total = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[p], _mm256_set1_ps(inv)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[p] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(r), top), bottom);
        total = _mm256_add_epi32(total, q[p]);
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.values.data() + 32 * at), _mm256_permutevar8x32_epi32(bytes, order));
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
      t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
      int8_detail::finish_block(out, at, d, _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1))));
    }
}

/// 4 activation bytes at p in every 32-bit lane. (Functions, not lambdas, carry the target region's
/// instruction set: a lambda returning a vector warns of an ABI change where the build targets less.)
inline __m256i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/// Activation rows per pass over a group: their 2 × 4 sums (16-bit for Q4, 32-bit for Q8_0) stay in
/// registers beside the two halves' weight chunks and a broadcast of activation bytes (16 vector registers).
constexpr int max_rows = 4;

/// y rows i0..i0+R of output rows [lo, hi) of group g (its two halves of 8 rows, one 256-bit vector each):
/// each weight chunk loaded and unpacked once serves the R activation rows, and each activation broadcast
/// both halves. The integer sums per block come from byte multiply-adds into 16 bits (Q4: the 8 chunks of
/// a block stay below 2^15 = 32,768 in 16 bits: 8 · 2 · 15 · 127; Q8_0: |w| times x with w's sign, one
/// chunk at a time: 2 · 128 · 127), then the float steps of every variant. With `prefetch` each tile k
/// asks for the next group's tile k (into L2), so that it streams in while this one is computed.
template <io::ggml_type T, int R>
inline void group_rows(const interleaved_blocks& w, std::int64_t g, const int8_activations& a, int i0, float* y,
                       std::ptrdiff_t ldy, bool accumulate, std::int64_t lo, std::int64_t hi, bool prefetch) {
  constexpr bool q4 = T != io::ggml_type::q8_0, offsets = T == io::ggml_type::q4_1;
  constexpr std::size_t tile_bytes = int8_detail::tile_bytes(T);
  constexpr std::size_t scales = int8_detail::group_rows * int8_detail::scale_bytes(T);
  const std::byte* tile = w.tile(g, 0);
  const std::size_t ahead = static_cast<std::size_t>(w.blocks()) * tile_bytes;  // the next group's tile k
  const auto step = static_cast<std::size_t>(a.rows);
  const std::int8_t* q = a.values.data() + 32 * a.at(i0, 0);  // row i0 + i of block k: q + 32 (k rows + i)
  const float* dx = a.scales.data() + a.at(i0, 0);
  const float* sx = a.scaled_sums.data() + a.at(i0, 0);
  const std::int32_t* zx = a.zero_offsets.data() + a.at(i0, 0);
  const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(15), flip = _mm256_set1_epi8(-128);
  alignas(32) float acc[R][16] = {};
  for (std::int64_t k = 0; k < w.blocks(); ++k, tile += tile_bytes, q += 32 * step, dx += step, sx += step, zx += step) {
    if (prefetch)
#pragma GCC unroll 8
      for (std::size_t line = 0; line < tile_bytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(tile) + ahead + line, _MM_HINT_T1);
    const std::byte* quants = tile + scales;
    __m256i isum[2][R];
    if constexpr (q4) {
      __m256i s16[2][R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) s16[0][i] = s16[1][i] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m256i l[2], u[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * c + 32 * h));
          l[h] = _mm256_and_si256(b, low);
          u[h] = _mm256_and_si256(_mm256_srli_epi16(b, 4), low);
        }
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i xl = broadcast4(q + 32 * i + 4 * c), xu = broadcast4(q + 32 * i + 4 * (c + 4));
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            s16[h][i] = _mm256_add_epi16(s16[h][i], _mm256_maddubs_epi16(l[h], xl));
            s16[h][i] = _mm256_add_epi16(s16[h][i], _mm256_maddubs_epi16(u[h], xu));
            asm("" : "+x"(s16[h][i]));  // the sum in its register now (left as a tree of all 64 products, it spills)
          }
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          isum[h][i] = _mm256_madd_epi16(s16[h][i], ones);
          if constexpr (!offsets) isum[h][i] = _mm256_add_epi32(isum[h][i], _mm256_set1_epi32(zx[i]));
        }
    } else {  // Σ w x directly: equal to Σ (w + 128) x − 128 Σ x
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) isum[0][i] = isum[1][i] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i chunk = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * c + 32 * h));
          const __m256i v = _mm256_xor_si256(chunk, flip), magnitude = _mm256_sign_epi8(v, v);
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            const __m256i p = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(broadcast4(q + 32 * i + 4 * c), v));
            isum[h][i] = _mm256_add_epi32(isum[h][i], _mm256_madd_epi16(p, ones));
            asm("" : "+x"(isum[h][i]));
          }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 * h)));
      __m256 m = _mm256_setzero_ps();
      if constexpr (offsets) m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 32 + 16 * h)));
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][i]), _mm256_mul_ps(d, _mm256_set1_ps(dx[i])),
                                   _mm256_load_ps(acc[i] + 8 * h));
        if constexpr (offsets) v = _mm256_fmadd_ps(m, _mm256_set1_ps(sx[i]), v);
        _mm256_store_ps(acc[i] + 8 * h, v);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (std::int64_t o = lo; o < hi; ++o) {
      float& out = y[(i0 + i) * ldy + g * int8_detail::group_rows + o];
      out = accumulate ? out + acc[i][o] : acc[i][o];
    }
}

template <io::ggml_type T, int... R>
inline void rows_dispatch(int r, const interleaved_blocks& w, std::int64_t g, const int8_activations& a, int i0,
                          float* y, std::ptrdiff_t ldy, bool accumulate, std::int64_t lo, std::int64_t hi, bool prefetch,
                          std::integer_sequence<int, R...>) {
  (void)((r == R + 1 ? (group_rows<T, R + 1>(w, g, a, i0, y, ldy, accumulate, lo, hi, prefetch), true) : false) || ...);
}

template <io::ggml_type T>
void multiply_type(const interleaved_blocks& w, const int8_activations& a, std::int64_t first, std::int64_t count,
                   float* y, std::ptrdiff_t ldy, bool accumulate) {
  constexpr std::int64_t n = int8_detail::group_rows;
  const std::int64_t end = (first + count + n - 1) / n;  // one past the last group
  for (std::int64_t g = first / n; g < end; ++g) {
    const std::int64_t lo = std::max<std::int64_t>(first - g * n, 0), hi = std::min<std::int64_t>(first + count - g * n, n);
    for (int i0 = 0; i0 < a.rows; i0 += max_rows)  // the group's first pass asks for the next group
      rows_dispatch<T>(std::min(max_rows, a.rows - i0), w, g, a, i0, y, ldy, accumulate, lo, hi, i0 == 0 && g + 1 < end,
                       std::make_integer_sequence<int, max_rows>{});
  }
}

}  // namespace int8_avx2
BLOCKPILOT_TARGET_END

BLOCKPILOT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
namespace int8_vnni {

/// Activation rows per pass over a pair of groups: 2 × 8 integer sums in registers (the float accumulators,
/// touched once a block, stay in L1).
constexpr int max_rows = 8;

/// The 4 activation bytes at p in every lane.
[[gnu::always_inline]] inline __m512i broadcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// y rows i0..i0+R of the G groups g, g + 1, ... (16 outputs each), lanes `lanes[j]` of group j stored.
/// Each activation broadcast serves the G groups' weights: one group at a time, a broadcast load per
/// vpdpbusd bound the kernel (an Intel Xeon ran 2.2-2.9 G such pairs a second, 4.7-5.0 G vpdpbusd with
/// a broadcast shared by two, 4.6-7.5 G from registers alone).
/// With tile k of the G groups the pass asks for the next G groups' tile k (into L2), so that the next
/// groups stream in while these are computed: the hardware prefetcher alone left the read and the
/// products in turn, a step costing their sum. (Asking for the tiles 16 ahead within each group instead
/// left every other group's first tiles to the hardware, and cost up to 1.5x on an AMD Zen 4, whose
/// reads are fast: docs/performance.md.) Tiles are contiguous across groups; a prefetch past the end is
/// harmless.
template <io::ggml_type T, int G, int R>
[[gnu::always_inline]] inline void group_rows(const interleaved_blocks& w, std::int64_t g, const int8_activations& a,
                                              int i0, float* y, std::ptrdiff_t ldy, bool accumulate, const __mmask16* lanes) {
  constexpr bool q4 = T != io::ggml_type::q8_0, offsets = T == io::ggml_type::q4_1;
  constexpr std::size_t tile_bytes = int8_detail::tile_bytes(T);
  constexpr std::size_t scales = int8_detail::group_rows * int8_detail::scale_bytes(T);
  const std::byte* tile = w.tile(g, 0);  // group g + j's tile k: tile + (j blocks + k) tile_bytes
  const auto group_bytes = static_cast<std::size_t>(w.blocks()) * tile_bytes;
  const std::int8_t* q = a.values.data() + 32 * a.at(i0, 0);  // row i0 + i of block k: q + 32 (k rows + i)
  const float* dx = a.scales.data() + a.at(i0, 0);
  const float* sx = a.scaled_sums.data() + a.at(i0, 0);
  const std::int32_t* zx = a.zero_offsets.data() + a.at(i0, 0);
  const auto step = static_cast<std::size_t>(a.rows);
  const std::size_t ahead = G * group_bytes;  // the next G groups' tile k
  alignas(64) float acc[G][R][16] = {};
  for (std::int64_t k = 0; k < w.blocks(); ++k, tile += tile_bytes, q += 32 * step, dx += step, sx += step, zx += step) {
#pragma GCC unroll 2
    for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
      for (std::size_t line = 0; line < tile_bytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(tile) + j * group_bytes + ahead + line, _MM_HINT_T1);
    // chunk pair by chunk pair (c, c + 4: one load of Q4's nibbles), each broadcast serving every group:
    // G R independent integer chains (starting from the zero point's offset, which then costs no subtraction)
    __m512i isum[G][R];
#pragma GCC unroll 8
    for (int j = 0; j < G; ++j)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) isum[j][i] = offsets ? _mm512_setzero_si512() : _mm512_set1_epi32(zx[i]);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i lo[G], hi[G];
#pragma GCC unroll 2
      for (int j = 0; j < G; ++j) {
        const std::byte* quants = tile + j * group_bytes + scales;
        if constexpr (q4) {
          const __m512i low = _mm512_set1_epi8(15), b = _mm512_loadu_si512(quants + 64 * c);
          lo[j] = _mm512_and_si512(b, low);
          hi[j] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low);
        } else {
          lo[j] = _mm512_loadu_si512(quants + 64 * c);
          hi[j] = _mm512_loadu_si512(quants + 64 * (c + 4));
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512i x_lo = broadcast4(q + 32 * i + 4 * c), x_hi = broadcast4(q + 32 * i + 4 * (c + 4));
#pragma GCC unroll 2
        for (int j = 0; j < G; ++j) {
          isum[j][i] = _mm512_dpbusd_epi32(isum[j][i], lo[j], x_lo);
          isum[j][i] = _mm512_dpbusd_epi32(isum[j][i], hi[j], x_hi);
        }
      }
    }
#pragma GCC unroll 2
    for (int j = 0; j < G; ++j) {
      const std::byte* t = tile + j * group_bytes;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t)));
      __m512 m = _mm512_setzero_ps();
      if constexpr (offsets) m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + 32)));
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j][i]), _mm512_mul_ps(d, _mm512_set1_ps(dx[i])), _mm512_load_ps(acc[j][i]));
        if constexpr (offsets) v = _mm512_fmadd_ps(m, _mm512_set1_ps(sx[i]), v);
        _mm512_store_ps(acc[j][i], v);
      }
    }
  }
#pragma GCC unroll 2
  for (int j = 0; j < G; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float* out = y + (i0 + i) * ldy + (g + j) * int8_detail::group_rows;
      const __m512 sum = _mm512_load_ps(acc[j][i]);
      const __m512 v = accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(lanes[j], out), sum) : sum;
      _mm512_mask_storeu_ps(out, lanes[j], v);
    }
}

/// round(v s) clamped to [-127, 127] (NaN: -127, as int8_generic's quantize).
inline __m512i quantize16(__m512 v, __m512 s) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v, s), _MM_FROUND_TO_NEAREST_INT));
  return _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
}

/// int8_generic::quantize with 16 lanes (the same operations).
inline void quantize(io::ggml_type weight_type, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t cols,
                     int8_activations& out) {
  int8_detail::start(weight_type, rows, cols, out);
  const __m512 sign = _mm512_set1_ps(-0.0f), largest = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int i = 0; i < rows; ++i)
    for (std::int64_t k = 0; k < cols / 32; ++k) {
      const float* xb = x + i * ldx + 32 * k;
      const auto at = out.at(i, k);
      const __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16);
      const __m512 ma = _mm512_andnot_ps(sign, a), mb = _mm512_andnot_ps(sign, b);
      if ((_mm512_cmp_ps_mask(ma, largest, _CMP_LE_OQ) & _mm512_cmp_ps_mask(mb, largest, _CMP_LE_OQ)) != 0xffff) {
        int8_detail::finish_non_finite(out, at);  // a NaN or ±inf
        continue;
      }
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(ma, mb));
      const float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
      const __m512 s = _mm512_set1_ps(inv);
      const __m512i qa = quantize16(a, s), qb = quantize16(b, s);
      std::int8_t* q = out.values.data() + 32 * at;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qa));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(qb));
      int8_detail::finish_block(out, at, d, _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
    }
}

template <io::ggml_type T, int G, int... R>
inline void group_dispatch(int r, const interleaved_blocks& w, std::int64_t g, const int8_activations& a, int i0,
                           float* y, std::ptrdiff_t ldy, bool accumulate, const __mmask16* lanes,
                           std::integer_sequence<int, R...>) {
  (void)((r == R + 1 ? (group_rows<T, G, R + 1>(w, g, a, i0, y, ldy, accumulate, lanes), true) : false) || ...);
}

template <io::ggml_type T>
void multiply_type(const interleaved_blocks& w, const int8_activations& a, std::int64_t first, std::int64_t count,
                   float* y, std::ptrdiff_t ldy, bool accumulate) {
  constexpr std::int64_t n = int8_detail::group_rows;
  const std::int64_t end = (first + count + n - 1) / n;  // one past the last group
  const auto lanes = [&](std::int64_t g) {
    const std::int64_t lo = std::max<std::int64_t>(first - g * n, 0), hi = std::min<std::int64_t>(first + count - g * n, n);
    return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  };
  for (std::int64_t g = first / n; g < end; g += 2) {
    const __mmask16 l[2] = {lanes(g), g + 1 < end ? lanes(g + 1) : __mmask16{0}};
    for (int i0 = 0; i0 < a.rows; i0 += max_rows) {
      const int r = std::min(max_rows, a.rows - i0);
      if (g + 1 < end)
        group_dispatch<T, 2>(r, w, g, a, i0, y, ldy, accumulate, l, std::make_integer_sequence<int, max_rows>{});
      else
        group_dispatch<T, 1>(r, w, g, a, i0, y, ldy, accumulate, l, std::make_integer_sequence<int, max_rows>{});
    }
  }
}

}  // namespace int8_vnni
BLOCKPILOT_TARGET_END
#endif  // BLOCKPILOT_X86_KERNELS

/// Quantises rows x [rows][cols] (row i at x + i ldx; cols a multiple of 32) for products with weights
/// of `weight_type` (see int8_generic::quantize), with the kernels of `isa`; every variant gives the
/// same result.
inline void quantize_activations(cpu_isa isa, io::ggml_type weight_type, const float* x, std::ptrdiff_t ldx, int rows,
                                 std::int64_t cols, int8_activations& out) {
  if (isa == cpu_isa::best) isa = detected_cpu_isa();
#if defined(BLOCKPILOT_X86_KERNELS)
  if (isa >= cpu_isa::avx512_vnni) return int8_vnni::quantize(weight_type, x, ldx, rows, cols, out);
  if (isa >= cpu_isa::avx2) return int8_avx2::quantize(weight_type, x, ldx, rows, cols, out);
#endif
  (void)isa;
  int8_generic::quantize(weight_type, x, ldx, rows, cols, out);
}

/// y[i ldy + o] = Σ_k a[i][k] W[o][k] (or += when `accumulate`) for the a.rows activation rows
/// (quantised for w's type by quantize_activations) and o in [first, first + count), with the kernels
/// of `isa` (`best`: the detected one): AVX-512 VNNI, AVX2 (16-bit byte multiply-adds on 8 lanes: about
/// twice the instructions per product) or portable; the same result, bit for bit.
inline void multiply_rows_int8(cpu_isa isa, const interleaved_blocks& w, const int8_activations& a, std::int64_t first,
                               std::int64_t count, float* y, std::ptrdiff_t ldy, bool accumulate) {
  if (isa == cpu_isa::best) isa = detected_cpu_isa();
#if defined(BLOCKPILOT_X86_KERNELS)
  if (isa >= cpu_isa::avx512_vnni)
    return int8_detail::with_type(w.type(), [&](auto t) {
      int8_vnni::multiply_type<decltype(t)::value>(w, a, first, count, y, ldy, accumulate);
    });
  if (isa >= cpu_isa::avx2)
    return int8_detail::with_type(w.type(), [&](auto t) {
      int8_avx2::multiply_type<decltype(t)::value>(w, a, first, count, y, ldy, accumulate);
    });
#endif
  (void)isa;
  int8_generic::multiply(w, a, first, count, y, ldy, accumulate);
}

}  // namespace blockpilot::cpu_kernels
