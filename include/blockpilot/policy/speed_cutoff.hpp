// The speed cut-off: every step, verify the prefix of the drafts with the most expected committed
// tokens per unit of step cost. A draft's chance of acceptance is learned by its confidence level
// (lookup: the matched n-gram's length; a model drafter: its row's top probability), from the
// request's own steps and, behind them, from every earlier request; the cost is the machine's,
// measured as the decode runs (step_cost_model). It generalises the fixed threshold of
// confidence_cutoff: where rows are cheap it verifies long matched continuations, where they are
// dear only the surest drafts.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/policy/step_cost_model.hpp"

namespace blockpilot {

struct speed_cutoff_options {
  int levels = 10;             ///< confidence levels: equal bins of [0, 1]
  int positions = 4;           ///< a draft's position in the block, the last counting for it and every later one
  double prior_weight = 4;     ///< drafts' worth of the prior (a level's chance = its confidence)
  double request_weight = 8;   ///< drafts' worth of the earlier requests' estimate in a request's own
  double memory = 0.998;       ///< the weight the earlier requests' counts keep at each new draft seen
  double explore = 0;          ///< standard errors of the request's estimate added to it when choosing
  bool learn_costs = true;     ///< refresh the step cost from the decode's timings (else keep the prior curve)
};

/// Models batch_trimming_policy (so draft_trimming_policy) and per_step_block_size_policy; the drafter must model
/// drafter_with_confidence. Drafts are taken as accepted with the chance p(level, position) of their
/// confidence level and place in the block, given that those before them were, until the first
/// rejection; so verifying the first k commits E(k) = 1 + sum_{j<=k} prod_{i<=j} p_i tokens on
/// average, and the policy keeps argmax_k E(k) / cost(k+1) (p optionally taken optimistically,
/// `explore`, so that a request tries what the earlier ones wrote off: on the mixed workload's
/// training and validation replays that cost more than it found). After each step it counts the kept drafts
/// up to the first rejection: accepted ones as hits, the rejected one as a miss (drafts after it
/// show nothing). By position, the chances learn how a run of accepted drafts goes on (a copied
/// passage keeps being copied).
///
/// A copy is independent. Requests served at the same time by one thread (batched_decoder) learn
/// together through `shared()`: each gets its own cut-off for its own request's counts and steps, all
/// adding to and reading one set of earlier-request estimates, unsynchronised (threads take copies).
/// A moved-from cut-off may only be assigned to or destroyed.
class speed_cutoff {
 public:
  using logits_backend = void;  ///< reads no logits: runs on every backend

  /// Drafts seen and accepted (memory-weighted) at one confidence level and position.
  struct counts {
    double hits = 0, seen = 0;
  };

  static constexpr int max_levels = 1000;   ///< confidence levels at most
  static constexpr int max_positions = block_size_limit;  ///< block positions told apart at most

  /// Drafts up to cost.max_block_size() - 1 per step. Throws `error` on bad options or a curve past
  /// block_size_limit.
  explicit speed_cutoff(step_cost_model cost, speed_cutoff_options options = {})
      : cost_(std::move(cost)), options_(options) {
    if (options.levels < 1 || options.positions < 1 || options.levels > max_levels || options.positions > max_positions ||
        !(std::isfinite(options.prior_weight) && options.prior_weight > 0) ||
        !(std::isfinite(options.request_weight) && options.request_weight >= 0) ||
        !(std::isfinite(options.explore) && options.explore >= 0) || !(options.memory > 0 && options.memory <= 1))
      throw error("speed_cutoff: needs levels in 1.." + std::to_string(max_levels) + ", positions in 1.." +
                  std::to_string(max_positions) + ", a finite prior_weight > 0, finite request_weight, explore >= 0 and "
                  "memory in (0, 1]");
    if (cost_.max_block_size() > block_size_limit)
      throw error("speed_cutoff: a cost curve of at most " + std::to_string(block_size_limit) + " sizes, not " +
                  std::to_string(cost_.max_block_size()));
    const auto n = static_cast<std::size_t>(options.levels) * static_cast<std::size_t>(options.positions);
    global_ = std::make_shared<std::vector<counts>>(n);
    request_ = std::vector<counts>(n);
    reserve_scratch();
  }
  speed_cutoff(const speed_cutoff& o)
      : cost_(o.cost_), options_(o.options_), global_(o.global_ ? std::make_shared<std::vector<counts>>(*o.global_) : nullptr),
        request_(o.request_), kept_levels_(o.kept_levels_) {
    reserve_scratch();
  }
  speed_cutoff(speed_cutoff&&) noexcept = default;
  speed_cutoff& operator=(const speed_cutoff& o) { return *this = speed_cutoff(o); }
  speed_cutoff& operator=(speed_cutoff&&) noexcept = default;

  /// A cut-off for another request served beside this one's, on the same thread: the same options and
  /// current cost curve, counts of its own for its request, and the earlier requests' estimates shared
  /// with this one — what either learns, both use. (Each refreshes its own cost curve; in a batch a
  /// step's timing is the whole batch's, so there `learn_costs = false` with a curve measured for the
  /// batch fits better.)
  [[nodiscard]] speed_cutoff shared() const {
    speed_cutoff s(cost_, options_);
    s.global_ = global_;
    return s;
  }

  /// What the earlier requests (and the current one) have shown at level `l` and 0-based `position`.
  [[nodiscard]] counts learned(int l, int position) const { return (*global_)[index(l, position)]; }

  [[nodiscard]] int max_block_size() const { return cost_.max_block_size(); }
  [[nodiscard]] const step_cost_model& cost_model() const { return cost_; }
  [[nodiscard]] const speed_cutoff_options& options() const { return options_; }

  /// The level of a confidence (not a number counts as 0).
  [[nodiscard]] int level(float confidence) const {
    const double c = std::isfinite(confidence) ? std::clamp(static_cast<double>(confidence), 0.0, 1.0) : 0.0;
    return std::min(static_cast<int>(c * options_.levels), options_.levels - 1);
  }

  /// The current chance that a draft of level `l` at 0-based `position` is accepted, given those
  /// before it were: the request's counts, shrunk toward the estimate of all requests' counts (which
  /// hold this request's too), itself shrunk toward the prior (the level's confidence).
  [[nodiscard]] double acceptance(int l, int position) const {
    const std::size_t i = index(l, position);
    const double prior = (static_cast<double>(std::clamp(l, 0, options_.levels - 1)) + 0.5) / options_.levels;
    const counts& g = (*global_)[i];
    const double earlier = (g.hits + options_.prior_weight * prior) / (g.seen + options_.prior_weight);
    const double weight = request_[i].seen + options_.request_weight;  // 0 before the request's first draft with request_weight 0
    return weight > 0 ? (request_[i].hits + options_.request_weight * earlier) / weight : earlier;
  }

  /// The chance the choice uses: acceptance plus `explore` standard errors of the request's estimate.
  [[nodiscard]] double planned_acceptance(int l, int position) const {
    const double p = acceptance(l, position);
    const double n = request_[index(l, position)].seen + options_.request_weight;
    return std::min(1.0, p + options_.explore * std::sqrt(p * (1 - p) / std::max(n, 1.0)));
  }

  /// Starts a request: its own counts from nothing; drafts up to the largest size.
  [[nodiscard]] block_size_choice choose(const request_features&) {
    std::fill(request_.begin(), request_.end(), counts{});
    cost_.begin_request();
    return {max_block_size(), false};
  }

  /// What each draft adds to a step: gains[k-1] = the chance that drafts 1..k are all accepted, so that
  /// verifying the first k commits 1 + gains[0] + ... + gains[k-1] tokens on average; non-increasing in
  /// k. One per draft the policy would verify (at most max_block_size() - 1). Decides nothing.
  void draft_gains(std::span<const float> confidence, std::vector<double>& gains) const {
    const int n = std::min(static_cast<int>(confidence.size()), max_block_size() - 1);
    gains.clear();
    double survive = 1;
    for (int k = 1; k <= n; ++k)
      gains.push_back(survive *= planned_acceptance(level(confidence[static_cast<std::size_t>(k - 1)]), k - 1));
  }

  /// The prefix of drafts to verify: the most expected committed tokens per unit of step cost (none
  /// unless some prefix beats one token per plain step); remembers their levels for the step's outcome.
  [[nodiscard]] int keep_drafts(std::span<const float> confidence) {
    draft_gains(confidence, gains_);
    double tokens = 1, best_rate = 1;
    int best = 0;
    for (int k = 1; k <= static_cast<int>(gains_.size()); ++k)
      if (const double rate = (tokens += gains_[static_cast<std::size_t>(k - 1)]) / cost_.cost(k + 1); rate > best_rate)
        best = k, best_rate = rate;
    return keep(confidence, best);
  }

  /// Verifies the first k drafts (clamped to [0, what draft_gains covers]), chosen elsewhere: by a batch
  /// that plans several requests' drafts together (plan_batch_drafts). Remembers their levels as
  /// keep_drafts does; returns the k kept.
  int keep(std::span<const float> confidence, int k) {
    k = std::clamp(k, 0, std::min(static_cast<int>(confidence.size()), max_block_size() - 1));
    kept_levels_.clear();
    for (int j = 0; j < k; ++j) kept_levels_.push_back(level(confidence[static_cast<std::size_t>(j)]));
    return k;
  }

  [[nodiscard]] int next(const step_record& step) {
    if (options_.learn_costs && step.step > 0) cost_.observe(step.block_size, step.seconds);  // not the first: cold caches
    const int kept = std::min(step.block_size - 1, static_cast<int>(kept_levels_.size()));
    const int seen = std::min(step.accepted + 1, kept);
    for (int j = 0; j < seen; ++j) count(index(kept_levels_[static_cast<std::size_t>(j)], j), j < step.accepted);
    kept_levels_.clear();
    return max_block_size();
  }

 private:
  [[nodiscard]] std::size_t index(int l, int position) const {
    return static_cast<std::size_t>(std::clamp(l, 0, options_.levels - 1)) * static_cast<std::size_t>(options_.positions) +
           static_cast<std::size_t>(std::clamp(position, 0, options_.positions - 1));
  }
  void reserve_scratch() {  // a step then allocates nothing
    kept_levels_.reserve(static_cast<std::size_t>(max_block_size()));
    gains_.reserve(static_cast<std::size_t>(max_block_size()));
  }
  void count(std::size_t i, bool accepted) {
    request_[i].hits += accepted, request_[i].seen += 1;
    for (counts& c : *global_) c.hits *= options_.memory, c.seen *= options_.memory;
    (*global_)[i].hits += accepted, (*global_)[i].seen += 1;
  }

  step_cost_model cost_;
  speed_cutoff_options options_;
  std::shared_ptr<std::vector<counts>> global_;  ///< every request's counts so far (the current one's too), shared by shared() copies
  std::vector<counts> request_;
  std::vector<int> kept_levels_;
  std::vector<double> gains_;  ///< keep_drafts' scratch
};

}  // namespace blockpilot
