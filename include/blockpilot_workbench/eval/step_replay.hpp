// Replay of per-step policies on recorded greedy decodes: at T = 0 the output does not depend on the
// policy, so a request's recorded continuation fixes, for every step any policy takes, the drafts a
// drafter proposes there and how many of them the target accepts. Replaying a policy through the
// continuation gives its exact steps and tau, and with a step cost curve its estimated speedup,
// without decoding again and without the noise of live timing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"

namespace blockpilot {

/// One request replayed: its steps by scored size and their cost in plain steps. The first token
/// comes from the prefill's row, as in a decode; the steps commit the others.
struct step_replay_result {
  std::int64_t tokens = 0;     ///< the continuation's length
  std::int64_t committed = 0;  ///< by the steps: tokens - 1
  std::int64_t steps = 0;
  std::int64_t accepted = 0;   ///< drafts accepted, counted as the decoder counts them (past the token limit too)
  double cost = 0;             ///< sum of cost(b) over the steps (plain decoding costs `committed`)
  std::vector<std::int64_t> steps_by_block;  ///< index b

  [[nodiscard]] double tau() const { return steps == 0 ? 1.0 : static_cast<double>(committed) / static_cast<double>(steps); }
  /// The decoder's tau (request_stats::tau, 1 without steps as a sweep records it): accepted drafts
  /// plus one per step, which exceeds tau() when the last step's drafts run past the token limit.
  [[nodiscard]] double decoder_tau() const {
    return steps == 0 ? 1.0 : static_cast<double>(accepted + steps) / static_cast<double>(steps);
  }
  [[nodiscard]] double speedup() const { return cost == 0 ? 1.0 : static_cast<double>(committed) / cost; }
  /// Counts one step of size b that accepted `drafts` and committed `tokens` at `step_cost`.
  void add_step(int b, int drafts, std::size_t tokens, double step_cost) {
    accepted += drafts;
    cost += step_cost;
    committed += static_cast<std::int64_t>(tokens);
    ++steps;
    ++steps_by_block[static_cast<std::size_t>(b)];
  }
};

namespace step_replay_detail {

/// How many of `drafts` (at most `limit`) the greedy target accepts after `done` tokens of `continuation`.
inline int accepted_drafts(std::span<const token_id> drafts, std::span<const token_id> continuation, std::size_t done,
                           int limit) {
  int a = 0;
  while (a < limit && done + static_cast<std::size_t>(a) < continuation.size() &&
         drafts[static_cast<std::size_t>(a)] == continuation[done + static_cast<std::size_t>(a)])
    ++a;
  return a;
}

}  // namespace step_replay_detail

/// Replays `policy` (any block-size policy; per-step and trimming ones are driven as the decoder
/// drives them, with step_record::seconds the step's cost in units of a plain step's `unit_seconds`,
/// times a log-normal factor of standard deviation `timing_noise` drawn from `rng` when it is
/// positive, as live timings scatter) through the greedy `continuation` of `prompt`, drafting with
/// `drafter`. cost[b-1] is a step of size b relative to b = 1, for b = 1..policy.max_block_size().
/// The policy reads no logits: choose() gets empty request features, and step records carry no target
/// rows. `beyond`, when given, is what the target would write after the continuation: drafts of the
/// last step that run past it are then counted as accepted as a decoder counts them (`accepted`), and
/// still not committed; without it their outcome is unknown, and a per-step policy does not learn from
/// that last step. Throws `error` when the drafter fails or the cost curve is too short.
template <block_size_policy Policy, drafter Drafter>
[[nodiscard]] step_replay_result replay_steps(Policy& policy, Drafter& drafter, std::span<const token_id> prompt,
                                              std::span<const token_id> continuation, std::span<const double> cost,
                                              double unit_seconds = 1e-3, double timing_noise = 0,
                                              std::mt19937_64* rng = nullptr, std::span<const token_id> beyond = {}) {
  const int max_b = std::min(policy.max_block_size(), drafter.max_draft_rows() + 1);
  if (max_b < 1 || cost.size() < static_cast<std::size_t>(max_b))
    throw error("replay_steps: needs a step cost for every size up to " + std::to_string(max_b));
  step_replay_result r;
  r.tokens = static_cast<std::int64_t>(continuation.size());
  r.steps_by_block.assign(static_cast<std::size_t>(max_b) + 1, 0);
  std::vector<token_id> context(prompt.begin(), prompt.end()), drafts(static_cast<std::size_t>(max_b));
  std::vector<token_id> target(continuation.begin(), continuation.end());  // what acceptance is checked against
  target.insert(target.end(), beyond.begin(), beyond.end());
  if (drafter.begin(prompt) != status::success) throw error("replay_steps: the drafter's begin failed");
  int b = std::clamp(policy.choose(request_features{}).block_size, 1, max_b);
  if (!continuation.empty()) context.push_back(continuation.front());  // the prefill's token
  for (std::size_t done = 1; done < continuation.size();) {
    int scored = 1;
    if (b > 1) {
      const draft_request request{context, b, 0.0f, {}};
      if (drafter.draft(request, std::span(drafts).first(static_cast<std::size_t>(b - 1))) != status::success)
        throw error("replay_steps: the drafter failed");
      scored = b;
      if constexpr (draft_trimming_policy<Policy>)
        scored = std::clamp(policy.keep_drafts(drafter.draft_confidence().first(static_cast<std::size_t>(b - 1))), 0, b - 1) + 1;
    }
    const int accepted = step_replay_detail::accepted_drafts(drafts, target, done, scored - 1);
    const auto committed = std::min<std::size_t>(static_cast<std::size_t>(accepted) + 1, continuation.size() - done);
    const double step_cost = cost[static_cast<std::size_t>(scored - 1)];
    r.add_step(scored, accepted, committed, step_cost);
    if constexpr (per_step_block_size_policy<Policy>) {
      // A last step whose drafts ran past the known text has an unknown outcome: a policy that learns from
      // its steps (across requests too) is not told it, rather than told of rejections a decode never saw.
      const bool known = accepted == scored - 1 || done + static_cast<std::size_t>(accepted) < target.size();
      const double factor = timing_noise > 0 && rng ? std::lognormal_distribution<double>(0.0, timing_noise)(*rng) : 1.0;
      if (known)
        b = std::clamp(static_cast<int>(policy.next(step_record{static_cast<int>(r.steps - 1), scored, accepted, {},
                                                                step_cost * unit_seconds * factor})),
                       1, max_b);
    }
    context.insert(context.end(), continuation.begin() + static_cast<std::ptrdiff_t>(done),
                   continuation.begin() + static_cast<std::ptrdiff_t>(done + committed));
    done += committed;
    if (drafter.commit(static_cast<int>(committed)) != status::success) throw error("replay_steps: the drafter's commit failed");
  }
  return r;
}

/// The per-step oracle on the same continuation: before every step it knows how many of the
/// drafter's proposals the target will accept, and the sizes of all steps together are chosen for the
/// least total cost (dynamic programming over the committed length: from each length, every number
/// of drafts to verify, at its cost, leads to the length it commits). No policy that sees only the
/// past can be faster on this drafter; the distance to it is what better acceptance estimates could
/// still win. The drafter's proposals may not depend on the block size beyond their number (lookup's
/// do not). Throws `error` when the drafter fails or the cost curve is empty.
template <drafter Drafter>
[[nodiscard]] step_replay_result replay_step_oracle(Drafter& drafter, std::span<const token_id> prompt,
                                                    std::span<const token_id> continuation, std::span<const double> cost) {
  const int max_b = std::min(static_cast<int>(cost.size()), drafter.max_draft_rows() + 1);
  if (max_b < 1) throw error("replay_step_oracle: needs a step cost for b = 1");
  const std::size_t n = continuation.size();
  step_replay_result r;
  r.tokens = static_cast<std::int64_t>(n);
  r.steps_by_block.assign(static_cast<std::size_t>(max_b) + 1, 0);
  if (n < 2) return r;
  // accepted[d]: drafts the target accepts from committed length d (of max_b - 1 proposed).
  std::vector<int> accepted(n, 0);
  std::vector<token_id> context(prompt.begin(), prompt.end()), drafts(static_cast<std::size_t>(std::max(max_b - 1, 1)));
  if (drafter.begin(prompt) != status::success) throw error("replay_step_oracle: the drafter's begin failed");
  context.push_back(continuation.front());
  for (std::size_t d = 1; d < n; ++d) {
    if (max_b > 1) {
      if (drafter.draft(draft_request{context, max_b, 0.0f, {}}, std::span(drafts).first(static_cast<std::size_t>(max_b - 1))) !=
          status::success)
        throw error("replay_step_oracle: the drafter failed");
      accepted[d] = step_replay_detail::accepted_drafts(drafts, continuation, d, max_b - 1);
    }
    context.push_back(continuation[d]);
    if (drafter.commit(1) != status::success) throw error("replay_step_oracle: the drafter's commit failed");
  }
  // k drafts verified from committed length d commit the accepted ones among them and one more.
  const auto reached = [&](std::size_t d, int k) { return std::min(n, d + static_cast<std::size_t>(std::min(k, accepted[d])) + 1); };
  // best[d]: the least cost from committed length d to the end; size[d]: the step that reaches it.
  std::vector<double> best(n + 1, 0.0);
  std::vector<int> size(n + 1, 1);
  for (std::size_t d = n - 1; d >= 1; --d) {
    best[d] = cost[0] + best[d + 1];
    for (int k = 1; k < max_b; ++k)
      if (const double c = cost[static_cast<std::size_t>(k)] + best[reached(d, k)]; c < best[d]) best[d] = c, size[d] = k + 1;
  }
  for (std::size_t d = 1; d < n;) {
    const std::size_t to = reached(d, size[d] - 1);
    r.add_step(size[d], std::min(size[d] - 1, accepted[d]), to - d, cost[static_cast<std::size_t>(size[d] - 1)]);
    d = to;
  }
  return r;
}

}  // namespace blockpilot
