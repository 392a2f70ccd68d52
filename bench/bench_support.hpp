// Pieces shared by the benchmarks: the bandwidth-bound read of a row (the physical reference of a
// feature pass) and one predictor decision for a batch (forward + argmax).
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "blockpilot/nn/mlp.hpp"

namespace blockpilot::bench {

/// `count` logits drawn from N(0, sd²) with a fixed seed.
inline std::vector<float> normal_logits(std::size_t count, float sd, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> r(count);
  for (float& x : r) x = d(gen);
  return r;
}

/// One read of a row at load bandwidth: 32 independent float lanes, so neither the add latency nor
/// a single dependency chain limits it.
inline float bandwidth_sum(std::span<const float> r) {
  std::array<float, 32> acc{};
  for (std::size_t i = 0; i + 32 <= r.size(); i += 32)
    for (std::size_t l = 0; l < 32; ++l) acc[l] += r[i + l];
  float s = 0.0f;
  for (const float a : acc) s += a;
  return s;
}

/// Forward + argmax of `x` `[batch][input]`: the predictor's decisions, written to `choice`.
template <class T>
status decide(const nn::mlp<T>& m, matrix_view<const float> x, std::vector<float>& logits, std::vector<float>& workspace,
              std::vector<std::int64_t>& choice) {
  const std::int64_t c = m.shape().classes;
  if (const status s = m.forward(x, matrix_view<float>(logits.data(), x.rows, c), workspace); s != status::success) return s;
  for (std::int64_t r = 0; r < x.rows; ++r)
    choice[static_cast<std::size_t>(r)] = nn::argmax(std::span<const float>(logits.data() + r * c, static_cast<std::size_t>(c)));
  return status::success;
}

}  // namespace blockpilot::bench
