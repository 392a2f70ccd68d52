// Basic vocabulary types: token ids and non-owning row-major matrix views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace blockpilot {

/// A token id of the target vocabulary (0 <= id < vocab_size).
using token_id = std::int32_t;

/// The largest block size the decoder, predictor files, the refining policy's windows and the
/// blockpilot program accept (a block of b tokens asks the verifier for b rows of logits); the
/// acceptance rules' batched layouts are sized by it on every backend.
inline constexpr int block_size_limit = 256;

/// True when a predictor's window of sizes B-k..B+k lies within 1..block_size_limit.
[[nodiscard]] constexpr bool block_size_window_fits(std::int64_t training_block_size, std::int64_t window_k) {
  return training_block_size >= 1 && training_block_size <= block_size_limit && window_k >= 0 &&
         window_k < training_block_size && training_block_size + window_k <= block_size_limit;
}

/// A non-owning view of a row-major matrix `[rows][cols]` with a row stride in elements.
/// Memory space is the caller's (host for the CPU backend, device for the CUDA backend).
template <class T>
struct matrix_view {
  T* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;  ///< elements between row starts; cols when packed

  constexpr matrix_view() = default;
  constexpr matrix_view(T* d, std::int64_t r, std::int64_t c) : data(d), rows(r), cols(c), row_stride(c) {}
  constexpr matrix_view(T* d, std::int64_t r, std::int64_t c, std::int64_t stride)
      : data(d), rows(r), cols(c), row_stride(stride) {}
  /// Views of mutable data convert to views of const data.
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  constexpr matrix_view(const matrix_view<U>& o) : data(o.data), rows(o.rows), cols(o.cols), row_stride(o.row_stride) {}

  [[nodiscard]] constexpr bool empty() const { return rows == 0 || cols == 0; }
  [[nodiscard]] constexpr std::span<T> row(std::int64_t i) const {
    return {data + i * row_stride, static_cast<std::size_t>(cols)};
  }
  /// Rows [first, first + count).
  [[nodiscard]] constexpr matrix_view rows_slice(std::int64_t first, std::int64_t count) const {
    return {data + first * row_stride, count, cols, row_stride};
  }
};

}  // namespace blockpilot
