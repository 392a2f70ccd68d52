// Philox-4x32-10 counter-based generator (Salmon et al., SC'11): the one source of randomness,
// identical on host and device so that CPU and CUDA consume the same stream.
#pragma once

#include <array>
#include <cstdint>

#include "blockpilot/detail/config.hpp"

namespace blockpilot {

/// Four 32-bit words: a Philox counter or output block.
struct philox_block {
  std::uint32_t v[4];
};

/// Philox-4x32 with 10 rounds: a bijection of the 128-bit counter keyed by 64 bits.
BLOCKPILOT_HOST_DEVICE constexpr philox_block philox4x32_10(philox_block ctr, std::uint32_t key0,
                                                            std::uint32_t key1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{m0} * ctr.v[0];
    const std::uint64_t p1 = std::uint64_t{m1} * ctr.v[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += w0;
    key1 += w1;
  }
  return ctr;
}

/// What a random draw is used for; part of the counter so that streams never overlap.
enum class random_domain : std::uint32_t {
  target_sample = 0,   ///< sampling a target token (first token, sample-and-match, bonus)
  accept_test = 1,     ///< the uniform of a rejection-sampling acceptance test
  residual_sample = 2, ///< sampling from the residual distribution after a rejection
  draft_sample = 3,    ///< a drafter's own sampling
  user = 4,            ///< first value free for models' own use
};

/// A request's position in the random stream: the key is the seed, the counter is
/// (offset, index, domain). The decoder advances `offset` once per decode step; `index` is the
/// row inside the step. Any backend that evaluates the same (seed, offset, index, domain) gets
/// the same numbers.
struct philox_stream {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;

  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr philox_block block(std::uint32_t index,
                                                                     random_domain domain) const {
    return philox4x32_10({{static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32), index,
                           static_cast<std::uint32_t>(domain)}},
                         static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  }
  /// A uniform 64-bit integer (words 0 and 1 of the block).
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr std::uint64_t bits64(std::uint32_t index,
                                                                      random_domain domain) const {
    const philox_block b = block(index, domain);
    return (std::uint64_t{b.v[1]} << 32) | b.v[0];
  }
  /// A uniform double in [0, 1) with 53 random bits (word 2 and 3 of the block).
  [[nodiscard]] BLOCKPILOT_HOST_DEVICE constexpr double uniform(std::uint32_t index, random_domain domain) const {
    const philox_block b = block(index, domain);
    const std::uint64_t bits = ((std::uint64_t{b.v[3]} << 32) | b.v[2]) >> 11;
    return static_cast<double>(bits) * 0x1p-53;
  }
};

}  // namespace blockpilot
