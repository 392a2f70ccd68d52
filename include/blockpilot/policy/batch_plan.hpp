// Planning the drafts of requests served together: a batch step costs what its rows cost together, so
// which drafts to verify is one decision for the whole batch, not one per request. Given each request's
// expected gain per draft (a trimming policy's draft_gains) and the step cost by total rows, keep the
// drafts with the most expected committed tokens per unit of the batch step's cost: where rows are
// dear, only the surest drafts of the surest requests. An engine that pads every block to the longest
// pays by that width instead of the rows: plan_padded_drafts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "blockpilot/status.hpp"

namespace blockpilot {

/// True when one request's draft gains are as the planners assume them: finite, not negative and not
/// increasing along its drafts.
[[nodiscard]] inline bool plannable_gains(std::span<const double> gains) {
  for (std::size_t k = 0; k < gains.size(); ++k)
    if (!std::isfinite(gains[k]) || gains[k] < 0 || (k > 0 && gains[k] > gains[k - 1])) return false;
  return true;
}

namespace detail {
/// The planners' inputs as they assume them: every request's gains plannable, every cost finite and
/// positive.
inline void check_plan_inputs(const char* planner, std::span<const std::span<const double>> gains,
                              std::span<const double> costs) {
  for (const auto& g : gains)
    if (!plannable_gains(g))
      throw error(std::string(planner) + ": a request's gains must be finite, not negative and not increasing");
  for (const double c : costs)
    if (!std::isfinite(c) || c <= 0) throw error(std::string(planner) + ": every cost must be finite and positive");
}
}  // namespace detail

/// Chooses kept[i], the drafts of request i to verify, maximising (n + the kept drafts' gains) /
/// row_cost[n + the kept drafts - 1] for n requests, each with its own token (its anchor row) and the
/// gains of its drafts (gains[i][k-1] of its k-th draft, non-increasing in k, as draft_gains gives them);
/// row_cost[R-1] is a step's cost with R rows in all, in any unit (a step_cost_model's curve over rows).
/// For every number m of draft rows the best drafts are the m largest gains — prefixes of each request's,
/// since those do not increase — so the plan compares m = 0 .. row_cost.size() - n and keeps the best
/// rate; the fewest rows on ties, and at equal gains the earlier request and draft. With one request this
/// is speed_cutoff's own choice. `kept` needs gains.size() entries and row_cost at least max(n, 1) entries;
/// gains that are not finite, negative or increasing, and costs that are not finite and positive, throw
/// `error`. `scratch` holds the candidate drafts (reused between calls).
inline void plan_batch_drafts(std::span<const std::span<const double>> gains, std::span<const double> row_cost,
                              std::span<int> kept, std::vector<std::tuple<double, int, int>>& scratch) {
  const std::size_t n = gains.size();
  if (kept.size() < n || row_cost.size() < std::max<std::size_t>(n, 1))
    throw error("plan_batch_drafts: needs a kept entry per request and a row cost for each request's anchor");
  detail::check_plan_inputs("plan_batch_drafts", gains, row_cost);
  scratch.clear();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < gains[i].size(); ++k)
      scratch.emplace_back(-gains[i][k], static_cast<int>(i), static_cast<int>(k));
  const std::size_t extra = std::min(scratch.size(), row_cost.size() - std::max<std::size_t>(n, 1));
  std::partial_sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(extra), scratch.end());
  double tokens = static_cast<double>(n), best_rate = tokens / row_cost[std::max<std::size_t>(n, 1) - 1];
  std::size_t best = 0;
  for (std::size_t m = 1; m <= extra; ++m)
    if (const double rate = (tokens -= std::get<0>(scratch[m - 1])) / row_cost[n + m - 1]; rate > best_rate)
      best = m, best_rate = rate;
  std::fill(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(n), 0);
  for (std::size_t m = 0; m < best; ++m) ++kept[static_cast<std::size_t>(std::get<1>(scratch[m]))];
}

/// For a batch whose blocks are padded to the longest (a step costs by its width w, the rows of the longest
/// block, whatever the others hold): chooses kept[i] = min(w - 1, gains[i].size()) for the w maximising
/// (n + the kept drafts' gains) / width_cost[w - 1] — under a width every request's drafts up to it come
/// free, and no gain is negative. The narrowest width on ties; w runs up to width_cost.size() and one past the
/// most drafts. `kept` needs gains.size() entries, width_cost at least one; bad gains or costs throw `error`,
/// as in plan_batch_drafts.
inline void plan_padded_drafts(std::span<const std::span<const double>> gains, std::span<const double> width_cost,
                               std::span<int> kept) {
  const std::size_t n = gains.size();
  if (kept.size() < n || width_cost.empty())
    throw error("plan_padded_drafts: needs a kept entry per request and the cost of a block of one row");
  detail::check_plan_inputs("plan_padded_drafts", gains, width_cost);
  std::size_t most = 0;
  for (const auto& g : gains) most = std::max(most, g.size());
  const std::size_t widths = std::min(width_cost.size(), most + 1);
  double tokens = static_cast<double>(n), best_rate = tokens / width_cost[0];
  std::size_t best = 1;
  for (std::size_t w = 2; w <= widths; ++w) {
    for (const auto& g : gains)
      if (g.size() >= w - 1) tokens += g[w - 2];
    if (const double rate = tokens / width_cost[w - 1]; rate > best_rate) best = w, best_rate = rate;
  }
  for (std::size_t i = 0; i < n; ++i) kept[i] = static_cast<int>(std::min(best - 1, gains[i].size()));
}

}  // namespace blockpilot
