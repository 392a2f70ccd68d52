// `--policy` specs of the commands that decode live: plain decoding, fixed sizes, predictor files,
// the refining policy, the per-step adaptive policy, the confidence and speed cut-offs, and the
// per-prompt oracle of a sweep.
#pragma once

#include <filesystem>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot/policy/adaptive.hpp"
#include "blockpilot/policy/confidence_cutoff.hpp"
#include "blockpilot/policy/fixed.hpp"
#include "blockpilot/policy/refining.hpp"
#include "blockpilot/policy/speed_cutoff.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"
#include "options.hpp"

namespace blockpilot::cli {

/// The per-prompt best size of a sweep, looked up by prompt key (the caller sets `key` before each
/// request); a prompt the sweep lacks is an error.
struct per_prompt_oracle {
  std::map<std::string, int> best;
  std::map<std::string, std::vector<token_id>> prompt_ids;  ///< the sweep's token ids, when it kept them
  int largest = 1;
  std::string key;

  [[nodiscard]] static per_prompt_oracle from(const policy_dataset& d, int lo, int hi) {
    per_prompt_oracle o;
    const auto best = oracle_choices(d, lo, hi);
    for (std::size_t i = 0; i < d.size(); ++i) {
      o.best[d.prompts[i]] = best[i];
      o.largest = std::max(o.largest, best[i]);
      if (d.has_prompt_tokens()) o.prompt_ids[d.prompts[i]].assign(d.prompt_ids(i).begin(), d.prompt_ids(i).end());
    }
    return o;
  }
  /// Throws unless the sweep has every prompt of `keys` and, where it kept token ids, the same ones.
  void check_prompts(const std::vector<std::string>& keys, const std::vector<std::vector<token_id>>& prompts) const {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!best.contains(keys[i])) throw error("--oracle-sweep: the sweep has no prompt '" + keys[i] + "'");
      if (const auto it = prompt_ids.find(keys[i]); it != prompt_ids.end() && it->second != prompts[i])
        throw error("--oracle-sweep: prompt '" + keys[i] + "' has other tokens there (a sweep of other prompts)");
    }
  }
  [[nodiscard]] int max_block_size() const { return largest; }
  [[nodiscard]] block_size_choice choose(const request_features&) const {
    const auto it = best.find(key);
    if (it == best.end()) throw error("--policy oracle: the sweep has no prompt '" + key + "'");
    return {it->second, false};
  }
};

/// A request's own copy of a policy: speed cut-offs pool what they learn (shared()), others are copies.
template <class Policy>
Policy request_policy(const Policy& prototype) {
  if constexpr (requires { prototype.shared(); })
    return prototype.shared();
  else
    return prototype;
}

/// Whether `Policy` can decode with `Drafter`: a cut-off trims drafts by the confidence the drafter reports.
template <class Policy, class Drafter>
constexpr bool policy_fits_drafter = !draft_trimming_policy<Policy> || drafter_with_confidence<Drafter>;

/// The error where a cut-off meets a drafter without confidence (policy_fits_drafter is false).
inline error cutoff_needs_confidence(const std::string& spec) {
  return error("--policy " + spec + ": the cut-off needs a drafter that reports its confidence (lookup, dflash)");
}

/// What the speed-aware policies (adaptive, speed) start from: the verifier's seconds per step by size,
/// measured at load (`measure_step_seconds`).
using step_seconds = std::vector<double>;

/// `costs` in milliseconds, as the load measurement's line prints them.
inline std::vector<double> milliseconds(const step_seconds& costs) {
  std::vector<double> ms;
  for (const double c : costs) ms.push_back(1e3 * c);
  return ms;
}

/// The largest size the speed-aware policies may choose: the step costs are measured up to it at load.
constexpr int speed_aware_max_block = 16;

/// Whether a spec needs the verifier's measured step costs (adaptive, speed, and measure's joint).
inline bool uses_step_costs(const std::string& spec) {
  return spec.find("adaptive") != std::string::npos || spec.starts_with("speed") || spec.starts_with("joint");
}

/// The speed cut-off's options and its step cost model's from `KEY=VALUE` pairs separated by commas
/// (levels, positions, prior_weight, request_weight, memory, explore, learn_costs 0 or 1; cost_memory,
/// cost_prior, cost_group: step_cost_options' memory, prior_timings, group_timings); the others keep
/// their defaults.
inline std::pair<speed_cutoff_options, step_cost_options> speed_options(const std::string& spec, std::string_view pairs) {
  speed_cutoff_options o;
  step_cost_options c;
  while (!pairs.empty()) {
    const auto comma = pairs.find(',');
    const std::string_view pair = pairs.substr(0, comma);
    pairs = comma == std::string_view::npos ? std::string_view{} : pairs.substr(comma + 1);
    const auto eq = pair.find('=');
    const std::string key(pair.substr(0, eq)), text(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') throw error("--policy " + spec + ": expected KEY=NUMBER, got '" + std::string(pair) + "'");
    if (key == "levels" || key == "positions" || key == "cost_group") {
      if (value != static_cast<int>(value)) throw error("--policy " + spec + ": " + key + " must be an integer");
      (key == "levels" ? o.levels : key == "positions" ? o.positions : c.group_timings) = static_cast<int>(value);
    } else if (key == "prior_weight") {
      o.prior_weight = value;
    } else if (key == "request_weight") {
      o.request_weight = value;
    } else if (key == "memory") {
      o.memory = value;
    } else if (key == "explore") {
      o.explore = value;
    } else if (key == "learn_costs") {
      o.learn_costs = value != 0;
    } else if (key == "cost_memory") {
      c.memory = value;
    } else if (key == "cost_prior") {
      c.prior_timings = value;
    } else {
      throw error("--policy " + spec + ": unknown option '" + key +
                  "' (levels, positions, prior_weight, request_weight, memory, explore, learn_costs, cost_memory, "
                  "cost_prior, cost_group)");
    }
  }
  return {o, c};
}

/// Calls `fn(policy)` for one spec: none (b = 1), fixed:B, mlp:FILE, refine:FIRST,SECOND (FIRST is
/// fixed:B or a compact predictor file, SECOND a compact pooled-rows predictor file), adaptive[:MAX]
/// (per step, from `costs`), speed[:MAX][,KEY=VALUE...] (the speed cut-off, from `costs`; speed_options),
/// cutoff:P_MIN[,INNER] (INNER fixed:B, default fixed:16, adaptive[:MAX] or mlp:FILE),
/// or oracle (needs `oracle`, built from a sweep). Predictor files must be for a target of `vocab` tokens.
/// Throws `error` naming the spec.
template <class Fn>
void with_policy(const std::string& spec, const per_prompt_oracle* oracle, std::int64_t vocab, const step_seconds& costs,
                 Fn&& fn) {
  const auto fixed = [&](std::string_view text) {
    const auto b = text.starts_with("fixed:") ? parse_int(text.substr(6)) : std::nullopt;
    if (!b || *b < 1 || *b > max_block_size)
      throw error("--policy " + spec + ": expected fixed:B with 1 <= B <= " + std::to_string(max_block_size));
    return runtime_block_size{*b};
  };
  // NAME: every measured size; NAME:MAX
  const auto measured_costs = [&](std::string_view text, std::string_view name, step_cost_options options = {}) {
    const auto b = text == name ? std::optional<int>(static_cast<int>(costs.size()))
                   : text.starts_with(std::string(name) + ":") ? parse_int(text.substr(name.size() + 1))
                                                               : std::nullopt;
    if (!b || *b < 1 || *b > static_cast<int>(costs.size()))
      throw error("--policy " + spec + ": expected " + std::string(name) + " or " + std::string(name) +
                  ":MAX with 1 <= MAX <= " + std::to_string(costs.size()));
    try {
      return step_cost_model::from_seconds(std::span(costs).first(static_cast<std::size_t>(*b)), options);
    } catch (const error& e) {
      throw error("--policy " + spec + ": " + e.what());
    }
  };
  const auto adaptive = [&](std::string_view text) { return adaptive_block_size(measured_costs(text, "adaptive")); };
  if (spec.starts_with("cutoff:")) {
    const auto comma = spec.find(',');
    const std::string p = spec.substr(7, comma == std::string::npos ? std::string::npos : comma - 7);
    const std::string inner = comma == std::string::npos ? "fixed:16" : spec.substr(comma + 1);
    char* end = nullptr;
    const float p_min = std::strtof(p.c_str(), &end);
    if (p.empty() || *end != '\0' || !(p_min >= 0.0f && p_min <= 1.0f))
      throw error("--policy " + spec + ": expected cutoff:P_MIN[,INNER] with 0 <= P_MIN <= 1");
    if (inner.starts_with("adaptive")) {
      confidence_cutoff<adaptive_block_size> c(adaptive(inner), p_min);
      fn(c);
    } else if (inner.starts_with("mlp:")) {
      with_predictor_policy(inner.substr(4), vocab, [&](auto& predictor) {
        confidence_cutoff<std::decay_t<decltype(predictor)>> c(std::move(predictor), p_min);
        fn(c);
      });
    } else {
      confidence_cutoff<runtime_block_size> c(fixed(inner), p_min);
      fn(c);
    }
  } else if (spec == "speed" || spec.starts_with("speed:") || spec.starts_with("speed,")) {
    const auto comma = spec.find(',');
    const auto [options, cost_options] =
        comma == std::string::npos ? std::pair<speed_cutoff_options, step_cost_options>{} : speed_options(spec, spec.substr(comma + 1));
    speed_cutoff p(measured_costs(std::string_view(spec).substr(0, comma), "speed", cost_options), options);
    fn(p);
  } else if (spec.starts_with("adaptive")) {
    auto a = adaptive(spec);
    fn(a);
  } else if (spec == "none") {
    runtime_block_size p{1};
    fn(p);
  } else if (spec == "oracle") {
    if (!oracle) throw error("--policy oracle: a policy of measure's, over a sweep: needs --oracle-sweep DIR");
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
  } else if (spec.starts_with("joint")) {
    throw error("--policy " + spec + ": a policy of measure's, over a batch of prompts (--batch N)");
  } else {
    throw error("--policy " + spec + ": expected none, fixed:B, mlp:FILE, refine:FIRST,SECOND, adaptive[:MAX], "
                "speed[:MAX][,KEY=VALUE...], cutoff:P_MIN[,INNER] or oracle");
  }
}

/// Throws as with_policy would, before the model is loaded and its step costs measured, so that a
/// mistyped spec fails at once: stand-in costs for speed_aware_max_block sizes, and predictor files read
/// but not yet matched to the target's vocabulary.
inline void check_policy_spec(const std::string& spec, const per_prompt_oracle* oracle) {
  step_seconds stand_in;
  for (int b = 1; b <= speed_aware_max_block; ++b) stand_in.push_back(1.0 + 0.1 * b);
  with_policy(spec, oracle, 0, stand_in, [](auto&) {});
}

}  // namespace blockpilot::cli
