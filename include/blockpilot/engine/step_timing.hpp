// A verifier's step time per block size, measured where it runs: the prior curve of step_cost_model
// (the speed-aware policies' cost), taken at load.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"

namespace blockpilot {

/// Measures a verifier's step time per size: prefills `context` (a request's worth of tokens), takes
/// one untimed step (the first after a prefill runs on cold caches), then scores blocks of b =
/// 1..max_block tokens (the context's own tokens; any valid ones serve) and keeps one of each
/// (`commit(1)`, as a rejected draft does), `repeats` rounds with the sizes interleaved; the median of a
/// size's rounds (of an even count, the mean of the middle two), in seconds. The verifier's next
/// prefill starts afresh. Throws `error` when the verifier fails or the context is empty.
template <verifier V>
[[nodiscard]] std::vector<double> measure_step_seconds(V& v, std::span<const token_id> context, int max_block,
                                                       int repeats = 3) {
  if (context.empty() || max_block < 1 || repeats < 1)
    throw error("measure_step_seconds: needs a context, max_block >= 1 and repeats >= 1");
  std::vector<token_id> block(static_cast<std::size_t>(max_block));
  for (std::size_t j = 0; j < block.size(); ++j) block[j] = context[j % context.size()];
  matrix_view<const float> logits;
  if (v.prefill(context, logits) != status::success) throw error("measure_step_seconds: the verifier's prefill failed");
  const auto step = [&](int b) {
    if (v.score(std::span<const token_id>(block).first(static_cast<std::size_t>(b)), logits) != status::success ||
        v.commit(1) != status::success)
      throw error("measure_step_seconds: the verifier failed to score a block of " + std::to_string(b));
  };
  step(1);
  std::vector<std::vector<double>> times(static_cast<std::size_t>(max_block));
  for (int r = 0; r < repeats; ++r)
    for (int b = 1; b <= max_block; ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      step(b);
      times[static_cast<std::size_t>(b - 1)].push_back(
          std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e-9));
    }
  std::vector<double> median;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    const auto half = static_cast<std::size_t>(repeats / 2);
    median.push_back(repeats % 2 == 1 ? t[half] : 0.5 * (t[half - 1] + t[half]));
  }
  return median;
}

}  // namespace blockpilot
