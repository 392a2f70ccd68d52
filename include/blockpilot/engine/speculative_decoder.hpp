// The speculative decode loop (DFlash reference semantics): prefill, one policy decision, then
// draft b-1 tokens, verify the block in one target call, accept a prefix, commit a+1 tokens.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <new>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/concepts.hpp"
#include "blockpilot/detail/fixed_point_softmax.hpp"
#include "blockpilot/engine/decode_stage.hpp"
#include "blockpilot/engine/generation.hpp"
#include "blockpilot/policy/batch_plan.hpp"

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

/// Adds the wall time of its scope to `bucket` (a call's share of the request's total).
struct scope_timer {
  stage_clock clock;
  double& bucket;
  explicit scope_timer(double& b) : bucket(b) {}
  scope_timer(const scope_timer&) = delete;
  scope_timer& operator=(const scope_timer&) = delete;
  ~scope_timer() { clock.lap(bucket); }
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
  static_assert(!draft_trimming_policy<Policy> || drafter_with_confidence<Drafter>,
                "the policy trims drafted blocks by the drafter's confidence: give the drafter "
                "draft_confidence() -> span<const float> (concepts.hpp), or use a policy that does not trim");
  static_assert(!drafter_with_context<Drafter> || verifier_with_context_features<Verifier>,
                "the drafter consumes target context features (append_context) but the verifier does not "
                "provide them: give the verifier `matrix_view<const float> context_features() const`, or use a "
                "drafter that needs no context");
  // Near misses (concepts.hpp): a capability named with another signature would be silently left out.
  static_assert(!detail::names_append_context<Drafter> || drafter_with_context<Drafter>,
                "Drafter has append_context, but not as the decoder calls it: `status append_context(matrix_view<const "
                "float> rows)`; as written it would never receive the target's context features");
  static_assert(!detail::names_next<Policy> || per_step_block_size_policy<Policy>,
                "Policy has next, but not as the decoder calls it: `int next(const step_record&)`; as written it "
                "would never be asked for the next step's size");
  static_assert(!detail::names_keep_drafts<Policy> || draft_trimming_policy<Policy>,
                "Policy has keep_drafts, but not as the decoder calls it: `int keep_drafts(std::span<const float> "
                "confidence)`; as written it would never trim a block");

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
  [[nodiscard]] Drafter& drafter() { return drafter_; }
  [[nodiscard]] Verifier& verifier() { return verifier_; }

  /// Generates up to `config.max_new_tokens` tokens after `prompt`: `start`, then `step` until
  /// `done`. On an error the result keeps every token committed before it, `result.error` and
  /// `result.failed_stage` say what failed, and the decoder (and the models, which start afresh on
  /// the next prefill) stay usable. An exception from a callback of `config`, a model or the policy
  /// ends the request and goes on to the caller (on_tokens: status::cancelled, stage "cancel"; the others
  /// status::model_error, with the stage of the call: process_logits "accept", or "draft" where the
  /// drafter called it; the verifier "prefill", "verify" or "commit"; the drafter "draft" or "commit";
  /// the policy "policy"); the decoder stays usable then too.
  status generate(std::span<const token_id> prompt, const generation_config& config, generation_result& result) {
    start(prompt, config, result);
    while (!done()) step();
    return result.error;
  }

  // --- The step API: one request driven one step at a time ---------------------------------------
  // `start` validates, prefills, decides the block size and commits the first token; every `step`
  // drafts, verifies, accepts and commits one block. An engine that runs its own batched forward
  // pass splits a step into `draft_block` (returns the block to score), its own scoring, and
  // `finish_block(logits)`; one that decides several requests' drafts together splits `draft_block`
  // into `draft_untrimmed` and `trim_block(kept)`. Each call returns the request's status; after an
  // error, a stop token, the length cap or a cancellation `done()` is true and `result` is final.
  // `config` and `result` must outlive the request (until done() or the next start).

  /// Starts a request; the result is reset. Returns result.error.
  status start(std::span<const token_id> prompt, const generation_config& config, generation_result& result) {
    config_ = &config;
    result_ = &result;
    done_ = true;  // until the request is under way
    awaiting_logits_ = awaiting_trim_ = false;
    result.tokens.clear();
    result.error = status::success;
    result.failed_stage = {};
    max_block_ = policy_.max_block_size();
    result.stats.reset(std::max(max_block_, 1));
    step_ = 0;
    const detail::scope_timer total(result.stats.seconds.total);
    detail::stage_clock clock;
    return conclude(begin_request(prompt, clock));
  }

  /// True when the request has ended (or none was started).
  [[nodiscard]] bool done() const { return done_; }

  /// One draft-verify-accept-commit step. Returns result.error; status::invalid_argument, with the
  /// request left as it was, while a block of draft_block or draft_untrimmed is out.
  status step() {
    if (done_) return result_ != nullptr ? result_->error : status::invalid_argument;
    std::span<const token_id> block;
    if (const status s = draft_block(block); s != status::success || done_) return s != status::success ? s : result_->error;
    matrix_view<const float> logits;
    double seconds = 0;
    detail::stage_clock clock;
    const status s = guarded("verify", [&] { return verifier_.score(block, logits); });
    clock.lap(seconds);
    result_->stats.seconds.verify += seconds;
    result_->stats.seconds.total += seconds;
    if (s != status::success) return verify_failed(s);
    return finish_block(logits);
  }

  /// First half of a step: the drafts. `block` (valid until finish_block) receives the anchor and the
  /// b-1 drafts (those the policy keeps, when it trims), to be scored by the target at the request's
  /// next positions. Ends the request with status::cancelled when `config.cancel` has been requested.
  status draft_block(std::span<const token_id>& block) {
    std::span<const float> confidence;
    if (const status s = draft_untrimmed(confidence); s != status::success) return s;
    int kept = b_ - 1;
    if constexpr (draft_trimming_policy<Policy>) {
      if (b_ > 1) {
        const detail::scope_timer total(result_->stats.seconds.total), policy_time(result_->stats.seconds.policy);
        kept = guarded("policy", [&] { return policy_.keep_drafts(confidence); });
      }
    }
    return trim(kept, block);
  }

  /// For an engine that decides several requests' drafts together (batched_decoder with a batch plan):
  /// draft_block's drafting without the policy's trim. `confidence` receives the drafter's confidence in
  /// each of the b-1 drafts (empty when b = 1 or the drafter reports none), valid until trim_block, which
  /// must follow.
  status draft_untrimmed(std::span<const float>& confidence) {
    if (done_ || awaiting_logits_ || awaiting_trim_) return status::invalid_argument;
    if (config_->cancel.stop_requested()) return conclude(fail("cancel", status::cancelled));
    const detail::scope_timer total(result_->stats.seconds.total);
    detail::stage_clock clock;
    step_started_ = std::chrono::steady_clock::now();
    ++step_;
    stream_ = philox_stream{config_->seed, step_};
    block_[0] = context_.back();
    const std::span<token_id> drafts(block_.data() + 1, static_cast<std::size_t>(b_ - 1));
    q_ = stage_.draft_probs(b_ - 1, vocab_);
    status s = status::success;
    if (b_ > 1) {
      const draft_request request{context_, b_, config_->temperature, stream_, config_->sampling,
                                  config_->process_logits ? &config_->process_logits : nullptr};
      s = guarded("draft", [&] {  // the drafter's exception or its process_logits'
        if constexpr (uses_probabilities)
          return drafter_.draft(request, drafts, q_);
        else
          return drafter_.draft(request, drafts);
      });
      clock.lap(result_->stats.seconds.draft);
    }
    if (s != status::success) return conclude(fail("draft", s));
    for (const token_id t : drafts)  // before the verifier sees them
      if (t < 0 || t >= vocab_) return conclude(fail("draft", status::invalid_token));
    confidence = {};
    if constexpr (draft_trimming_policy<Policy>) {
      if (b_ > 1) {
        confidence = guarded("draft", [&] { return drafter_.draft_confidence(); });
        if (confidence.size() < static_cast<std::size_t>(b_ - 1)) return conclude(fail("draft", status::invalid_argument));
        confidence = confidence.first(static_cast<std::size_t>(b_ - 1));
      }
    }
    awaiting_trim_ = true;
    return status::success;
  }

  /// After draft_untrimmed, for a batch plan: the policy's expected gain of each of the b-1 drafts
  /// (draft_gains of `confidence`), checked: one per draft, each finite, not negative and not above the
  /// one before. Other gains end the request (status::invalid_argument, stage "policy"), as a throw does
  /// (status::model_error; the exception goes on).
  status draft_gains(std::span<const float> confidence, std::vector<double>& gains)
    requires batch_trimming_policy<Policy>
  {
    if (done_ || !awaiting_trim_) return status::invalid_argument;
    const detail::scope_timer total(result_->stats.seconds.total), policy_time(result_->stats.seconds.policy);
    gains.clear();
    guarded("policy", [&] { policy_.draft_gains(confidence, gains); });
    if (gains.size() == confidence.size() && plannable_gains(gains)) return status::success;
    awaiting_trim_ = false;
    return conclude(fail("policy", status::invalid_argument));
  }

  /// After draft_untrimmed: keeps the first `kept` drafts (clamped to [0, b-1]; a batch_trimming_policy
  /// records them through `keep`) and gives the block to score, as draft_block does.
  status trim_block(int kept, std::span<const token_id>& block) {
    if constexpr (batch_trimming_policy<Policy>) {
      if (awaiting_trim_ && b_ > 1) {
        const detail::scope_timer total(result_->stats.seconds.total), policy_time(result_->stats.seconds.policy);
        kept = guarded("policy", [&] {
          return policy_.keep(drafter_.draft_confidence().first(static_cast<std::size_t>(b_ - 1)), kept);
        });
      }
    }
    return trim(kept, block);
  }

  /// Second half of a step: the target's rows for the block ([b][vocab], in the Backend's memory),
  /// then acceptance, the policy's next size, the commits and the streamed tokens.
  status finish_block(const matrix_view<const float>& logits) {
    if (done_ || !awaiting_logits_) return status::invalid_argument;
    awaiting_logits_ = false;
    const detail::scope_timer total(result_->stats.seconds.total);
    detail::stage_clock clock;
    return conclude(accept_and_commit(logits, clock));
  }

  /// Instead of finish_block: the engine could not score the block; ends the request with `s`, stage "verify".
  status verify_failed(status s) {
    if (done_ || !awaiting_logits_) return status::invalid_argument;
    awaiting_logits_ = false;
    return conclude(fail("verify", s == status::success ? status::model_error : s));
  }

  /// Ends the request now with status::cancelled (stage "cancel"), keeping the committed tokens. Between
  /// draft_block (or draft_untrimmed) and finish_block the block is dropped: the models then hold a
  /// scored, uncommitted block, which their next prefill discards. From on_tokens, the chunk that completes
  /// the request (a stop token, the length cap) has already ended it: status::invalid_argument, nothing changes.
  status cancel() {
    if (done_) return status::invalid_argument;
    awaiting_logits_ = awaiting_trim_ = false;
    return conclude(fail("cancel", status::cancelled));
  }

 private:
  /// Ends the drafting half of a step: the block is the anchor and the first `kept` drafts.
  status trim(int kept, std::span<const token_id>& block) {
    if (!awaiting_trim_) return status::invalid_argument;
    awaiting_trim_ = false;
    scored_ = std::clamp(kept, 0, b_ - 1) + 1;
    if (q_.data != nullptr) q_ = q_.rows_slice(0, scored_ - 1);
    block = std::span<const token_id>(block_.data(), static_cast<std::size_t>(scored_));
    awaiting_logits_ = true;
    return status::success;
  }

  status fail(std::string_view stage, status s) {
    result_->failed_stage = stage;
    return s;
  }

  /// Calls a model or the policy: when it throws, the request ends (status::model_error, `stage`) with
  /// what it has committed, and the exception goes on to the caller.
  template <class F>
  decltype(auto) guarded(std::string_view stage, F&& call) {
    try {
      return std::forward<F>(call)();
    } catch (...) {
      awaiting_logits_ = awaiting_trim_ = false;
      conclude(fail(stage, status::model_error));
      throw;
    }
  }

  /// Records the outcome of a call: an error or the end of the request makes it done.
  status conclude(status s) {
    if (s != status::success) {
      result_->error = s;
      done_ = true;
    }
    result_->stats.generated = static_cast<std::int64_t>(result_->tokens.size());
    return s;
  }

  [[nodiscard]] status check_block_size(int b) const {
    return b >= 1 && b <= max_block_ && b - 1 <= drafter_.max_draft_rows() ? status::success
                                                                             : status::invalid_block_size;
  }

  /// `rows` rows of the vocabulary, each at its own start: row_stride >= cols (0, a default view's, is no stride).
  [[nodiscard]] bool check_logits(const matrix_view<const float>& logits, std::int64_t rows) const {
    return logits.data != nullptr && logits.rows == rows && logits.cols == vocab_ && logits.row_stride >= logits.cols;
  }

  [[nodiscard]] bool is_stop(token_id t) const {
    const auto& stops = config_->stop_tokens;
    return std::find(stops.begin(), stops.end(), t) != stops.end();
  }

  /// The output the buffers are sized for up front; longer outputs (max_new_tokens = INT_MAX: until a stop
  /// token) grow them as they go.
  static constexpr int reserved_output = 4096;

  [[nodiscard]] std::size_t reserved_tokens() const {
    return static_cast<std::size_t>(std::min(config_->max_new_tokens, reserved_output));
  }

  status reserve(std::size_t prompt_size) {
    try {
      context_.reserve(prompt_size + reserved_tokens() + static_cast<std::size_t>(max_block_));
      block_.resize(static_cast<std::size_t>(max_block_) + 1);  // + the bonus after a full block
      if (config_->process_logits) processed_.resize(static_cast<std::size_t>(max_block_) * static_cast<std::size_t>(vocab_));
    } catch (const std::bad_alloc&) {
      return status::out_of_memory;
    }
    return stage_.reserve(max_block_, vocab_);
  }

  /// Validation, prefill, the policy's decision, the first token (the first anchor), the drafter's start.
  status begin_request(std::span<const token_id> prompt, detail::stage_clock& clock) {
    const generation_config& config = *config_;
    request_stats& stats = result_->stats;
    vocab_ = verifier_.vocab_size();
    if (prompt.empty()) return fail("input", status::empty_prompt);
    if (static_cast<std::int64_t>(drafter_.vocab_size()) != vocab_) return fail("input", status::vocab_mismatch);
    if (!detail::valid_sampling_temperature(config.temperature)) return fail("input", status::invalid_temperature);
    if (config.max_new_tokens < 0 || config.sampling.check() != status::success) return fail("input", status::invalid_argument);
    if (config.process_logits && !std::is_same_v<typename stage_type::logits_backend, cpu_backend>)
      return fail("input", status::invalid_argument);  // a processor rewrites host rows
    if (max_block_ < 1 || max_block_ > block_size_limit) return fail("policy", status::invalid_block_size);
    for (const token_id t : prompt)
      if (t < 0 || t >= vocab_) return fail("input", status::invalid_token);
    if (config.max_new_tokens == 0) return status::success;
    if (config.cancel.stop_requested()) return fail("cancel", status::cancelled);
    if (const status s = reserve(prompt.size()); s != status::success) return fail("accept", s);
    result_->tokens.reserve(reserved_tokens());
    clock.skip();

    matrix_view<const float> logits;
    stats.prefilled = true;
    if (const status s = guarded("prefill", [&] { return verifier_.prefill(prompt, logits); }); s != status::success)
      return fail("prefill", s);
    if (!check_logits(logits, 1)) return fail("prefill", status::model_error);
    clock.lap(stats.seconds.prefill);

    const block_size_choice choice =
        guarded("policy", [&] { return policy_.choose({prompt, logits.row(0), config.temperature}); });
    b_ = choice.block_size;
    stats.block_size = b_;
    stats.policy_fallback = choice.fallback;
    if (const status s = check_block_size(b_); s != status::success) return fail("policy", s);
    if constexpr (per_step_block_size_policy<Policy>)  // every size it may move to, not only the first
      if (const status s = check_block_size(max_block_); s != status::success) return fail("policy", s);
    clock.lap(stats.seconds.policy);

    context_.assign(prompt.begin(), prompt.end());
    // greedy_match samples nothing at any T: its first token is the argmax too, as every later one is.
    const float first_temperature = std::is_same_v<Acceptance, greedy_match> ? 0.0f : config.temperature;
    token_id first;
    const matrix_view<const float> first_row = rule_rows(logits, {});
    if (const status s = guarded("prefill", [&] {
          return stage_.first_token(first_row, first_temperature, config.sampling, philox_stream{config.seed, 0}, first);
        });
        s != status::success)
      return fail("prefill", s);
    context_.push_back(first);
    result_->tokens.push_back(first);
    clock.lap(stats.seconds.accept);
    // A request complete with its first token is done before on_tokens sees it: a cancel there is too late.
    const bool complete = is_stop(first) || result_->tokens.size() >= static_cast<std::size_t>(config.max_new_tokens);
    done_ = complete;
    emit(0);
    if (complete) return status::success;  // no step follows: the drafter is not started
    if (done_) return result_->error;      // on_tokens cancelled the request
    clock.skip();

    drafting_ = per_step_block_size_policy<Policy> || b_ > 1;
    if (drafting_) {
      if (const status s = guarded("draft", [&] { return drafter_.begin(prompt); }); s != status::success)
        return fail("draft", s);
      if constexpr (wires_context)
        if (const status s = guarded("draft", [&] { return drafter_.append_context(verifier_.context_features()); });
            s != status::success)
          return fail("draft", s);
      clock.lap(stats.seconds.draft);
    }
    return status::success;
  }

  /// The decision on the scored block, the commits, and the tokens it adds to the output.
  status accept_and_commit(const matrix_view<const float>& logits, detail::stage_clock& clock) {
    request_stats& stats = result_->stats;
    if (!check_logits(logits, scored_)) return fail("verify", status::model_error);

    acceptance_result decision;
    const std::span<const token_id> block(block_.data(), static_cast<std::size_t>(scored_));
    const acceptance_input input{rule_rows(logits, block.subspan(1)), block, q_, config_->temperature, stream_,
                                 config_->sampling};
    if (const status s = guarded("accept", [&] { return stage_.accept(input, decision); }); s != status::success)
      return fail("accept", s);
    clock.lap(stats.seconds.accept);
    // A user's rule is not trusted to stay in range: nothing is committed past this point otherwise.
    if (decision.accepted < 0 || decision.accepted >= scored_) return fail("accept", status::invalid_argument);
    if (decision.bonus < 0 || decision.bonus >= vocab_) return fail("accept", status::invalid_token);

    const int a = decision.accepted;
    int next_b = b_;
    if constexpr (per_step_block_size_policy<Policy>) {  // before commit: the rows are valid until then
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_started_).count();
      next_b = guarded("policy", [&] {
        return policy_.next(step_record{static_cast<int>(step_ - 1), scored_, a, logits.rows_slice(0, a + 1), seconds});
      });
      clock.lap(stats.seconds.policy);
    }
    if (const status s = guarded("commit", [&] { return verifier_.commit(a + 1); }); s != status::success)
      return fail("commit", s);
    clock.lap(stats.seconds.verify);
    if (drafting_) {
      if (const status s = guarded("commit", [&] { return drafter_.commit(a + 1); }); s != status::success)
        return fail("commit", s);
      if constexpr (wires_context)
        if (const status s = guarded("commit", [&] {
              return drafter_.append_context(verifier_.context_features().rows_slice(0, a + 1));
            });
            s != status::success)
          return fail("commit", s);
      clock.lap(stats.seconds.draft);
    }
    stats.record_step(scored_, a);
    block_[static_cast<std::size_t>(a) + 1] = decision.bonus;
    std::vector<token_id>& tokens = result_->tokens;
    const auto max_new = static_cast<std::size_t>(config_->max_new_tokens);
    const std::size_t committed = tokens.size();
    bool stopped = false;
    for (int j = 1; j <= a + 1 && tokens.size() < max_new && !stopped; ++j) {
      const token_id t = block_[static_cast<std::size_t>(j)];
      context_.push_back(t);
      tokens.push_back(t);
      stopped = is_stop(t);
    }
    clock.skip();
    const bool complete = stopped || tokens.size() >= max_new;
    done_ = complete;  // as for the first token: the last chunk cannot be cancelled
    emit(committed);
    if (complete) return status::success;
    if (done_) return result_->error;  // on_tokens cancelled the request
    clock.skip();
    if (const status s = check_block_size(next_b); s != status::success) return fail("policy", s);
    b_ = next_b;
    return status::success;
  }

  /// The rows the rule decides on: `logits` itself, or a copy rewritten by config.process_logits, row j
  /// following the committed context and drafts[0, j). Host memory (checked at the start). When
  /// process_logits throws, the request ends (model_error, stage "accept") and the exception goes on.
  matrix_view<const float> rule_rows(const matrix_view<const float>& logits, std::span<const token_id> drafts) {
    if (!config_->process_logits) return logits;
    const std::size_t vocab = static_cast<std::size_t>(vocab_);
    struct drafts_taken_off {  // the drafts pushed below leave the context again, even when process_logits throws
      std::vector<token_id>& context;
      std::size_t committed;
      ~drafts_taken_off() { context.resize(committed); }
    } restore{context_, context_.size()};
    try {
      for (std::int64_t j = 0; j < logits.rows; ++j) {
        if (j > 0) context_.push_back(drafts[static_cast<std::size_t>(j) - 1]);
        const std::span<const float> row = logits.row(j);
        const std::span<float> out(processed_.data() + static_cast<std::size_t>(j) * vocab, vocab);
        std::copy(row.begin(), row.end(), out.begin());
        config_->process_logits(context_, out);
      }
    } catch (...) {  // the request ends, the caller gets the exception
      conclude(fail("accept", status::model_error));
      throw;
    }
    return {processed_.data(), logits.rows, vocab_};
  }

  /// Passes the output from `from` on to config.on_tokens, when set, timing it as stage `streaming`.
  void emit(std::size_t from) {
    const std::vector<token_id>& tokens = result_->tokens;
    if (!config_->on_tokens || from >= tokens.size()) return;
    detail::stage_clock clock;
    try {
      config_->on_tokens(std::span<const token_id>(tokens).subspan(from));
    } catch (...) {  // the request ends as cancelled (unless this chunk completed it), the caller gets the exception
      if (!done_) conclude(fail("cancel", status::cancelled));
      throw;
    }
    clock.lap(result_->stats.seconds.streaming);
  }

  Drafter& drafter_;
  Verifier& verifier_;
  Policy policy_;
  using stage_type = decode_stage<Acceptance, Backend>;
  stage_type stage_;
  // The request under way.
  const generation_config* config_ = nullptr;
  generation_result* result_ = nullptr;
  std::vector<token_id> context_;  ///< prompt and committed output
  std::vector<token_id> block_;    ///< anchor, drafts, and room for the bonus
  std::vector<float> processed_;   ///< the rows rewritten by config.process_logits
  std::int64_t vocab_ = 0;
  int max_block_ = 0;
  int b_ = 1;                      ///< the size of the next step, as the policy chose it
  int scored_ = 1;                 ///< the size of the block under way, after the policy's trim
  std::uint64_t step_ = 0;         ///< steps begun (the first token is step 0 of the random stream)
  philox_stream stream_{};
  std::chrono::steady_clock::time_point step_started_{};
  matrix_view<float> q_{};
  bool drafting_ = false, done_ = true, awaiting_logits_ = false;
  bool awaiting_trim_ = false;  ///< between draft_untrimmed and trim_block
};

}  // namespace blockpilot
