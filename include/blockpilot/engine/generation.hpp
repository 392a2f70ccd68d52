// Options and result of one generation request.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stop_token>
#include <string_view>
#include <vector>

#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/engine/request_stats.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

struct generation_config {
  int max_new_tokens = 256;            ///< output length cap (the first generated token counts)
  float temperature = 0.0f;            ///< 0 (below 1e-5) is greedy
  std::vector<token_id> stop_tokens;   ///< generation ends after the first of these (kept in the output)
  std::uint64_t seed = 0;              ///< Philox key of the request's random stream
  /// top-k / top-p / min-p on the target's distribution at T > 0; drafters receive them too.
  sampling_controls sampling;
  /// Rewrites each target row before the rule decides on it (on host-memory backends); drafters receive
  /// it too. Policies still see the unprocessed rows. Optional.
  logits_processor process_logits;
  /// Called with the tokens each step commits (the first token, then each step's accepted drafts and
  /// bonus, cut at a stop token or the cap), in order, so that text can be streamed; optional. Its
  /// time is stats.seconds.streaming.
  std::function<void(std::span<const token_id>)> on_tokens;
  /// Cancellation: once stop is requested on its source, the request ends before its next step with
  /// status::cancelled (failed_stage "cancel"), keeping the tokens committed so far; optional.
  std::stop_token cancel;
};

struct generation_result {
  std::vector<token_id> tokens;        ///< generated tokens, prompt excluded
  request_stats stats;
  status error = status::success;      ///< what stopped the request early, if anything
  std::string_view failed_stage;       ///< "input", "prefill", "policy", "draft", "verify", "accept", "commit" or "cancel"
};

}  // namespace blockpilot
