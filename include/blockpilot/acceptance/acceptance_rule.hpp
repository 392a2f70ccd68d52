// The acceptance-rule policy: inputs and outputs of one verification, the rule tags, and the
// per-backend op that implements a rule (specialised in cpu/ and cuda/).
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/backend.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// Everything a rule reads for one block of one request.
struct acceptance_input {
  matrix_view<const float> target_logits;  ///< [b][vocab]: row j is the target's distribution for block position j+1
  std::span<const token_id> block;         ///< [b]: the anchor, then the b-1 draft tokens
  matrix_view<const float> draft_probs;    ///< [b-1][vocab]: q of each draft row (rejection sampling only), else empty
  float temperature = 0.0f;                ///< T >= 0; T < 1e-5 is greedy
  philox_stream rng;                       ///< this step's stream
  sampling_controls sampling{};            ///< top-k / top-p / min-p on p at T > 0 (acceptance/sampling.hpp)
};

/// What a rule decides: `accepted` drafts in [0, b-1] and the token that follows them, in [0, vocab).
/// speculative_decoder checks both: a decision outside them ends the request (stage "accept").
struct acceptance_result {
  int accepted = 0;
  token_id bonus = 0;
};

/// Greedy match: a draft is accepted while it equals the target's argmax (tokens the reference
/// accepts at T = 0). At T > 0 it still compares against argmax and samples nothing, and the decoder's
/// first token is the prefill row's argmax too: the output is the target's greedy decoding at any T
/// (drafters and policies still receive T).
struct greedy_match {
  static constexpr bool needs_draft_probabilities = false;
  static constexpr std::string_view name = "greedy";
};

/// Sample-and-match (the DFlash reference at T > 0): the target samples each position at T;
/// a draft is accepted while it equals the target's sample; the bonus is the sample at the first
/// mismatch. Distribution-exact for any drafter.
struct sample_and_match {
  static constexpr bool needs_draft_probabilities = false;
  static constexpr std::string_view name = "sample-match";
};

/// Lossless speculative rejection sampling (Leviathan et al. / Chen et al.): accept draft x with
/// probability min(1, p(x)/q(x)); on rejection sample from normalised max(p − q, 0); when every
/// draft is accepted the bonus comes from p. Needs the drafter's q, and drafts sampled from q.
/// Edge cases: q(x) = 0 or non-finite means the draft did not come from q: it is rejected and the
/// replacement is sampled from p itself (exact, because the event depends only on the drafter).
/// A residual of total mass 0 (p ≤ q everywhere, reachable only through rounding) also samples from p.
struct rejection_sampling {
  static constexpr bool needs_draft_probabilities = true;
  static constexpr std::string_view name = "rejection";
};

/// The names of the built-in rules, as a message lists them.
inline constexpr std::string_view builtin_rule_names = "greedy, sample-match or rejection";

/// Calls f(Rule{}) for the built-in rule whose `name` is `name` and returns true; returns false, without
/// calling f, for any other name (an engine that takes the rule from its configuration).
template <class F>
constexpr bool with_builtin_rule(std::string_view name, F&& f) {
  if (name == greedy_match::name) f(greedy_match{});
  else if (name == sample_and_match::name) f(sample_and_match{});
  else if (name == rejection_sampling::name) f(rejection_sampling{});
  else return false;
  return true;
}

/// The implementation of `Rule` on `Backend`. Left undefined. On the CPU it decides one request:
/// `workspace_size(max_block, vocab)` in bytes and `run(input, workspace, result)` (cpu/acceptance.hpp; the
/// workspace 8-byte aligned, else status::invalid_argument);
/// the batched contract (acceptance/batched.hpp) loops over it. On cuda_backend it is the batched
/// contract itself: `can_implement(shape)`, `workspace_size(shape)`, `run(backend, input, workspace,
/// output)` (cuda/acceptance.cuh). An engine adds a rule by defining a tag and specialising this
/// template for each backend it runs on; both decoders' stages take any rule that has it.
template <class Rule, class Backend>
struct acceptance_op;

/// A rule tag that has an implementation on `Backend`.
template <class Rule, class Backend = cpu_backend>
concept acceptance_rule =
    requires {
      { Rule::needs_draft_probabilities } -> std::convertible_to<bool>;
      { Rule::name } -> std::convertible_to<std::string_view>;
    } &&
    requires(const acceptance_input& in, std::span<std::byte> workspace, acceptance_result& out, int b,
             std::int64_t vocab) {
      { acceptance_op<Rule, Backend>::workspace_size(b, vocab) } -> std::convertible_to<std::size_t>;
      { acceptance_op<Rule, Backend>::run(in, workspace, out) } -> std::same_as<status>;
    };

}  // namespace blockpilot
