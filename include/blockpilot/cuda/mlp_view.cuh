// The predictor MLP as the device sees it: a fixed-size shape (no std::vector) and raw pointers to the
// parameters and the standardisation, laid out exactly as nn::mlp keeps them on the host.
#pragma once

#if !defined(__CUDACC__)
#error "blockpilot/cuda/mlp_view.cuh needs nvcc: host-only code includes blockpilot/blockpilot.hpp"
#endif

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "blockpilot/detail/config.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// Hidden layers a device MLP may have.
inline constexpr int mlp_max_hidden_layers = 8;

/// nn::mlp_shape without the std::vector: widths input → hidden[0] → … → hidden[hidden_count-1] → classes.
/// Same parameter layout (weight l `[out][in]` row-major, then bias l `[out]`) and residual rule (a hidden
/// layer l >= 1 adds its input when its width equals the previous one).
struct mlp_device_shape {
  int input = 0;
  int hidden_count = 0;
  int hidden[mlp_max_hidden_layers] = {};
  int classes = 0;

  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr int linear_count() const { return hidden_count + 1; }
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr int in_features(int l) const { return l == 0 ? input : hidden[l - 1]; }
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr int out_features(int l) const {
    return l < hidden_count ? hidden[l] : classes;
  }
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr bool residual(int l) const {
    return l > 0 && l < hidden_count && hidden[l] == hidden[l - 1];
  }
  /// Offset (elements) of weight l in the parameter buffer; bias l follows it.
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr std::int64_t weight_offset(int l) const {
    std::int64_t off = 0;
    for (int i = 0; i < l; ++i) off += static_cast<std::int64_t>(out_features(i)) * (in_features(i) + 1);
    return off;
  }
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr std::int64_t bias_offset(int l) const {
    return weight_offset(l) + static_cast<std::int64_t>(out_features(l)) * in_features(l);
  }
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr std::int64_t parameter_count() const {
    return weight_offset(linear_count());
  }
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr int max_hidden() const {
    int m = 0;
    for (int i = 0; i < hidden_count; ++i) m = hidden[i] > m ? hidden[i] : m;
    return m;
  }
  /// Every width >= 1 and at most mlp_max_hidden_layers hidden layers.
  [[nodiscard]] constexpr bool valid() const {
    if (input < 1 || classes < 1 || hidden_count < 0 || hidden_count > mlp_max_hidden_layers) return false;
    for (int i = 0; i < hidden_count; ++i)
      if (hidden[i] < 1) return false;
    return true;
  }
};

/// The device shape of a host shape with fields `input`, `hidden` (a range of widths) and `classes`, such as
/// nn::mlp_shape (configuration time; throws blockpilot::error when a width does not fit an int or there are
/// more than mlp_max_hidden_layers hidden layers).
template <class Shape>
[[nodiscard]] mlp_device_shape make_mlp_device_shape(const Shape& s) {
  const auto narrow = [](auto v, const char* field) {
    if (v < 1 || v > 0x7fffffff) throw error(std::string("mlp_device_shape: field '") + field + "' is out of range [1, 2^31)");
    return static_cast<int>(v);
  };
  mlp_device_shape d;
  d.input = narrow(s.input, "input");
  d.classes = narrow(s.classes, "classes");
  for (const auto h : s.hidden) {
    if (d.hidden_count == mlp_max_hidden_layers)
      throw error("mlp_device_shape: field 'hidden' has more than " + std::to_string(mlp_max_hidden_layers) + " layers");
    d.hidden[d.hidden_count++] = narrow(h, "hidden");
  }
  return d;
}

/// Weight types of a device MLP: fp32, or bf16 (the bits of nn::mlp<Eigen::bfloat16>'s parameters).
template <class W>
concept mlp_device_weight = std::is_same_v<W, float> || std::is_same_v<W, __nv_bfloat16>;

/// A predictor network in device memory. Upload nn::mlp::parameters() as they are, feature_mean() and
/// feature_std() next to them.
template <class W>
  requires mlp_device_weight<W>
struct mlp_device_view {
  const W* parameters = nullptr;       ///< device `[shape.parameter_count()]`
  const float* feature_mean = nullptr;  ///< device `[shape.input]`
  const float* feature_std = nullptr;   ///< device `[shape.input]`, each finite and > 0
  mlp_device_shape shape{};
};

}  // namespace blockpilot
