// Replay evaluation of block-size policies on measured acceptance lengths: an offline lookup of each
// prompt's tau at the chosen size (exact at T = 0, where decoding is deterministic given b).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot_workbench/io/acceptance_json.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// Mean tau over all prompts of the policy "always block size `b`". Throws `error` when the table
/// has no column for `b` or no prompts.
[[nodiscard]] inline double mean_fixed_tau(const acceptance_table& table, int b) {
  const auto s = table.size_index(b);
  if (!s) throw error(table.source + ": no acceptance file for block size " + std::to_string(b) + " (sizes: " + table.sizes_text() + ")");
  if (table.prompts.empty()) throw error(table.source + ": no prompts");
  double sum = 0.0;
  for (const auto& row : table.tau) sum += row[*s];
  return sum / static_cast<double>(table.prompts.size());
}

/// Mean tau of a per-prompt choice: `choice[p]` is the block size used for prompt `p` (table
/// order). Throws `error` when the lengths differ or a size has no column.
[[nodiscard]] inline double mean_tau(const acceptance_table& table, std::span<const int> choice) {
  if (choice.size() != table.prompts.size() || choice.empty())
    throw error(table.source + ": a choice of " + std::to_string(choice.size()) + " block sizes for " +
                std::to_string(table.prompts.size()) + " prompts");
  double sum = 0.0;
  for (std::size_t p = 0; p < choice.size(); ++p) {
    const auto s = table.size_index(choice[p]);
    if (!s) throw error(table.source + ": prompt \"" + table.prompts[p] + "\": no acceptance file for block size " + std::to_string(choice[p]));
    sum += table.tau[p][*s];
  }
  return sum / static_cast<double>(choice.size());
}

/// Per-prompt oracle: for each prompt, the size among `candidates` with the largest tau; ties go
/// to the smaller size (the reference label rule). `candidates` must be non-empty sizes of the table.
[[nodiscard]] inline std::vector<int> oracle_choice(const acceptance_table& table, std::span<const int> candidates) {
  if (candidates.empty()) throw error(table.source + ": the oracle needs at least one candidate block size");
  std::vector<std::size_t> columns;
  for (const int b : candidates) {
    const auto s = table.size_index(b);
    if (!s) throw error(table.source + ": no acceptance file for candidate block size " + std::to_string(b));
    columns.push_back(*s);
  }
  std::vector<int> choice(table.prompts.size());
  for (std::size_t p = 0; p < choice.size(); ++p) {
    std::size_t best = columns.front();
    for (const std::size_t s : columns) {
      const double t = table.tau[p][s], t_best = table.tau[p][best];
      if (t > t_best || (t == t_best && table.sizes[s] < table.sizes[best])) best = s;
    }
    choice[p] = table.sizes[best];
  }
  return choice;
}

/// The sizes `lo..hi` (inclusive) of a candidate window. Throws `error` naming every size of the
/// window that the table lacks, or when `lo > hi` or `lo < 1`.
[[nodiscard]] inline std::vector<int> window_sizes(const acceptance_table& table, int lo, int hi) {
  const std::string window = "window " + std::to_string(lo) + ":" + std::to_string(hi);
  if (lo < 1 || lo > hi) throw error(window + ": needs 1 <= LO <= HI");
  std::vector<int> sizes;
  std::string missing;
  for (int b = lo; b <= hi; ++b) {
    if (table.size_index(b)) sizes.push_back(b);
    else missing += (missing.empty() ? "" : ", ") + std::to_string(b);
  }
  if (!missing.empty())
    throw error(window + ": block sizes " + missing + " have no acceptance file in " + table.source +
                " (sizes: " + table.sizes_text() + ")");
  return sizes;
}

/// The block size of every prompt (table order) under `selection`, which is checked against the
/// table first (see `check_selection`).
[[nodiscard]] inline std::vector<int> selection_choice(const acceptance_table& table, const block_size_selection& selection) {
  check_selection(selection, table, "selection");
  std::vector<int> choice;
  choice.reserve(table.prompts.size());
  for (const auto& p : table.prompts) choice.push_back(selection.at(p));
  return choice;
}

/// Mean tau (over prompts) of the standard policies on one acceptance table.
struct replay_report {
  int prompts = 0;                              ///< number of prompts averaged over
  std::vector<std::pair<int, double>> fixed;    ///< every size of the table → mean tau, ascending
  int best_fixed_size = 0;                      ///< the fixed size with the largest mean (ties → smaller)
  double best_fixed_tau = 0.0;
  int window_lo = 0, window_hi = 0;             ///< the oracle's candidate window, inclusive
  double oracle_window = 0.0;                   ///< per-prompt best size within the window
  double oracle_all = 0.0;                      ///< per-prompt best size over every size of the table
  std::optional<double> selection;              ///< the given per-prompt selection, when one was given

  /// Mean tau of fixed size `b`, or nullopt when the table has no column for it.
  [[nodiscard]] std::optional<double> fixed_tau(int b) const {
    for (const auto& [size, tau] : fixed)
      if (size == b) return tau;
    return std::nullopt;
  }
};

/// Evaluates fixed sizes, the best fixed size, the per-prompt oracle over `[window_lo, window_hi]`
/// and over all sizes, and `selection` when not null. Throws `error` on a window size or a selection
/// the table cannot answer.
[[nodiscard]] inline replay_report replay(const acceptance_table& table, int window_lo, int window_hi,
                                          const block_size_selection* selection) {
  replay_report r;
  r.prompts = static_cast<int>(table.prompts.size());
  r.window_lo = window_lo;
  r.window_hi = window_hi;
  for (const int b : table.sizes) {
    r.fixed.emplace_back(b, mean_fixed_tau(table, b));
    if (r.fixed.size() == 1 || r.fixed.back().second > r.best_fixed_tau)
      std::tie(r.best_fixed_size, r.best_fixed_tau) = r.fixed.back();
  }
  r.oracle_window = mean_tau(table, oracle_choice(table, window_sizes(table, window_lo, window_hi)));
  r.oracle_all = mean_tau(table, oracle_choice(table, table.sizes));
  if (selection) r.selection = mean_tau(table, selection_choice(table, *selection));
  return r;
}

/// The report as JSON: `prompts`, `fixed` ({"<size>": mean tau}), `best_fixed` ({"size", "tau"}),
/// `window` ([lo, hi]), `oracle_window`, `oracle_all`, and `selection` when present.
[[nodiscard]] inline nlohmann::ordered_json to_json(const replay_report& r) {
  nlohmann::ordered_json fixed = nlohmann::ordered_json::object();
  for (const auto& [b, tau] : r.fixed) fixed[std::to_string(b)] = tau;
  nlohmann::ordered_json j{{"prompts", r.prompts},
                           {"fixed", std::move(fixed)},
                           {"best_fixed", {{"size", r.best_fixed_size}, {"tau", r.best_fixed_tau}}},
                           {"window", {r.window_lo, r.window_hi}},
                           {"oracle_window", r.oracle_window},
                           {"oracle_all", r.oracle_all}};
  if (r.selection) j["selection"] = *r.selection;
  return j;
}

}  // namespace blockpilot
