// Live measurement of a block-size policy: decode every prompt with it and sum what the requests
// report (tau, tokens, wall time by stage). The end-to-end counterpart of the dataset evaluation.
#pragma once

#include <concepts>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/engine/speculative_decoder.hpp"

namespace blockpilot {

/// What one policy did over a prompt set.
struct policy_measurement {
  std::string name;
  std::vector<double> tau;                ///< per prompt (1 for a request that ended before its first step)
  std::vector<std::int64_t> tokens;       ///< generated per prompt
  std::vector<int> first_block_size;      ///< per prompt, the size chosen after prefill
  std::int64_t generated = 0;
  std::int64_t steps = 0;
  std::int64_t fallbacks = 0;
  stage_seconds seconds;                  ///< summed over the requests

  [[nodiscard]] double mean_tau() const {
    double s = 0;
    for (const double t : tau) s += t;
    return tau.empty() ? 0.0 : s / static_cast<double>(tau.size());
  }
  /// Generated tokens per second of decoding (prefill excluded; the first token comes with it).
  [[nodiscard]] double decode_tokens_per_second() const {
    const double decode = seconds.total - seconds.prefill;
    return decode > 0 ? static_cast<double>(generated - static_cast<std::int64_t>(tau.size())) / decode : 0.0;
  }
  /// Generated tokens per second of the whole request, prefill included.
  [[nodiscard]] double tokens_per_second() const {
    return seconds.total > 0 ? static_cast<double>(generated) / seconds.total : 0.0;
  }
};

/// Called before each request with its prompt index (e.g. to tell a per-prompt oracle the key).
template <class Policy>
using before_request = std::function<void(Policy&, std::size_t prompt)>;

/// Decodes every prompt with `policy` under rule `Acceptance`; throws `error` naming the prompt when
/// a request fails. `progress(done, total)` after each prompt.
template <class Acceptance = greedy_match, class Drafter, class Verifier, class Policy>
[[nodiscard]] policy_measurement measure_policy(Drafter& drafter, Verifier& verifier, Policy policy, std::string name,
                                                std::span<const std::string> keys,
                                                std::span<const std::vector<token_id>> prompts,
                                                const generation_config& config,
                                                const before_request<Policy>& before = {},
                                                const std::function<void(std::size_t, std::size_t)>& progress = {}) {
  speculative_decoder<Drafter, Verifier, Policy, Acceptance> decoder(drafter, verifier, std::move(policy));
  policy_measurement m;
  m.name = std::move(name);
  generation_result r;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (before) before(decoder.policy(), i);
    if (const status s = decoder.generate(prompts[i], config, r); s != status::success)
      throw error("measure " + m.name + ": prompt " + keys[i] + " failed in " + std::string(r.failed_stage) + ": " +
                  std::string(to_string(s)));
    const auto& st = r.stats;
    m.tau.push_back(st.steps == 0 ? 1.0 : st.tau());
    m.tokens.push_back(st.generated);
    m.first_block_size.push_back(st.block_size);
    m.generated += st.generated;
    m.steps += st.steps;
    m.fallbacks += st.policy_fallback;
    m.seconds.prefill += st.seconds.prefill;
    m.seconds.policy += st.seconds.policy;
    m.seconds.draft += st.seconds.draft;
    m.seconds.verify += st.seconds.verify;
    m.seconds.accept += st.seconds.accept;
    m.seconds.total += st.seconds.total;
    if (progress) progress(i + 1, prompts.size());
  }
  return m;
}

}  // namespace blockpilot
