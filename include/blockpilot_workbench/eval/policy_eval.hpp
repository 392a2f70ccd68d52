// Evaluating block-size policies on a policy dataset: training sets for predictors, and per policy
// the mean tau, regret against the per-prompt oracle, the share of the oracle's gain over a
// reference size it captures, accuracy, mean |chosen - best| and the chosen-vs-best confusion.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/concepts.hpp"
#include "blockpilot/features/feature_extractor.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot_workbench/nn/training.hpp"
#include "blockpilot_workbench/nn/weight_file.hpp"

namespace blockpilot {

/// Index of the largest tau: the per-prompt oracle's size, the first on ties (the smaller size when
/// sizes ascend, as the reference label construction does).
[[nodiscard]] inline std::size_t best_index(std::span<const double> tau) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < tau.size(); ++i)
    if (tau[i] > tau[best]) best = i;
  return best;
}

/// The column of block size `b`; `what` says where b came from in the error ("the window's size").
[[nodiscard]] inline std::size_t size_column(const policy_dataset& d, int b, const std::string& what) {
  const auto it = std::find(d.sizes.begin(), d.sizes.end(), b);
  if (it == d.sizes.end()) {
    std::string sizes;
    for (const int s : d.sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
    throw error(what + " " + std::to_string(b) + ": not among the dataset's block sizes (" + sizes + ")");
  }
  return static_cast<std::size_t>(it - d.sizes.begin());
}

/// The candidate window B-k..B+k (lo..hi) as column indices; throws naming a missing size.
[[nodiscard]] inline std::vector<std::size_t> window_columns(const policy_dataset& d, int lo, int hi) {
  if (lo > hi) throw error("window " + std::to_string(lo) + ":" + std::to_string(hi) + ": its first size exceeds its last");
  std::vector<std::size_t> cols;
  for (int b = lo; b <= hi; ++b) cols.push_back(size_column(d, b, "the window's size"));
  return cols;
}

namespace eval_detail {

/// A training set of `dim` features per selected prompt (all when `rows` is empty), written by
/// fill(prompt, out), with the prompt's tau over the window lo..hi.
template <class Fill>
[[nodiscard]] nn::training_set training_set(const policy_dataset& d, std::int64_t dim, int lo, int hi,
                                            std::span<const std::size_t> rows, Fill&& fill) {
  const auto cols = window_columns(d, lo, hi);
  std::vector<std::size_t> all(rows.empty() ? d.size() : 0);
  std::iota(all.begin(), all.end(), std::size_t{0});
  if (rows.empty()) rows = all;
  nn::training_set set;
  set.dim = dim;
  set.classes = static_cast<std::int64_t>(cols.size());
  set.features.resize(rows.size() * static_cast<std::size_t>(dim));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    fill(rows[r], std::span<float>(set.features.data() + r * static_cast<std::size_t>(dim), static_cast<std::size_t>(dim)));
    for (const std::size_t c : cols) set.tau.push_back(static_cast<float>(d.taus(rows[r])[c]));
  }
  return set;
}

}  // namespace eval_detail

/// The request a policy sees for prompt i of a dataset: its token ids (empty when the sweep did not
/// record them) and its prefill row.
[[nodiscard]] inline request_features dataset_request(const policy_dataset& d, std::size_t i, float temperature = 0.0f) {
  return {d.prompt_ids(i), d.row(i), temperature};
}

/// Features of the selected prompts (all when `rows` is empty) with their tau over the window lo..hi: a
/// predictor's training set. Throws when a prompt's features cannot be computed, and when a request
/// extractor meets a dataset without prompt tokens.
template <policy_feature_extractor F>
[[nodiscard]] nn::training_set make_training_set(const policy_dataset& d, const F& f, int lo, int hi,
                                                 std::span<const std::size_t> rows = {}) {
  if (request_feature_extractor<F> && !d.has_prompt_tokens())
    throw error("features '" + std::string(F::name) + "' read the prompt's tokens, which this dataset lacks (sweep it again)");
  std::vector<float> workspace(f.workspace_size(d.vocab));
  return eval_detail::training_set(d, f.feature_count(d.vocab), lo, hi, rows, [&](std::size_t i, std::span<float> out) {
    if (const status s = extract_features(f, dataset_request(d, i), workspace, out); s != status::success)
      throw error("features of prompt '" + d.prompts[i] + "': " + std::string(to_string(s)));
  });
}

/// The dataset's pooled features (a refining policy's second-stage input) of the selected prompts
/// with their tau over the window lo..hi. Throws when the dataset has none.
[[nodiscard]] inline nn::training_set make_pooled_training_set(const policy_dataset& d, int lo, int hi,
                                                               std::span<const std::size_t> rows = {}) {
  if (!d.pooled) throw error("the dataset has no pooled features (sweep with --pooled-rows)");
  return eval_detail::training_set(d, d.pooled->dim, lo, hi, rows, [&](std::size_t i, std::span<float> out) {
    std::ranges::copy(d.pooled->row(i), out.begin());
  });
}

/// How one policy did on a dataset.
struct policy_report {
  std::string name;
  std::vector<int> chosen;        ///< per prompt
  double mean_tau = 0;
  double regret = 0;              ///< oracle mean tau - mean tau
  double reference_tau = 0;       ///< the reference size's mean tau
  std::optional<double> gain_share;  ///< (mean tau - reference) / (oracle - reference); none unless oracle > reference
  double accuracy = 0;            ///< chosen == per-prompt best over the window
  double mean_abs_error = 0;      ///< mean |chosen - best|
  int fallbacks = 0;
  std::vector<std::vector<int>> confusion;  ///< [chosen - lo][best - lo]; chosen outside the window not counted
};

/// Scores per-prompt choices against the window lo..hi; `reference` is the size whose gain is
/// measured (16). Every chosen size must be a size of the dataset.
[[nodiscard]] inline policy_report evaluate_choices(const policy_dataset& d, std::string name, std::vector<int> chosen,
                                                    int lo, int hi, int reference, int fallbacks = 0) {
  if (chosen.size() != d.size())
    throw error("policy '" + name + "': " + std::to_string(chosen.size()) + " choices for " + std::to_string(d.size()) + " prompts");
  const auto cols = window_columns(d, lo, hi);
  const std::size_t reference_column = size_column(d, reference, "the reference size");
  const std::string chosen_size = "policy '" + name + "' chose size";
  policy_report r;
  r.name = std::move(name);
  r.chosen = std::move(chosen);
  r.fallbacks = fallbacks;
  const auto window = static_cast<std::size_t>(hi - lo + 1);
  r.confusion.assign(window, std::vector<int>(window, 0));
  double oracle = 0, base = 0;
  const double n = static_cast<double>(d.size());
  std::vector<double> window_tau(window);
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto taus = d.taus(i);
    for (std::size_t c = 0; c < window; ++c) window_tau[c] = taus[cols[c]];
    const int best = lo + static_cast<int>(best_index(window_tau));
    const int pick = r.chosen[i];
    oracle += taus[cols[static_cast<std::size_t>(best - lo)]] / n;
    base += taus[reference_column] / n;
    r.mean_tau += taus[size_column(d, pick, chosen_size)] / n;
    r.accuracy += (pick == best) / n;
    r.mean_abs_error += std::abs(pick - best) / n;
    if (pick >= lo && pick <= hi) ++r.confusion[static_cast<std::size_t>(pick - lo)][static_cast<std::size_t>(best - lo)];
  }
  r.regret = oracle - r.mean_tau;
  r.reference_tau = base;
  if (oracle > base) r.gain_share = (r.mean_tau - base) / (oracle - base);
  return r;
}

/// The choices of a block-size policy on every prompt of a dataset (from the stored prefill rows and
/// prompt tokens).
template <block_size_policy Policy>
[[nodiscard]] policy_report evaluate_policy(const policy_dataset& d, std::string name, Policy& policy, int lo, int hi,
                                            int reference, float temperature = 0.0f) {
  std::vector<int> chosen;
  int fallbacks = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const block_size_choice c = policy.choose(dataset_request(d, i, temperature));
    chosen.push_back(c.block_size);
    fallbacks += c.fallback;
  }
  return evaluate_choices(d, std::move(name), std::move(chosen), lo, hi, reference, fallbacks);
}

/// The second-stage choices of a pooled-rows predictor on every prompt, from the dataset's pooled
/// features (which must have been recorded with the predictor's extractor and row count). The first
/// steps of a live request run at the first stage's size; this scores the size of the rest.
template <nn::mlp_storage T>
[[nodiscard]] policy_report evaluate_pooled_predictor(const policy_dataset& d, std::string name, const nn::predictor<T>& p,
                                                      int lo, int hi, int reference) {
  if (!d.pooled) throw error("policy '" + name + "': the dataset has no pooled features (sweep with --pooled-rows)");
  auto expected = p.metadata.feature_parameters;
  expected["name"] = p.metadata.feature_extractor;
  if (d.pooled->extractor != expected || d.pooled->rows != p.metadata.pooled_rows)
    throw error("policy '" + name + "': its extractor or pooled row count differs from the dataset's pooled features");
  if (p.metadata.vocab_size != d.vocab)  // live, the refining policy would keep its first stage's sizes
    throw error("policy '" + name + "': made for a vocabulary of " + std::to_string(p.metadata.vocab_size) +
                ", the dataset's is " + std::to_string(d.vocab));
  std::vector<float> logits(static_cast<std::size_t>(p.network.shape().classes));
  std::vector<float> workspace(static_cast<std::size_t>(p.network.workspace_size(1)));
  std::vector<int> chosen;
  int fallbacks = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto x = d.pooled->row(i);
    const bool finite = std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
    if (!finite || p.network.forward(x, logits, workspace) != status::success) {
      chosen.push_back(static_cast<int>(p.metadata.training_block_size));
      ++fallbacks;
      continue;
    }
    chosen.push_back(static_cast<int>(p.metadata.block_size(nn::argmax(logits))));
  }
  return evaluate_choices(d, std::move(name), std::move(chosen), lo, hi, reference, fallbacks);
}

/// The per-prompt oracle over the window: the upper bound of every window policy.
[[nodiscard]] inline std::vector<int> oracle_choices(const policy_dataset& d, int lo, int hi) {
  const auto cols = window_columns(d, lo, hi);
  std::vector<int> out;
  std::vector<double> w(cols.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    for (std::size_t c = 0; c < cols.size(); ++c) w[c] = d.taus(i)[cols[c]];
    out.push_back(lo + static_cast<int>(best_index(w)));
  }
  return out;
}

[[nodiscard]] inline nlohmann::ordered_json to_json(const policy_report& r) {
  return {{"policy", r.name},
          {"mean_tau", r.mean_tau},
          {"regret", r.regret},
          {"reference_mean_tau", r.reference_tau},
          {"gain_share", r.gain_share ? nlohmann::json(*r.gain_share) : nlohmann::json()},
          {"accuracy", r.accuracy},
          {"mean_abs_error", r.mean_abs_error},
          {"fallbacks", r.fallbacks},
          {"confusion", r.confusion},
          {"chosen", r.chosen}};
}

}  // namespace blockpilot
