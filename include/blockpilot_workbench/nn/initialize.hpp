// A predictor MLP's starting weights for training: deterministic, from one seed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>

#include "blockpilot/nn/mlp.hpp"

namespace blockpilot::nn {

/// A double in [0, 1) from the top 53 bits of one draw (the same on every standard library).
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// Kaiming-uniform hidden weights (ReLU gain: bound sqrt(6 / fan_in)), Xavier-uniform head
/// (bound sqrt(6 / (fan_in + fan_out))), zero biases; draws from std::mt19937_64(seed) layer by
/// layer in buffer order, u = (rng() >> 11) · 2^-53, w = bound · (2u − 1). Deterministic.
template <class T>
void initialize(mlp<T>& net, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const mlp_shape& shape = net.shape();
  for (std::size_t l = 0; l < shape.linear_count(); ++l) {
    const double fan_in = static_cast<double>(shape.in_features(l));
    const double fan_out = static_cast<double>(shape.out_features(l));
    const double bound = l + 1 < shape.linear_count() ? std::sqrt(6.0 / fan_in) : std::sqrt(6.0 / (fan_in + fan_out));
    const matrix_view<T> w = net.weight(l);
    for (std::int64_t i = 0; i < w.rows; ++i)
      for (T& x : w.row(i)) x = from_float<T>(static_cast<float>(bound * (2.0 * uniform01(rng) - 1.0)));
    std::ranges::fill(net.bias(l), T{});
  }
}

}  // namespace blockpilot::nn
