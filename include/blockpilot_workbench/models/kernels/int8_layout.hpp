// The operands of the int8 weight products (int8_products.hpp): Q4_0 / Q4_1 / Q8_0 weights regrouped
// 16 rows at a time (`interleaved_blocks`, the file's bytes in another order), and activations
// quantised to int8 per block of 32 (`int8_activations`).
//
// For each block k of a group: the 16 rows' scales (halves: d, then Q4_1's m), then their quants in
// chunks of 64 bytes, chunk t holding bytes 4t..4t+3 of every row's block (lane r = row r; Q4: the
// nibbles, element j low and j + 16 high; Q8_0: the value + 128). One AVX-512 VNNI vpdpbusd of a chunk
// with 4 activation bytes broadcast then adds 4 products to each of the 16 rows' sums.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "blockpilot/status.hpp"
#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/kernels/huge_pages.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"
#include "blockpilot_workbench/models/quantized_matrix.hpp"

namespace blockpilot::cpu_kernels {

namespace int8_detail {
constexpr int group_rows = 16;  ///< weight rows interleaved together (one per 32-bit lane of a 512-bit vector)
/// Bytes of one row's quants in a block: the nibbles of Q4 (element j low, j + 16 high), Q8_0's values.
constexpr std::size_t quant_bytes(io::ggml_type t) { return t == io::ggml_type::q8_0 ? 32 : 16; }
/// Bytes of one row's scales in a block (halves: d, and Q4_1's m).
constexpr std::size_t scale_bytes(io::ggml_type t) { return t == io::ggml_type::q4_1 ? 4 : 2; }
/// Bytes of one block of a group of 16 rows: their scales, then their quants (the file's 16 blocks).
constexpr std::size_t tile_bytes(io::ggml_type t) { return group_rows * (scale_bytes(t) + quant_bytes(t)); }
/// Offset in a tile of half h (0: d, 1: Q4_1's m) of row `lane`'s scales.
constexpr std::size_t scale_offset(std::size_t lane, std::size_t h) { return 2 * (h * group_rows + lane); }
/// Offset in a tile of byte j of row `lane`'s quants (chunk j / 4, 4 bytes a lane).
constexpr std::size_t quant_offset(io::ggml_type t, std::size_t lane, std::size_t j) {
  return group_rows * scale_bytes(t) + 64 * (j / 4) + 4 * lane + j % 4;
}
/// The zero point z subtracted from the unsigned quants.
constexpr int zero_point(io::ggml_type t) {
  return t == io::ggml_type::q4_0 ? 8 : t == io::ggml_type::q8_0 ? 128 : 0;
}
}  // namespace int8_detail

/// A [rows][cols] Q4_0 / Q4_1 / Q8_0 matrix regrouped for the int8 kernels (see the file comment): the
/// same bytes as the file's blocks (rows padded with zeros to a multiple of 16), rows decode to fp32
/// bit-exactly with io::dequantize.
class interleaved_blocks {
 public:
  /// Whether rows of `cols` elements of type `t` can be held (those of quantized_matrix).
  [[nodiscard]] static constexpr bool supports(io::ggml_type t, std::int64_t cols) {
    return cpu_detail::quantized_matrix::supports(t, cols);
  }

  interleaved_blocks() = default;
  /// The rows of `w` (blocks as the file holds them) regrouped; throws `error` when `supports` is false.
  explicit interleaved_blocks(const weight_rows_view& w, std::int64_t rows) : type_(w.type), rows_(rows), cols_(w.cols) {
    using namespace int8_detail;
    if (!supports(w.type, w.cols) || rows < 0)
      throw error("interleaved_blocks: tensor type " + io::to_string(w.type) + " with " + std::to_string(w.cols) +
                  " columns is not supported (Q4_0, Q4_1 and Q8_0 rows of a multiple of 32 elements)");
    const std::size_t sb = scale_bytes(type_), bb = sb + quant_bytes(type_);
    bytes_.assign(static_cast<std::size_t>(groups() * blocks()) * tile_bytes(), std::byte{0});
    for (std::int64_t o = 0; o < rows; ++o)
      for (std::int64_t k = 0; k < blocks(); ++k) {
        const std::byte* src = w.data + static_cast<std::size_t>(o) * w.row_bytes + static_cast<std::size_t>(k) * bb;
        std::byte* tile = bytes_.data() + offset(o / group_rows, k);
        const auto lane = static_cast<std::size_t>(o % group_rows);
        for (std::size_t h = 0; h < sb / 2; ++h) std::memcpy(tile + scale_offset(lane, h), src + 2 * h, 2);
        for (std::size_t j = 0; j < quant_bytes(type_); ++j) tile[quant_offset(type_, lane, j)] = flip(src[sb + j]);
      }
  }

  [[nodiscard]] io::ggml_type type() const { return type_; }
  [[nodiscard]] std::int64_t rows() const { return rows_; }
  [[nodiscard]] std::int64_t cols() const { return cols_; }
  [[nodiscard]] std::int64_t blocks() const { return cols_ / 32; }
  [[nodiscard]] std::int64_t groups() const { return (rows_ + int8_detail::group_rows - 1) / int8_detail::group_rows; }
  /// Bytes held (the file's bytes of the rows, and the padding of the last group).
  [[nodiscard]] std::size_t bytes() const { return bytes_.size(); }
  /// Bytes of one block of a group: scales, then quants.
  [[nodiscard]] std::size_t tile_bytes() const { return int8_detail::tile_bytes(type_); }
  /// Block k of group `group`.
  [[nodiscard]] const std::byte* tile(std::int64_t group, std::int64_t k) const { return bytes_.data() + offset(group, k); }

  /// Bytes of one row as the file stores it (its blocks in order).
  [[nodiscard]] std::size_t row_bytes() const { return static_cast<std::size_t>(blocks()) * block_bytes(); }
  /// Row r's blocks as the file stores them into out [row_bytes()].
  void row_blocks(std::int64_t r, std::byte* out) const {
    for (std::int64_t k = 0; k < blocks(); ++k) file_block(r, k, out + static_cast<std::size_t>(k) * block_bytes());
  }
  /// Row r as fp32 into out [cols], bit-exact with io::dequantize of the file's blocks.
  void decode(std::int64_t r, float* out) const {
    std::byte block[34];  // the largest block (Q8_0)
    for (std::int64_t k = 0; k < blocks(); ++k) {
      file_block(r, k, block);
      io::dequantize(type_, std::span<const std::byte>(block, block_bytes()), std::span(out + 32 * k, 32));
    }
  }

 private:
  [[nodiscard]] std::size_t offset(std::int64_t group, std::int64_t k) const {
    return static_cast<std::size_t>(group * blocks() + k) * tile_bytes();
  }
  [[nodiscard]] std::size_t block_bytes() const { return int8_detail::scale_bytes(type_) + int8_detail::quant_bytes(type_); }
  /// Block k of row r as the file stores it into out [block_bytes()].
  void file_block(std::int64_t r, std::int64_t k, std::byte* out) const {
    using namespace int8_detail;
    const std::size_t sb = scale_bytes(type_);
    const auto lane = static_cast<std::size_t>(r % group_rows);
    const std::byte* t = tile(r / group_rows, k);
    for (std::size_t h = 0; h < sb / 2; ++h) std::memcpy(out + 2 * h, t + scale_offset(lane, h), 2);
    for (std::size_t j = 0; j < quant_bytes(type_); ++j) out[sb + j] = flip(t[quant_offset(type_, lane, j)]);
  }
  /// A quant byte between the file's form and the tiles' (Q8_0: the int8 value + 128, both ways).
  [[nodiscard]] std::byte flip(std::byte b) const { return type_ == io::ggml_type::q8_0 ? b ^ std::byte{0x80} : b; }

  io::ggml_type type_ = io::ggml_type::q8_0;
  std::int64_t rows_ = 0, cols_ = 0;
  std::vector<std::byte, huge_page_allocator<std::byte>> bytes_;
};

/// Activation rows quantised for the int8 kernels, block-major (a block's rows side by side, so that a
/// kernel reaches every row of block k from one pointer); buffers only grow.
struct int8_activations {
  io::ggml_type weight_type = io::ggml_type::q8_0;
  int rows = 0;
  std::int64_t cols = 0;
  std::vector<std::int8_t> values;     ///< [cols / 32][rows][32]
  std::vector<float> scales;           ///< [cols / 32][rows]: d of each block
  std::vector<std::int32_t> zero_offsets; ///< [cols / 32][rows]: −z Σ q of each block (z: the weights' zero point)
  std::vector<float> scaled_sums;      ///< [cols / 32][rows]: d Σ q of each block

  /// Index of row i's block k in scales, zero_offsets and scaled_sums (× 32: its values).
  [[nodiscard]] std::size_t at(int i, std::int64_t k) const { return static_cast<std::size_t>(k * rows + i); }
  /// Element j of row i.
  [[nodiscard]] std::int8_t value(int i, std::int64_t j) const { return values[32 * at(i, j / 32) + static_cast<std::size_t>(j % 32)]; }

  /// Room for `rows` rows of `cols` elements.
  void reserve(int rows_, std::int64_t cols_) {
    const auto n = static_cast<std::size_t>(rows_ * cols_), blocks = n / 32;
    if (values.size() < n) values.resize(n);
    if (scales.size() < blocks) {
      scales.resize(blocks);
      zero_offsets.resize(blocks);
      scaled_sums.resize(blocks);
    }
  }
};

namespace int8_detail {
/// Sets the sizes of `out` for `rows` rows of `cols` elements quantised for `weight_type`.
inline void start(io::ggml_type weight_type, int rows, std::int64_t cols, int8_activations& out) {
  out.reserve(rows, cols);
  out.weight_type = weight_type;
  out.rows = rows;
  out.cols = cols;
}
/// f(std::integral_constant<io::ggml_type, T>{}) for the weight type t (Q4_0, Q4_1 or Q8_0).
template <class F>
void with_type(io::ggml_type t, F&& f) {
  using T = io::ggml_type;
  if (t == T::q4_0) return f(std::integral_constant<T, T::q4_0>{});
  if (t == T::q4_1) return f(std::integral_constant<T, T::q4_1>{});
  f(std::integral_constant<T, T::q8_0>{});
}
/// What every variant stores for a block of scale d whose quants sum to `sum`.
inline void finish_block(int8_activations& out, std::size_t at, float d, int sum) {
  out.scales[at] = d;
  out.zero_offsets[at] = -zero_point(out.weight_type) * sum;
  out.scaled_sums[at] = d * static_cast<float>(sum);
}
/// A block holding a NaN or an infinity: q = 0 and d = NaN, so that every product it enters is NaN.
inline void finish_non_finite(int8_activations& out, std::size_t at) {
  std::fill_n(out.values.begin() + static_cast<std::ptrdiff_t>(32 * at), 32, std::int8_t{0});
  finish_block(out, at, std::numeric_limits<float>::quiet_NaN(), 0);
}
}  // namespace int8_detail

}  // namespace blockpilot::cpu_kernels
