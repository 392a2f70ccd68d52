// The speculative decode loop (DFlash reference semantics): prefill, one policy decision, then
// draft b-1 tokens, verify the block in one target call, accept a prefix, commit a+1 tokens.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/concepts.hpp"
#include "blockpilot/engine/decode_stage.hpp"
#include "blockpilot/engine/generation.hpp"

namespace blockpilot {

namespace detail {
template <class A>
concept wants_draft_probabilities = requires { requires static_cast<bool>(A::needs_draft_probabilities); };

class stage_clock {
 public:
  stage_clock() : last_(std::chrono::steady_clock::now()) {}
  /// Seconds since the previous lap (or construction), added to `bucket`.
  void lap(double& bucket) {
    const auto now = std::chrono::steady_clock::now();
    bucket += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  /// Starts a new lap without booking the time to a stage (it stays in the total, as bookkeeping).
  void skip() { last_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point last_;
};
}  // namespace detail

/// Composes a Drafter, a Verifier, a block-size Policy and an Acceptance rule on a Backend.
/// Holds references to the models (the engine owns them) and owns the policy and its buffers,
/// which are sized once per request from `policy.max_block_size()` and the vocabulary.
/// On `cuda_backend` (include blockpilot/cuda/decode_stage.cuh) the verifier's logits, the drafter's q
/// and the policy's prefill row are device memory; tokens and the loop stay on the host.
/// Not thread-safe: one decoder per concurrent request stream.
template <class Drafter, class Verifier, class Policy, class Acceptance = greedy_match, class Backend = cpu_backend>
class speculative_decoder {
  static_assert(drafter<Drafter>,
                "Drafter does not model blockpilot::drafter: it needs vocab_size(), max_draft_rows(), "
                "begin(prompt), draft(draft_request, span<token_id>) and commit(n), each returning status "
                "where concepts.hpp says so");
  static_assert(verifier<Verifier>,
                "Verifier does not model blockpilot::verifier: it needs vocab_size(), "
                "prefill(prompt, matrix_view<const float>&), score(block, matrix_view<const float>&) and commit(n)");
  static_assert(block_size_policy<Policy>,
                "Policy does not model blockpilot::block_size_policy: it needs max_block_size() and "
                "choose(const request_features&) -> block_size_choice");
  static_assert(decodes_on<Acceptance, Backend>,
                "Acceptance is not an acceptance rule implemented on this Backend: use greedy_match, "
                "sample_and_match or rejection_sampling (for cuda_backend include blockpilot/cuda.cuh), or "
                "specialise acceptance_op<Rule, Backend> for your own rule");
  static_assert(!decodes_on<Acceptance, Backend> || policy_fits_stage<Policy, Acceptance, Backend>,
                "the policy reads the target's logits in another memory space than this Backend keeps them: "
                "on cuda_backend use a fixed size or cuda_blockpilot_policy (blockpilot/cuda/blockpilot_policy.cuh)");
  static_assert(!detail::wants_draft_probabilities<Acceptance> || drafter_with_probabilities<Drafter>,
                "this acceptance rule needs draft probabilities: give the drafter "
                "draft(draft_request, span<token_id>, matrix_view<float> q), or use sample_and_match");
  static_assert(!drafter_with_context<Drafter> || verifier_with_context_features<Verifier>,
                "the drafter consumes target context features (append_context) but the verifier does not "
                "provide context_features(): add it to the verifier, or use a drafter that needs no context");

  static constexpr bool uses_probabilities = detail::wants_draft_probabilities<Acceptance>;
  static constexpr bool wires_context = drafter_with_context<Drafter> && verifier_with_context_features<Verifier>;

 public:
  using drafter_type = Drafter;
  using verifier_type = Verifier;
  using policy_type = Policy;
  using acceptance_type = Acceptance;

  speculative_decoder(Drafter& d, Verifier& v, Policy policy = Policy{}, Backend backend = Backend{})
      : drafter_(d), verifier_(v), policy_(std::move(policy)), stage_(backend) {}

  [[nodiscard]] Policy& policy() { return policy_; }
  [[nodiscard]] const Policy& policy() const { return policy_; }

  /// Generates up to `config.max_new_tokens` tokens after `prompt`. On an error the result keeps
  /// every token committed before it, `result.error` and `result.failed_stage` say what failed,
  /// and the decoder (and the models, which start afresh on the next prefill) stay usable.
  status generate(std::span<const token_id> prompt, const generation_config& config, generation_result& result) {
    result.tokens.clear();
    result.error = status::success;
    result.failed_stage = {};
    const int max_block = policy_.max_block_size();
    result.stats.reset(std::max(max_block, 1));
    const status s = run(prompt, config, max_block, result);
    if (s != status::success) result.error = s;
    result.stats.generated = static_cast<std::int64_t>(result.tokens.size());
    return s;
  }

 private:
  status fail(generation_result& r, std::string_view stage, status s) {
    r.failed_stage = stage;
    return s;
  }

  [[nodiscard]] status check_block_size(int b, int max_block) const {
    return b >= 1 && b <= max_block && b - 1 <= drafter_.max_draft_rows() ? status::success
                                                                            : status::invalid_block_size;
  }

  [[nodiscard]] static bool check_logits(const matrix_view<const float>& logits, std::int64_t rows, std::int64_t vocab) {
    return logits.data != nullptr && logits.rows == rows && logits.cols == vocab;
  }

  status reserve(std::size_t prompt_size, int max_new, int max_block, std::int64_t vocab) {
    context_.reserve(prompt_size + static_cast<std::size_t>(max_new) + static_cast<std::size_t>(max_block));
    block_.resize(static_cast<std::size_t>(max_block) + 1);  // + the bonus after a full block
    return stage_.reserve(max_block, vocab);
  }

  status run(std::span<const token_id> prompt, const generation_config& config, int max_block, generation_result& r) {
    request_stats& stats = r.stats;
    detail::stage_clock clock;
    struct total_timer {  // total wall time however the request ends
      detail::stage_clock clock;
      double& bucket;
      ~total_timer() { clock.lap(bucket); }
    } total{clock, stats.seconds.total};

    const std::int64_t vocab = verifier_.vocab_size();
    if (prompt.empty()) return fail(r, "input", status::empty_prompt);
    if (static_cast<std::int64_t>(drafter_.vocab_size()) != vocab) return fail(r, "input", status::vocab_mismatch);
    if (!(config.temperature >= 0.0f) || config.temperature > 1e30f) return fail(r, "input", status::invalid_temperature);
    if (config.max_new_tokens < 0) return fail(r, "input", status::invalid_argument);
    if (max_block < 1) return fail(r, "policy", status::invalid_block_size);
    for (const token_id t : prompt)
      if (t < 0 || t >= vocab) return fail(r, "input", status::invalid_token);
    if (config.max_new_tokens == 0) return status::success;
    if (const status s = reserve(prompt.size(), config.max_new_tokens, max_block, vocab); s != status::success)
      return fail(r, "accept", s);
    const auto max_new = static_cast<std::size_t>(config.max_new_tokens);
    r.tokens.reserve(max_new);
    const auto is_stop = [&](token_id t) {
      return std::find(config.stop_tokens.begin(), config.stop_tokens.end(), t) != config.stop_tokens.end();
    };
    clock.skip();

    // Prefill, policy decision, first token (the first anchor).
    matrix_view<const float> logits;
    if (const status s = verifier_.prefill(prompt, logits); s != status::success) return fail(r, "prefill", s);
    if (!check_logits(logits, 1, vocab)) return fail(r, "prefill", status::model_error);
    clock.lap(stats.seconds.prefill);

    const block_size_choice choice = policy_.choose({prompt, logits.row(0), config.temperature});
    int b = choice.block_size;
    stats.block_size = b;
    stats.policy_fallback = choice.fallback;
    if (const status s = check_block_size(b, max_block); s != status::success) return fail(r, "policy", s);
    clock.lap(stats.seconds.policy);

    token_id first;
    if (const status s = stage_.first_token(logits, config.temperature, philox_stream{config.seed, 0}, first);
        s != status::success)
      return fail(r, "prefill", s);
    context_.assign(prompt.begin(), prompt.end());
    context_.push_back(first);
    r.tokens.push_back(first);
    clock.lap(stats.seconds.accept);
    emit(config, r, 0);
    clock.skip();

    const bool drafting = per_step_block_size_policy<Policy> || b > 1;
    if (drafting) {
      if (const status s = drafter_.begin(prompt); s != status::success) return fail(r, "draft", s);
      if constexpr (wires_context)
        if (const status s = drafter_.append_context(verifier_.context_features()); s != status::success)
          return fail(r, "draft", s);
      clock.lap(stats.seconds.draft);
    }
    if (is_stop(first)) return status::success;

    for (std::uint64_t step = 1; r.tokens.size() < max_new; ++step) {
      const philox_stream stream{config.seed, step};
      block_[0] = context_.back();
      const std::span<token_id> drafts(block_.data() + 1, static_cast<std::size_t>(b - 1));
      const matrix_view<float> q = stage_.draft_probs(b - 1, vocab);
      if (b > 1) {
        const draft_request request{context_, b, config.temperature, stream};
        status s;
        if constexpr (uses_probabilities)
          s = drafter_.draft(request, drafts, q);
        else
          s = drafter_.draft(request, drafts);
        if (s != status::success) return fail(r, "draft", s);
        clock.lap(stats.seconds.draft);
      }

      const std::span<const token_id> block(block_.data(), static_cast<std::size_t>(b));
      if (const status s = verifier_.score(block, logits); s != status::success) return fail(r, "verify", s);
      if (!check_logits(logits, b, vocab)) return fail(r, "verify", status::model_error);
      clock.lap(stats.seconds.verify);

      acceptance_result decision;
      const acceptance_input input{logits, block, q, config.temperature, stream};
      if (const status s = stage_.accept(input, decision); s != status::success) return fail(r, "accept", s);
      clock.lap(stats.seconds.accept);

      const int a = decision.accepted;
      int next_b = b;
      if constexpr (per_step_block_size_policy<Policy>) {  // before commit: the rows are valid until then
        next_b = policy_.next(step_record{static_cast<int>(step - 1), b, a, logits.rows_slice(0, a + 1)});
        clock.lap(stats.seconds.policy);
      }
      if (const status s = verifier_.commit(a + 1); s != status::success) return fail(r, "commit", s);
      clock.lap(stats.seconds.verify);
      if (drafting) {
        if (const status s = drafter_.commit(a + 1); s != status::success) return fail(r, "commit", s);
        if constexpr (wires_context)
          if (const status s = drafter_.append_context(verifier_.context_features().rows_slice(0, a + 1));
              s != status::success)
            return fail(r, "commit", s);
        clock.lap(stats.seconds.draft);
      }
      stats.record_step(b, a);
      block_[static_cast<std::size_t>(a) + 1] = decision.bonus;
      const std::size_t committed = r.tokens.size();
      bool stopped = false;
      for (int j = 1; j <= a + 1 && r.tokens.size() < max_new && !stopped; ++j) {
        const token_id t = block_[static_cast<std::size_t>(j)];
        context_.push_back(t);
        r.tokens.push_back(t);
        stopped = is_stop(t);
      }
      emit(config, r, committed);
      if (stopped) return status::success;
      if (const status s = check_block_size(next_b, max_block); s != status::success) return fail(r, "policy", s);
      b = next_b;
      clock.skip();
    }
    return status::success;
  }

  /// Passes r.tokens[from, end) to config.on_tokens, when set.
  static void emit(const generation_config& config, const generation_result& r, std::size_t from) {
    if (config.on_tokens && from < r.tokens.size())
      config.on_tokens(std::span<const token_id>(r.tokens).subspan(from));
  }

  Drafter& drafter_;
  Verifier& verifier_;
  Policy policy_;
  std::vector<token_id> context_;
  std::vector<token_id> block_;
  decode_stage<Acceptance, Backend> stage_;
};

}  // namespace blockpilot
