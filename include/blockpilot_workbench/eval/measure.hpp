// Live measurement of a block-size policy: decode every prompt with it and sum what the requests
// report (tau, tokens, wall time by stage). The end-to-end counterpart of the dataset evaluation.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
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
  std::vector<double> decode_seconds;     ///< per prompt, the request's seconds after prefill
  std::vector<std::vector<std::int64_t>> steps_by_block;  ///< per prompt, steps by scored size b (index b)
  std::vector<std::vector<std::int64_t>> steps_by_length;  ///< per prompt, steps by committed tokens a + 1 (index a + 1)
  std::vector<std::vector<token_id>> outputs;              ///< per prompt, the generated tokens
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
    decode_seconds.push_back(st.seconds.total - st.seconds.prefill);
    steps_by_block.push_back(st.steps_by_block);
    steps_by_length.push_back(st.steps_by_length);
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

/// The decode speed of `m` over `base` on the same requests (tokens after the first per second of
/// decoding, summed over requests), with a 95 % bootstrap interval from resampling the prompts
/// (requests i, i + prompts, i + 2 prompts, ... are rounds of prompt i and move together).
struct speedup_estimate {
  double ratio = 0, low = 0, high = 0;
};
[[nodiscard]] inline speedup_estimate decode_speedup(const policy_measurement& m, const policy_measurement& base,
                                                     std::size_t prompts, int resamples = 2000) {
  const std::size_t n = m.tokens.size();
  if (prompts == 0 || n != base.tokens.size() || n % prompts != 0) throw error("decode_speedup: the measurements differ in shape");
  if (resamples < 1) throw error("decode_speedup: needs at least one resample");
  std::vector<double> tok(prompts), sec(prompts), base_tok(prompts), base_sec(prompts);
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t i = r % prompts;
    tok[i] += static_cast<double>(m.tokens[r] - 1), sec[i] += m.decode_seconds[r];
    base_tok[i] += static_cast<double>(base.tokens[r] - 1), base_sec[i] += base.decode_seconds[r];
  }
  const auto ratio = [&](const auto& pick) {
    double t = 0, s = 0, bt = 0, bs = 0;
    for (std::size_t k = 0; k < prompts; ++k) {
      const std::size_t i = pick(k);
      t += tok[i], s += sec[i], bt += base_tok[i], bs += base_sec[i];
    }
    return s > 0 && bt > 0 ? (t / s) / (bt / bs) : 0.0;
  };
  speedup_estimate e;
  e.ratio = ratio([](std::size_t k) { return k; });
  std::vector<double> draws;
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int d = 0; d < resamples; ++d)
    draws.push_back(ratio([&](std::size_t) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<std::size_t>((state >> 33) % prompts);
    }));
  std::sort(draws.begin(), draws.end());
  e.low = draws[static_cast<std::size_t>(0.025 * (resamples - 1))];
  e.high = draws[static_cast<std::size_t>(0.975 * (resamples - 1))];
  return e;
}

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
  m.outputs.push_back(scratch.tokens);
}

}  // namespace blockpilot
