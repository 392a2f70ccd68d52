// Softmax weights as 40-bit fixed-point integers, bit-identical on host and device: integer sums
// do not depend on summation order, so CPU and CUDA sample the same token from the same uniform.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "blockpilot/detail/config.hpp"

namespace blockpilot::detail {

/// Temperatures below this are argmax (the reference's `T < 1e-5`).
inline constexpr float greedy_temperature = 1e-5f;

/// A temperature the acceptance rules and the decoder accept: finite and >= 0 (NaN fails).
BLOCKPILOT_HOST_DEVICE constexpr bool valid_sampling_temperature(float t) noexcept {
  return t >= 0.0f && t <= std::numeric_limits<float>::max();
}

/// Fixed-point scale: a weight of 1 (the row maximum) is 2^40. A vocabulary of up to 2^23
/// entries sums without overflow; tokens more than ~27.7 nats below the maximum get weight 0.
inline constexpr int weight_bits = 40;
inline constexpr float weight_scale = 1099511627776.0f;  // 2^40
/// The largest vocabulary the sampling rules take, on every backend (the CUDA kernels' limit, in the
/// bound above).
inline constexpr std::int64_t max_sampling_vocab = std::int64_t{1} << 22;

BLOCKPILOT_HOST_DEVICE inline float float_from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

/// e^x for x <= 0 (0 below -87), every operation written out (explicit fma, rint, exponent bits)
/// so that host and device compute the same float. Error below 2 ulp.
BLOCKPILOT_HOST_DEVICE inline float exp_nonpositive(float x) {
  if (!(x > -87.0f)) return 0.0f;
  const float k = rintf(x * 1.44269504f);
  float r = fmaf(-k, 0.693145751953125f, x);
  r = fmaf(-k, 1.428606765330187e-06f, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return p * float_from_bits(static_cast<std::uint32_t>(static_cast<int>(k) + 127) << 23);
}

/// a / b rounded to nearest on every backend: the device's `/` is approximate when the engine builds
/// with --use_fast_math or -prec-div=false.
BLOCKPILOT_HOST_DEVICE inline float divide_rounded(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// The unnormalised weight of a logit in fixed point: floor(2^40 · e^((x − max) / T)).
BLOCKPILOT_HOST_DEVICE inline std::uint64_t fixed_point_weight(float logit, float max_logit, float temperature) {
  return static_cast<std::uint64_t>(exp_nonpositive(divide_rounded(logit - max_logit, temperature)) * weight_scale);
}

/// floor(r · total / 2^64): maps 64 uniform bits to a threshold in [0, total).
BLOCKPILOT_HOST_DEVICE inline std::uint64_t scale_to_range(std::uint64_t r, std::uint64_t total) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(r, total);
#else
  __extension__ using wide = unsigned __int128;
  return static_cast<std::uint64_t>((static_cast<wide>(r) * total) >> 64);
#endif
}

}  // namespace blockpilot::detail
