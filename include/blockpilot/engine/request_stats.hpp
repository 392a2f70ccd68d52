// Per-request statistics of a speculative decode: acceptance length (tau), per-step histogram,
// per-position acceptance rates, call counts and the time split by stage.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "blockpilot/types.hpp"

namespace blockpilot {

/// Wall time (seconds) per stage of one request; `streaming` is the time in config.on_tokens.
/// `bookkeeping()` is the library's own share: everything in `total` that is not model, policy,
/// acceptance or streaming time.
struct stage_seconds {
  double prefill = 0, policy = 0, draft = 0, verify = 0, accept = 0, streaming = 0, total = 0;
  [[nodiscard]] double bookkeeping() const { return total - prefill - policy - draft - verify - accept - streaming; }
};

struct request_stats {
  int block_size = 0;          ///< the size the policy chose after prefill
  bool policy_fallback = false;  ///< the policy fell back to its default size
  bool prefilled = false;      ///< the verifier's prefill was called (a request refused before it was not)
  std::int64_t steps = 0;      ///< decode steps (verifier score calls)
  std::int64_t drafted = 0;    ///< draft tokens proposed (sum of b - 1)
  std::int64_t accepted = 0;   ///< draft tokens accepted (sum of a)
  std::int64_t generated = 0;  ///< tokens in the output
  /// steps_by_length[k]: steps that committed k tokens (a + 1 = k), k in [1, max_block].
  std::vector<std::int64_t> steps_by_length;
  /// steps_by_block[b]: steps run with block size b, b in [1, max_block].
  std::vector<std::int64_t> steps_by_block;
  stage_seconds seconds;

  /// Verifier calls including the prefill.
  [[nodiscard]] std::int64_t target_calls() const { return steps + (prefilled ? 1 : 0); }
  /// Mean committed tokens per step, a + 1 (the reference tau); 0 when no step ran.
  [[nodiscard]] double tau() const {
    return steps == 0 ? 0.0 : static_cast<double>(accepted + steps) / static_cast<double>(steps);
  }
  /// Share of steps that proposed a draft at block position j (1-based) and accepted it.
  [[nodiscard]] double acceptance_rate(int j) const {
    std::int64_t proposed = 0, kept = 0;
    for (std::size_t b = static_cast<std::size_t>(j) + 1; b < steps_by_block.size(); ++b) proposed += steps_by_block[b];
    for (std::size_t k = static_cast<std::size_t>(j) + 1; k < steps_by_length.size(); ++k) kept += steps_by_length[k];
    return proposed == 0 ? 0.0 : static_cast<double>(kept) / static_cast<double>(proposed);
  }

  /// Empty statistics for blocks up to max_block (a size past block_size_limit fails the request: the
  /// histograms stop there).
  void reset(int max_block) {
    *this = request_stats{};
    const auto sizes = static_cast<std::size_t>(std::min(max_block, block_size_limit)) + 1;
    steps_by_length.assign(sizes, 0);
    steps_by_block.assign(sizes, 0);
  }
  /// One step with block size b that accepted a drafts.
  void record_step(int b, int a) {
    ++steps;
    drafted += b - 1;
    accepted += a;
    ++steps_by_length[static_cast<std::size_t>(a) + 1];
    ++steps_by_block[static_cast<std::size_t>(b)];
  }
};

}  // namespace blockpilot
