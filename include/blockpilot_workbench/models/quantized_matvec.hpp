// Weight matrices kept in GGUF's quantised blocks (Q4_0, Q4_1, Q8_0) and their products with fp32
// vectors: a dot product per row on the blocks, written as plain loops that GCC vectorises at -O3
// -march=native, and decoding of rows to fp32 (bit-exact with io::dequantize) for multi-row products.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot::cpu_detail {

/// An IEEE half (its 16 bits in the low half of `bits`) as float; exact (every half is a float).
[[nodiscard]] inline float half_bits_to_float(std::uint32_t bits) {
#if defined(__F16C__)
  return _cvtsh_ss(static_cast<unsigned short>(bits & 0xffffu));
#else
  return io::gguf_detail::half_to_float(static_cast<std::uint16_t>(bits & 0xffffu));
#endif
}

/// xsum[b] = Σ_{j<32} x[32 b + j] for the cols / 32 blocks of x (the term of a block's offset m in
/// Σ_j (q_j d + m) x_j = d Σ_j q_j x_j + m xsum[b]). cols must be a multiple of 32.
inline void block_sums(const float* x, std::int64_t cols, float* xsum) {
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    float s[8] = {};
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 8; ++l) s[l] += x[32 * b + 8 * k + l];
    xsum[b] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  }
}

/// A [rows][cols] weight matrix in GGUF quantised blocks of 32 elements, for y = W x with fp32 x.
///
/// Q8_0 rows keep the file's bytes (34-byte blocks: fp16 scale d, 32 int8 quants q; w = q d). Q4_0 and
/// Q4_1 rows keep the file's bits, regrouped at load so that one 8-lane vector reads 8 elements' quants
/// from 8 words: a group of two blocks (64 elements) is H + 8 32-bit words,
///   Q4_1 (H = 2): word 0, 1: block 0's, block 1's fp16 scale d (low half) and fp16 offset m (high half);
///   Q4_0 (H = 1): word 0: block 0's fp16 scale d (low half), block 1's (high half);
///   word H + l: in nibble s (bits 4s .. 4s+3), the quant q of element 8 s + l (l, s in [0, 8)),
/// and w = q d + m (Q4_1) or (q - 8) d (Q4_0). Memory per element equals the file's. Q4 rows need an
/// even number of blocks (cols a multiple of 64, as every Llama width is), Q8_0 rows a whole number.
class quantized_matrix {
 public:
  /// Whether this class holds tensors of type `t`.
  [[nodiscard]] static constexpr bool supports(io::ggml_type t) {
    return t == io::ggml_type::q4_0 || t == io::ggml_type::q4_1 || t == io::ggml_type::q8_0;
  }
  /// Whether rows of `cols` elements of type `t` can be held (supported type, whole groups).
  [[nodiscard]] static constexpr bool supports(io::ggml_type t, std::int64_t cols) {
    return supports(t) && cols > 0 && cols % (t == io::ggml_type::q8_0 ? 32 : 64) == 0;
  }

  quantized_matrix() = default;
  /// No rows yet, `cols` columns of type `type`; throws `error` when `supports(type, cols)` is false.
  quantized_matrix(io::ggml_type type, std::int64_t cols) : type_(type), cols_(cols) {
    if (!supports(type, cols))
      throw error("quantized_matrix: tensor type " + io::to_string(type) + " with " + std::to_string(cols) +
                  " columns is not supported (Q4_0 and Q4_1 need a multiple of 64, Q8_0 of 32)");
    const std::int64_t blocks = cols / 32;
    row_words_ = type == io::ggml_type::q8_0 ? (blocks * 34 + 3) / 4 : blocks / 2 * group_words(type);
  }

  /// Appends `rows` rows given as the file stores them (`blocks`: rows · cols / 32 blocks of the type);
  /// throws `error` when the size does not match.
  void append(std::span<const std::byte> blocks, std::int64_t rows) {
    const std::int64_t per_row = cols_ / 32 * io::block_bytes(type_);
    if (rows < 0 || static_cast<std::int64_t>(blocks.size()) != rows * per_row)
      throw error("quantized_matrix: " + std::to_string(blocks.size()) + " bytes are not " + std::to_string(rows) +
                  " rows of " + std::to_string(cols_) + " " + io::to_string(type_) + " elements");
    const auto at = words_.size();
    words_.resize(at + static_cast<std::size_t>(rows * row_words_), 0u);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::byte* src = blocks.data() + r * per_row;
      std::uint32_t* dst = words_.data() + at + static_cast<std::size_t>(r * row_words_);
      if (type_ == io::ggml_type::q8_0)
        std::copy(src, src + per_row, reinterpret_cast<std::byte*>(dst));
      else
        regroup_q4(src, dst);
    }
    rows_ += rows;
  }

  [[nodiscard]] io::ggml_type type() const { return type_; }
  [[nodiscard]] std::int64_t rows() const { return rows_; }
  [[nodiscard]] std::int64_t cols() const { return cols_; }
  /// Bytes of the blocks held.
  [[nodiscard]] std::size_t bytes() const { return words_.size() * sizeof(std::uint32_t); }

  /// Σ_j W[r][j] x[j], x [cols]. `xsum` = block_sums(x) [cols / 32], read by Q4_1 and Q4_0 only.
  /// The weights are the file's values exactly; the sum runs in another order than a dot product of
  /// the decoded row (per block d Σ q x, plus m xsum), so results differ by float rounding only.
  [[nodiscard]] float dot(std::int64_t r, const float* x, const float* xsum) const {
    const std::uint32_t* row = words_.data() + r * row_words_;
    switch (type_) {
      case io::ggml_type::q8_0:
        return q8_0_dot(reinterpret_cast<const unsigned char*>(row), x, cols_ / 32);
      case io::ggml_type::q4_1:
        return q4_dot<true>(row, x, xsum, cols_ / 64);
      default:
        return q4_dot<false>(row, x, xsum, cols_ / 64);
    }
  }

  /// Rows [first, first + count) as fp32 into out [count][cols] row-major, bit-exact with
  /// io::dequantize of the file's blocks.
  void decode(std::int64_t first, std::int64_t count, float* out) const {
    for (std::int64_t r = first; r < first + count; ++r, out += cols_) {
      const std::uint32_t* row = words_.data() + r * row_words_;
      if (type_ == io::ggml_type::q8_0) {
        const auto* b = reinterpret_cast<const unsigned char*>(row);
        for (std::int64_t k = 0; k < cols_ / 32; ++k, b += 34) {
          const float d = half_bits_to_float(static_cast<std::uint32_t>(b[0] | b[1] << 8));
          for (int j = 0; j < 32; ++j) out[32 * k + j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
        }
        continue;
      }
      if (type_ == io::ggml_type::q4_1)
        decode_q4<true>(row, out);
      else
        decode_q4<false>(row, out);
    }
  }

 private:
  /// Words of a group of two Q4 blocks.
  static constexpr std::int64_t group_words(io::ggml_type t) { return t == io::ggml_type::q4_1 ? 10 : 9; }

  /// One row of GGUF Q4_0 / Q4_1 blocks (element j < 16 of a block in the low nibble of quant byte j,
  /// element j + 16 in its high nibble) into groups as described above.
  void regroup_q4(const std::byte* src, std::uint32_t* dst) const {
    const bool offset = type_ == io::ggml_type::q4_1;
    const std::size_t block = offset ? 20 : 18, quants = offset ? 4 : 2;
    const int header = offset ? 2 : 1;
    for (std::int64_t g = 0; g < cols_ / 64; ++g, dst += header + 8) {
      for (int h = 0; h < 2; ++h) {
        const std::byte* b = src + static_cast<std::size_t>(2 * g + h) * block;
        if (offset)
          dst[h] = io::gguf_detail::load_u16(b) | std::uint32_t{io::gguf_detail::load_u16(b + 2)} << 16;
        else
          dst[0] |= std::uint32_t{io::gguf_detail::load_u16(b)} << (16 * h);
        for (int e = 0; e < 32; ++e) {
          const unsigned byte = io::gguf_detail::u8(b + quants + (e & 15));
          const std::uint32_t q = e < 16 ? byte & 15u : byte >> 4;
          const int k = 32 * h + e;  // element of the group: nibble k / 8 of word k % 8
          dst[header + k % 8] |= q << (4 * (k / 8));
        }
      }
    }
  }

  /// One regrouped Q4 row to fp32: the expressions of io::dequantize, so the same bits.
  template <bool Offset>
  void decode_q4(const std::uint32_t* g, float* y) const {
    constexpr int header = Offset ? 2 : 1;
    for (std::int64_t p = 0; p < cols_ / 64; ++p, g += header + 8, y += 64)
      for (int h = 0; h < 2; ++h) {
        const float d = half_bits_to_float(Offset ? g[h] : g[0] >> (16 * h));
        const float m = Offset ? half_bits_to_float(g[h] >> 16) : 0.0f;
        for (int k = 0; k < 4; ++k) {
          const int s = 4 * h + k;
          for (int l = 0; l < 8; ++l) {
            const auto q = static_cast<int>((g[header + l] >> (4 * s)) & 15u);
            y[8 * s + l] = Offset ? static_cast<float>(q) * d + m : static_cast<float>(q - 8) * d;
          }
        }
      }
  }

  /// Q8_0: two blocks per iteration, 64 accumulator lanes (independent FMA chains).
  static float q8_0_dot(const unsigned char* b, const float* x, std::int64_t blocks) {
    float acc[2][32] = {};
    std::int64_t k = 0;
    for (; k + 2 <= blocks; k += 2, b += 68, x += 64) {
      const float d0 = half_bits_to_float(static_cast<std::uint32_t>(b[0] | b[1] << 8));
      const float d1 = half_bits_to_float(static_cast<std::uint32_t>(b[34] | b[35] << 8));
      for (int j = 0; j < 32; ++j) acc[0][j] += d0 * (static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * x[j]);
      for (int j = 0; j < 32; ++j)
        acc[1][j] += d1 * (static_cast<float>(static_cast<std::int8_t>(b[36 + j])) * x[32 + j]);
    }
    if (k < blocks) {
      const float d = half_bits_to_float(static_cast<std::uint32_t>(b[0] | b[1] << 8));
      for (int j = 0; j < 32; ++j) acc[0][j] += d * (static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * x[j]);
    }
    float s = 0.0f;
    for (int j = 0; j < 32; ++j) s += acc[0][j] + acc[1][j];
    return s;
  }

  /// Q4_0 / Q4_1 on groups: per block h and lane l, t = Σ_k q x over the block's 4 nibbles of word l,
  /// acc[h][l] += d t; the offsets add m · xsum per block (Q4_0: m = -8 d).
  template <bool Offset>
  static float q4_dot(const std::uint32_t* g, const float* x, const float* xsum, std::int64_t groups) {
    constexpr int header = Offset ? 2 : 1;
    float acc[2][8] = {}, offsets = 0.0f;
    for (std::int64_t p = 0; p < groups; ++p, g += header + 8, x += 64, xsum += 2) {
      const float d0 = half_bits_to_float(g[0]), d1 = half_bits_to_float(Offset ? g[1] : g[0] >> 16);
      const float m0 = Offset ? half_bits_to_float(g[0] >> 16) : -8.0f * d0;
      const float m1 = Offset ? half_bits_to_float(g[1] >> 16) : -8.0f * d1;
      offsets += m0 * xsum[0] + m1 * xsum[1];
      const std::uint32_t* w = g + header;
      for (int h = 0; h < 2; ++h) {
        const float d = h ? d1 : d0;
        const float* xh = x + 32 * h;
        for (int l = 0; l < 8; ++l) {
          float t = static_cast<float>((w[l] >> (16 * h)) & 15u) * xh[l];
          t += static_cast<float>((w[l] >> (16 * h + 4)) & 15u) * xh[8 + l];
          t += static_cast<float>((w[l] >> (16 * h + 8)) & 15u) * xh[16 + l];
          t += static_cast<float>((w[l] >> (16 * h + 12)) & 15u) * xh[24 + l];
          acc[h][l] += d * t;
        }
      }
    }
    float s = offsets;
    for (int l = 0; l < 8; ++l) s += acc[0][l] + acc[1][l];
    return s;
  }

  io::ggml_type type_ = io::ggml_type::q8_0;
  std::int64_t rows_ = 0, cols_ = 0, row_words_ = 0;
  std::vector<std::uint32_t> words_;  ///< rows_ · row_words_ words; Q8_0 rows are bytes in this storage
};

}  // namespace blockpilot::cpu_detail
