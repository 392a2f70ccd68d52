// The BlockPilot predictor network: a ReLU MLP with residual hidden layers, fp32 or bf16 weights in
// one flat row-major buffer (PyTorch state-dict order), fp32 activations, Eigen-mapped CPU forward.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::nn {

/// Weight storage types of `mlp`: fp32, or bf16 with fp32 accumulation and activations.
template <class T>
concept mlp_storage = std::same_as<T, float> || std::same_as<T, Eigen::bfloat16>;

/// Exact widening of a stored weight to fp32.
[[nodiscard]] inline float to_float(float x) { return x; }
[[nodiscard]] inline float to_float(Eigen::bfloat16 x) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(x.value) << 16);
}

/// fp32 to a storage type; bf16 rounds to nearest, ties to even (NaN stays NaN).
template <mlp_storage T>
[[nodiscard]] inline T from_float(float x) {
  if constexpr (std::same_as<T, float>) return x;
  else return Eigen::bfloat16(x);
}

namespace mlp_detail {
template <class S>
std::int64_t argmax(std::span<const S> v) {
  std::int64_t best = -1;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[static_cast<std::size_t>(best)]))
      best = static_cast<std::int64_t>(i);
  return best < 0 ? 0 : best;
}
}  // namespace mlp_detail

/// Index of the largest value, ties to the smaller index; NaN never wins (all-NaN or empty → 0).
/// On logits this is the predicted class; on a tau row it is the label (ties to the smaller size).
[[nodiscard]] inline std::int64_t argmax(std::span<const float> v) { return mlp_detail::argmax(v); }
[[nodiscard]] inline std::int64_t argmax(std::span<const double> v) { return mlp_detail::argmax(v); }

/// Layer widths. Linear layer l (0 <= l <= hidden.size()) maps in_features(l) → out_features(l); the
/// last one is the output head. Hidden layer l >= 1 adds its input (residual) when its width equals
/// the previous width.
struct mlp_shape {
  std::int64_t input = 0;
  std::vector<std::int64_t> hidden = {2048, 2048};
  std::int64_t classes = 5;

  [[nodiscard]] std::size_t linear_count() const { return hidden.size() + 1; }
  [[nodiscard]] std::int64_t in_features(std::size_t l) const { return l == 0 ? input : hidden[l - 1]; }
  [[nodiscard]] std::int64_t out_features(std::size_t l) const { return l < hidden.size() ? hidden[l] : classes; }
  /// Whether hidden layer l adds its input to its output.
  [[nodiscard]] bool residual(std::size_t l) const { return l > 0 && l < hidden.size() && hidden[l] == hidden[l - 1]; }
  /// Offset of weight l `[out][in]` in the flat parameter buffer; bias l `[out]` follows it.
  [[nodiscard]] std::int64_t weight_offset(std::size_t l) const {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < l; ++i) off += out_features(i) * (in_features(i) + 1);
    return off;
  }
  [[nodiscard]] std::int64_t bias_offset(std::size_t l) const {
    return weight_offset(l) + out_features(l) * in_features(l);
  }
  [[nodiscard]] std::int64_t parameter_count() const { return weight_offset(linear_count()); }
  [[nodiscard]] std::int64_t max_hidden() const {
    return hidden.empty() ? 0 : *std::max_element(hidden.begin(), hidden.end());
  }
  /// Throws `error` naming the field when a width is < 1 or the parameter count overflows.
  void validate() const {
    constexpr std::int64_t limit = std::int64_t{1} << 40;
    const auto check = [](std::int64_t v, const std::string& field) {
      if (v < 1 || v > (std::int64_t{1} << 31))
        throw error("mlp_shape: field '" + field + "' is " + std::to_string(v) + ", must be in [1, 2^31]");
    };
    check(input, "input");
    for (std::size_t i = 0; i < hidden.size(); ++i) check(hidden[i], "hidden[" + std::to_string(i) + "]");
    check(classes, "classes");
    std::int64_t total = 0;
    for (std::size_t l = 0; l < linear_count(); ++l) {
      total += out_features(l) * (in_features(l) + 1);
      if (total > limit) throw error("mlp_shape: the parameter count exceeds 2^40 (field 'hidden')");
    }
  }
  friend bool operator==(const mlp_shape&, const mlp_shape&) = default;
};

/// The predictor MLP with its input standardisation x' = (x − feature_mean) / feature_std:
///   a_1 = ReLU(W_0 x' + b_0); a_l = [a_{l−1} +] ReLU(W_{l−1} a_{l−1} + b_{l−1}); logits = W_o a + b_o.
/// Parameters (weights and biases, type T) live in one host buffer in the order
/// W_0 [out][in], b_0 [out], W_1, b_1, …, W_o, b_o (`mlp_shape::weight_offset`).
template <mlp_storage T>
class mlp {
 public:
  using weight_type = T;
  /// Rows of a batch processed together; the workspace holds activations of this many rows.
  static constexpr std::int64_t row_tile = 64;
  /// Output × input tile of one Eigen product (keeps Eigen's packing buffers on the stack).
  static constexpr std::int64_t out_tile = 64;
  static constexpr std::int64_t in_tile = 256;

  mlp() = default;
  /// Zero parameters, identity standardisation; throws `error` for an invalid shape.
  explicit mlp(mlp_shape shape) : shape_(std::move(shape)) {
    shape_.validate();
    params_.assign(static_cast<std::size_t>(shape_.parameter_count()), T{});
    mean_.assign(static_cast<std::size_t>(shape_.input), 0.0f);
    std_.assign(mean_.size(), 1.0f);
    inv_std_ = std_;
  }
  /// Converts the storage type (fp32 → bf16 rounds to nearest even); standardisation is copied.
  template <mlp_storage U>
  explicit mlp(const mlp<U>& other)
      : shape_(other.shape()),
        mean_(other.feature_mean().begin(), other.feature_mean().end()),
        std_(other.feature_std().begin(), other.feature_std().end()),
        inv_std_(std_.size()) {
    const auto src = other.parameters();
    params_.resize(src.size());
    std::transform(src.begin(), src.end(), params_.begin(), [](U v) { return from_float<T>(to_float(v)); });
    std::transform(std_.begin(), std_.end(), inv_std_.begin(), [](float s) { return 1.0f / s; });
  }

  [[nodiscard]] const mlp_shape& shape() const { return shape_; }
  /// All parameters, `[parameter_count]` in the order above.
  [[nodiscard]] std::span<T> parameters() { return params_; }
  [[nodiscard]] std::span<const T> parameters() const { return params_; }
  /// Weight of linear layer l, `[out_features(l)][in_features(l)]` row-major.
  [[nodiscard]] matrix_view<T> weight(std::size_t l) {
    return {ptr(shape_.weight_offset(l)), shape_.out_features(l), shape_.in_features(l)};
  }
  [[nodiscard]] matrix_view<const T> weight(std::size_t l) const {
    return {ptr(shape_.weight_offset(l)), shape_.out_features(l), shape_.in_features(l)};
  }
  /// Bias of linear layer l, `[out_features(l)]`.
  [[nodiscard]] std::span<T> bias(std::size_t l) {
    return {ptr(shape_.bias_offset(l)), static_cast<std::size_t>(shape_.out_features(l))};
  }
  [[nodiscard]] std::span<const T> bias(std::size_t l) const {
    return {ptr(shape_.bias_offset(l)), static_cast<std::size_t>(shape_.out_features(l))};
  }
  /// Bytes of all parameters (what one forward reads).
  [[nodiscard]] std::int64_t parameter_bytes() const { return static_cast<std::int64_t>(params_.size() * sizeof(T)); }

  /// Standardisation, `[input]` each.
  [[nodiscard]] std::span<const float> feature_mean() const { return mean_; }
  [[nodiscard]] std::span<const float> feature_std() const { return std_; }
  /// Sets the standardisation; throws `error` unless both have `input` entries, means are finite
  /// and standard deviations finite and > 0 with a finite inverse.
  void set_standardization(std::span<const float> mean, std::span<const float> stddev) {
    if (mean.size() != mean_.size() || stddev.size() != mean_.size())
      throw error("mlp: field 'feature_mean'/'feature_std' must have " + std::to_string(mean_.size()) + " entries");
    for (std::size_t i = 0; i < mean.size(); ++i) {
      if (!std::isfinite(mean[i]))
        throw error("mlp: field 'feature_mean' entry " + std::to_string(i) + " is not finite");
      if (!std::isfinite(stddev[i]) || !(stddev[i] > 0.0f) || !std::isfinite(1.0f / stddev[i]))
        throw error("mlp: field 'feature_std' entry " + std::to_string(i) + " must be finite and > 0, with a finite inverse");
    }
    std::ranges::copy(mean, mean_.begin());
    std::ranges::copy(stddev, std_.begin());
    std::ranges::transform(std_, inv_std_.begin(), [](float s) { return 1.0f / s; });
  }

  /// Workspace floats `forward` needs for `batch` rows (arithmetic on the shape; independent of
  /// batch above `row_tile`): two activation buffers, the standardised input (a whole row, or a
  /// tile of rows), and for bf16 one widened weight tile.
  [[nodiscard]] std::int64_t workspace_size(std::int64_t batch) const {
    const std::int64_t rows = std::clamp<std::int64_t>(batch, 0, row_tile);
    if (rows == 0) return 0;
    return 2 * rows * shape_.max_hidden() + std::max(shape_.input, rows * in_tile) +
           (std::same_as<T, float> ? 0 : out_tile * in_tile);
  }

  /// logits `[batch][classes]` = network(x `[batch][input]`), host memory, fp32 accumulation.
  /// Rows go through in tiles of `row_tile`; a one-row tile is a matrix-vector product over whole
  /// weight rows (bandwidth-bound), larger tiles are Eigen matrix products. Does not allocate.
  /// Inputs should be finite (non-finite inputs give non-finite logits). Returns invalid_argument
  /// on shape mismatch or an empty model, workspace_too_small when workspace has fewer than
  /// workspace_size(batch) floats.
  [[nodiscard]] status forward(matrix_view<const float> x, matrix_view<float> logits,
                               std::span<float> workspace) const {
    if (params_.empty() || x.cols != shape_.input || logits.cols != shape_.classes || logits.rows != x.rows ||
        x.rows < 0 || x.row_stride < x.cols || logits.row_stride < logits.cols ||
        (x.rows > 0 && (!x.data || !logits.data)))
      return status::invalid_argument;
    if (static_cast<std::int64_t>(workspace.size()) < workspace_size(x.rows)) return status::workspace_too_small;
    for (std::int64_t r0 = 0; r0 < x.rows; r0 += row_tile) {
      const std::int64_t rows = std::min(row_tile, x.rows - r0);
      forward_tile(x.rows_slice(r0, rows), logits.rows_slice(r0, rows), workspace);
    }
    return status::success;
  }
  /// One row: logits `[classes]` = network(x `[input]`).
  [[nodiscard]] status forward(std::span<const float> x, std::span<float> logits, std::span<float> workspace) const {
    return forward(matrix_view<const float>(x.data(), 1, static_cast<std::int64_t>(x.size())),
                   matrix_view<float>(logits.data(), 1, static_cast<std::int64_t>(logits.size())), workspace);
  }

 private:
  using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using const_map = Eigen::Map<const row_major, Eigen::Unaligned, Eigen::OuterStride<>>;
  using mut_map = Eigen::Map<row_major, Eigen::Unaligned, Eigen::OuterStride<>>;
  using row_array = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;

  T* ptr(std::int64_t off) { return params_.data() + off; }
  const T* ptr(std::int64_t off) const { return params_.data() + off; }
  /// All layers for at most row_tile rows; activations ping-pong between two workspace buffers.
  void forward_tile(matrix_view<const float> x, matrix_view<float> logits, std::span<float> ws) const {
    const std::int64_t rows = x.rows, width = shape_.max_hidden();
    float* act[2] = {ws.data(), ws.data() + rows * width};
    float* scratch = ws.data() + 2 * rows * width;
    matrix_view<const float> in = x;
    for (std::size_t l = 0; l < shape_.linear_count(); ++l) {
      const bool head = l + 1 == shape_.linear_count();
      const matrix_view<float> out = head ? logits : matrix_view<float>(act[l % 2], rows, shape_.out_features(l));
      linear(l, in, out, scratch);
      if (!head) {
        mut_map o(out.data, rows, out.cols, Eigen::OuterStride<>(out.row_stride));
        o = o.cwiseMax(0.0f);
        if (shape_.residual(l)) o += const_map(in.data, rows, in.cols, Eigen::OuterStride<>(in.row_stride));
        in = out;
      }
    }
  }

  /// out = in · W_l^T + b_l; layer 0 first standardises its input into scratch.
  void linear(std::size_t l, matrix_view<const float> in, matrix_view<float> out, float* scratch) const {
    const std::int64_t rows = in.rows, n_in = in.cols, n_out = out.cols;
    const T* w = ptr(shape_.weight_offset(l));
    const T* b = ptr(shape_.bias_offset(l));
    if (rows == 1) {
      const float* x = in.data;
      if (l == 0) {
        standardize(in.data, 1, n_in, in.row_stride, 0, scratch);
        x = scratch;
      }
      if constexpr (std::same_as<T, float>)
        Eigen::Map<Eigen::VectorXf>(out.data, n_out).noalias() =
            Eigen::Map<const row_major>(w, n_out, n_in) * Eigen::Map<const Eigen::VectorXf>(x, n_in);
      else gemv_bf16(w, x, out.data, n_out, n_in);
      for (std::int64_t c = 0; c < n_out; ++c) out.data[c] += to_float(b[c]);
      return;
    }
    // Tiles over the input (outer) and output (inner) dimensions keep each Eigen product at most
    // row_tile × out_tile × in_tile, so its packing buffers fit Eigen's stack allocation limit.
    mut_map o(out.data, rows, n_out, Eigen::OuterStride<>(out.row_stride));
    for (std::int64_t c = 0; c < n_out; ++c) o.col(c).setConstant(to_float(b[c]));
    float* x_tile = scratch;
    float* w_tile = scratch + std::max(shape_.input, rows * in_tile);
    for (std::int64_t k0 = 0; k0 < n_in; k0 += in_tile) {
      const std::int64_t kc = std::min(in_tile, n_in - k0);
      const float* xp = in.data + k0;
      std::int64_t x_stride = in.row_stride;
      if (l == 0) {
        standardize(in.data, rows, kc, in.row_stride, k0, x_tile);
        xp = x_tile;
        x_stride = kc;
      }
      const_map xb(xp, rows, kc, Eigen::OuterStride<>(x_stride));
      for (std::int64_t n0 = 0; n0 < n_out; n0 += out_tile) {
        const std::int64_t nc = std::min(out_tile, n_out - n0);
        const T* wp = w + n0 * n_in + k0;
        if constexpr (std::same_as<T, float>) {
          o.middleCols(n0, nc).noalias() += xb * const_map(wp, nc, kc, Eigen::OuterStride<>(n_in)).transpose();
        } else {
          for (std::int64_t r = 0; r < nc; ++r)
            for (std::int64_t c = 0; c < kc; ++c) w_tile[r * kc + c] = to_float(wp[r * n_in + c]);
          o.middleCols(n0, nc).noalias() += xb * const_map(w_tile, nc, kc, Eigen::OuterStride<>(kc)).transpose();
        }
      }
    }
  }

  /// dst `[rows][cols]` = (x[:, k0 : k0 + cols] − mean) / std, packed.
  void standardize(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t stride, std::int64_t k0,
                   float* dst) const {
    mut_map(dst, rows, cols, Eigen::OuterStride<>(cols)).array() =
        (const_map(x + k0, rows, cols, Eigen::OuterStride<>(stride)).array().rowwise() -
         row_array(mean_.data() + k0, cols))
            .rowwise() *
        row_array(inv_std_.data() + k0, cols);
  }

  /// y `[n_out]` = W `[n_out][n_in]` (bf16) · x `[n_in]`, fusing the widening into the dot products
  /// (no widened copy: one pass over the weights). Four rows at a time share each load of x; each
  /// row keeps 16 fp32 partial sums (vector registers once vectorised), reduced in a fixed order.
  static void gemv_bf16(const Eigen::bfloat16* w, const float* x, float* y, std::int64_t n_out, std::int64_t n_in) {
    std::int64_t r = 0;
    for (; r + 4 <= n_out; r += 4) gemv_rows<4>(w + r * n_in, x, y + r, n_in);
    for (; r < n_out; ++r) gemv_rows<1>(w + r * n_in, x, y + r, n_in);
  }
  template <int R>
  static void gemv_rows(const Eigen::bfloat16* w, const float* x, float* y, std::int64_t n) {
    constexpr std::int64_t lanes = 16;
    float acc[static_cast<std::size_t>(R)][lanes] = {};
    const std::int64_t full = n / lanes * lanes;
    for (std::int64_t k = 0; k < full; k += lanes)
      for (int q = 0; q < R; ++q)
        for (std::int64_t j = 0; j < lanes; ++j) acc[q][j] += to_float(w[q * n + k + j]) * x[k + j];
    for (int q = 0; q < R; ++q) {
      float sum = 0.0f;
      for (std::int64_t j = 0; j < lanes; ++j) sum += acc[q][j];
      for (std::int64_t k = full; k < n; ++k) sum += to_float(w[q * n + k]) * x[k];
      y[q] = sum;
    }
  }

  mlp_shape shape_{};
  std::vector<T> params_;
  std::vector<float> mean_, std_, inv_std_;
};

}  // namespace blockpilot::nn
