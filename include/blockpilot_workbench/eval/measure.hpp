// Live measurement of a block-size policy: decode every prompt with it and sum what the requests
// report (tau, tokens, wall time by stage). The end-to-end counterpart of the dataset evaluation.
#pragma once

#include <concepts>
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
  /// Adds one finished request.
  void add(const request_stats& st) {
    tau.push_back(st.steps == 0 ? 1.0 : st.tau());
    tokens.push_back(st.generated);
    first_block_size.push_back(st.block_size);
    generated += st.generated;
    steps += st.steps;
    fallbacks += st.policy_fallback;
    seconds.prefill += st.seconds.prefill;
    seconds.policy += st.seconds.policy;
    seconds.draft += st.seconds.draft;
    seconds.verify += st.seconds.verify;
    seconds.accept += st.seconds.accept;
    seconds.total += st.seconds.total;
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

/// Decodes `prompt` with `decoder` (a speculative_decoder; `scratch` is its reusable result) and
/// adds the request to `m`; throws `error` naming the policy and the prompt when the request fails.
/// Callers that compare policies on a shared machine interleave them: each prompt decoded by every
/// policy in turn, so that a change in the machine's load hits all of them alike.
template <class Decoder>
void measure_request(Decoder& decoder, policy_measurement& m, const std::string& key, std::span<const token_id> prompt,
                     const generation_config& config, generation_result& scratch) {
  if (const status s = decoder.generate(prompt, config, scratch); s != status::success)
    throw error("measure " + m.name + ": prompt " + key + " failed in " + std::string(scratch.failed_stage) + ": " +
                std::string(to_string(s)));
  m.add(scratch.stats);
}

}  // namespace blockpilot
