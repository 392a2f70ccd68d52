// `--policy` specs of the commands that decode live: plain decoding, fixed sizes, predictor files,
// the refining policy, and the per-prompt oracle of a sweep.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot/policy/fixed.hpp"
#include "blockpilot/policy/refining.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"
#include "options.hpp"

namespace blockpilot::cli {

/// The per-prompt best size of a sweep, looked up by prompt key (the caller sets `key` before each
/// request); a prompt the sweep lacks is an error.
struct per_prompt_oracle {
  std::map<std::string, int> best;
  int largest = 1;
  std::string key;

  [[nodiscard]] static per_prompt_oracle from(const policy_dataset& d, int lo, int hi) {
    per_prompt_oracle o;
    const auto best = oracle_choices(d, lo, hi);
    for (std::size_t i = 0; i < d.size(); ++i) {
      o.best[d.prompts[i]] = best[i];
      o.largest = std::max(o.largest, best[i]);
    }
    return o;
  }
  [[nodiscard]] int max_block_size() const { return largest; }
  [[nodiscard]] block_size_choice choose(const request_features&) const {
    const auto it = best.find(key);
    if (it == best.end()) throw error("--policy oracle: the sweep has no prompt '" + key + "'");
    return {it->second, false};
  }
};

/// Calls `fn(policy)` for one spec: none (b = 1), fixed:B, mlp:FILE, refine:FIRST,SECOND (FIRST is
/// fixed:B or a compact predictor file, SECOND a compact pooled-rows predictor file), or
/// oracle (needs `oracle`, built from a sweep). Predictor files must be for a target of `vocab` tokens.
/// Throws `error` naming the spec.
template <class Fn>
void with_policy(const std::string& spec, const per_prompt_oracle* oracle, std::int64_t vocab, Fn&& fn) {
  const auto fixed = [&](std::string_view text) {
    const auto b = parse_int(text.substr(6));
    if (!text.starts_with("fixed:") || !b || *b < 1 || *b > max_block_size)
      throw error("--policy " + spec + ": expected fixed:B with 1 <= B <= " + std::to_string(max_block_size));
    return runtime_block_size{*b};
  };
  if (spec == "none") {
    runtime_block_size p{1};
    fn(p);
  } else if (spec == "oracle") {
    if (!oracle) throw error("--policy oracle: needs --oracle-sweep DIR");
    per_prompt_oracle p = *oracle;
    fn(p);
  } else if (spec.starts_with("fixed:")) {
    auto p = fixed(spec);
    fn(p);
  } else if (spec.starts_with("mlp:")) {
    with_predictor_policy(spec.substr(4), vocab, fn);
  } else if (spec.starts_with("refine:")) {
    const auto comma = spec.find(',');
    if (comma == std::string::npos) throw error("--policy " + spec + ": expected refine:FIRST,SECOND");
    const std::string first = spec.substr(7, comma - 7), second = spec.substr(comma + 1);
    if (first.starts_with("fixed:")) {
      auto p = load_refining_policy<runtime_block_size, compact_features>(fixed(first), second);
      fn(p);
    } else {
      auto p = load_refining_policy<blockpilot_policy<compact_features>, compact_features>(
          load_blockpilot_policy<compact_features>(first, vocab), second);
      fn(p);
    }
  } else {
    throw error("--policy " + spec + ": expected none, fixed:B, mlp:FILE, refine:FIRST,SECOND or oracle");
  }
}

}  // namespace blockpilot::cli
