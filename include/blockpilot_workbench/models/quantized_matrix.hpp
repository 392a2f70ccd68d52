// Weight matrices kept in GGUF's quantised blocks (Q4_0, Q4_1, Q8_0), byte for byte as the file holds
// them: products with fp32 activations run on the blocks (kernels/weight_products.hpp), and rows
// decode to fp32 bit-exactly with io::dequantize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/status.hpp"
#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"

namespace blockpilot::cpu_detail {

/// A [rows][cols] weight matrix in GGUF quantised blocks of 32 elements (Q4_0: 18 bytes, Q4_1: 20,
/// Q8_0: 34), each row its blocks in order, as in the file.
class quantized_matrix {
 public:
  /// Whether this class holds tensors of type `t`.
  [[nodiscard]] static constexpr bool supports(io::ggml_type t) {
    return t == io::ggml_type::q4_0 || t == io::ggml_type::q4_1 || t == io::ggml_type::q8_0;
  }
  /// Whether rows of `cols` elements of type `t` can be held (supported type, whole blocks).
  [[nodiscard]] static constexpr bool supports(io::ggml_type t, std::int64_t cols) {
    return supports(t) && cols > 0 && cols % 32 == 0;
  }

  quantized_matrix() = default;
  /// No rows yet, `cols` columns of type `type`; throws `error` when `supports(type, cols)` is false.
  quantized_matrix(io::ggml_type type, std::int64_t cols) : type_(type), cols_(cols) {
    if (!supports(type, cols))
      throw error("quantized_matrix: tensor type " + io::to_string(type) + " with " + std::to_string(cols) +
                  " columns is not supported (Q4_0, Q4_1 and Q8_0 rows of a multiple of 32 elements)");
    row_bytes_ = static_cast<std::size_t>(cols / 32) * io::block_bytes(type);
  }

  /// Appends `rows` rows given as the file stores them (`blocks`: rows · cols / 32 blocks of the type);
  /// throws `error` when the size does not match.
  void append(std::span<const std::byte> blocks, std::int64_t rows) {
    if (rows < 0 || blocks.size() != static_cast<std::size_t>(rows) * row_bytes_)
      throw error("quantized_matrix: " + std::to_string(blocks.size()) + " bytes are not " + std::to_string(rows) +
                  " rows of " + std::to_string(cols_) + " " + io::to_string(type_) + " elements");
    bytes_.insert(bytes_.end(), blocks.begin(), blocks.end());
    rows_ += rows;
  }

  [[nodiscard]] io::ggml_type type() const { return type_; }
  [[nodiscard]] std::int64_t rows() const { return rows_; }
  [[nodiscard]] std::int64_t cols() const { return cols_; }
  /// Bytes of the blocks held.
  [[nodiscard]] std::size_t bytes() const { return bytes_.size(); }
  /// The rows for the weight-product kernels.
  [[nodiscard]] cpu_kernels::weight_rows_view view() const { return {type_, bytes_.data(), row_bytes_, cols_}; }

  /// Rows [first, first + count) as fp32 into out [count][cols] row-major, bit-exact with
  /// io::dequantize of the file's blocks.
  void decode(std::int64_t first, std::int64_t count, float* out) const {
    io::dequantize(type_, std::span(bytes_).subspan(static_cast<std::size_t>(first) * row_bytes_,
                                                    static_cast<std::size_t>(count) * row_bytes_),
                   std::span(out, static_cast<std::size_t>(count * cols_)));
  }

 private:
  io::ggml_type type_ = io::ggml_type::q8_0;
  std::int64_t rows_ = 0, cols_ = 0;
  std::size_t row_bytes_ = 0;
  std::vector<std::byte> bytes_;  ///< rows_ · row_bytes_
};

}  // namespace blockpilot::cpu_detail
