// Offline sweeps: every prompt decoded at every candidate block size, tau recorded per pair —
// the raw material of the oracle, of replay evaluation and of predictor training labels.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/io/acceptance_json.hpp"
#include "blockpilot/policy/fixed.hpp"

namespace blockpilot {

/// Called after each (prompt, size) run with the number of runs done and the total.
using sweep_progress = std::function<void(std::size_t done, std::size_t total)>;

/// Decodes every prompt at every size in `sizes` (ascending) with `config` and returns the
/// acceptance table (prompt keys "0", "1", ...). A request that ends before its first step (a stop
/// token first) records tau 1, the autoregressive value. Throws `error` naming the prompt and the
/// size when a request fails.
template <class Acceptance = greedy_match, class Drafter, class Verifier>
[[nodiscard]] acceptance_table sweep_block_sizes(Drafter& drafter, Verifier& verifier,
                                                 std::span<const std::vector<token_id>> prompts,
                                                 std::span<const int> sizes, const generation_config& config,
                                                 const sweep_progress& progress = {}) {
  acceptance_table table;
  table.sizes.assign(sizes.begin(), sizes.end());
  table.source = "sweep";
  table.tau.assign(prompts.size(), std::vector<double>(sizes.size()));
  for (std::size_t i = 0; i < prompts.size(); ++i) table.prompts.push_back(std::to_string(i));
  speculative_decoder<Drafter, Verifier, runtime_block_size, Acceptance> decoder(drafter, verifier);
  generation_result result;
  std::size_t done = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    decoder.policy().size = sizes[k];
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      if (const status s = decoder.generate(prompts[i], config, result); s != status::success)
        throw error("sweep: prompt " + std::to_string(i) + " at block size " + std::to_string(sizes[k]) + " failed in " +
                    std::string(result.failed_stage) + ": " + std::string(to_string(s)));
      table.tau[i][k] = result.stats.steps == 0 ? 1.0 : result.stats.tau();
      if (progress) progress(++done, prompts.size() * sizes.size());
    }
  }
  return table;
}

}  // namespace blockpilot
