// Continuous batching: many requests, each with its own models' state, policy, block size, seed and
// rule parameters, stepped together — one verifier call per step for all of them when the verifier
// can score a batch. Requests join and leave between steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/policy/batch_plan.hpp"

namespace blockpilot {

/// Identifies a request of a batched_decoder.
using request_id = std::uint64_t;

/// What the last step of a batched_decoder scored: its rows (every request's block) and the wall time
/// of the scoring, e.g. to refine a step_cost_model over rows for plan_drafts.
struct batch_step_record {
  int requests = 0;
  int rows = 0;
  double score_seconds = 0;
};

/// A request that has left the batch, with its final result.
struct finished_request {
  request_id id = 0;
  generation_result result;
};

/// Runs N requests through the decode loop, step by step. Each request brings its own Drafter and
/// Verifier instances (the request's KV cache, or its sequence in a shared model) and its own Policy,
/// so block sizes differ between requests and, with a per-step policy, between steps. A step drafts
/// every active request's block, scores all blocks with one `Verifier::score_batch` call when the
/// verifier models batch_scoring_verifier (else one `score` per request), then accepts and commits
/// each. Prefill is per request, when it joins. Every request decides exactly as a
/// speculative_decoder would alone with the same seed (its random stream is keyed by `config.seed` alone:
/// give concurrent requests distinct seeds, or at T > 0 they draw the same uniforms).
/// Each request's Policy is its own copy and ends with it. A learning per-step policy keeps state of
/// the request under way (the drafts it kept this step, its own counts), so concurrent requests must
/// not share one instance; speed_cutoff learns across them through `shared()` copies, one a request,
/// which keep their own request's state and pool what they learn. With `plan_drafts` the batch decides
/// which drafts to verify for all its requests together (a batch_trimming_policy's gains, priced by the
/// batch step's cost by rows), instead of each request for itself.
/// Not thread-safe; the models must outlive their requests.
template <class Drafter, class Verifier, class Policy, class Acceptance = greedy_match, class Backend = cpu_backend>
class batched_decoder {
  // Near misses (concepts.hpp): a capability named with another signature would be silently left out.
  static_assert(!detail::names_score_batch<Verifier> || batch_scoring_verifier<Verifier>,
                "Verifier has score_batch, but not as the batch calls it: `static status score_batch(std::span<V* const>, "
                "std::span<const std::span<const token_id>>, std::span<matrix_view<const float>>)`; as written every "
                "request would be scored on its own");
  static_assert(!detail::names_draft_gains<Policy> || batch_trimming_policy<Policy>,
                "Policy has draft_gains, but not as the batch calls it: `void draft_gains(std::span<const float>, "
                "std::vector<double>&) const` and `int keep(std::span<const float>, int)`; as written plan_drafts "
                "could not plan its drafts");

 public:
  using decoder_type = speculative_decoder<Drafter, Verifier, Policy, Acceptance, Backend>;

  explicit batched_decoder(Backend backend = Backend{}) : backend_(backend) {}

  /// Joins a request: it is validated, prefilled, its block size chosen and its first token committed
  /// (and streamed) now; it takes part in the next step. A request that ends at once (an error, a stop
  /// token, max_new_tokens <= 1) goes straight to take_finished(). Models already serving an active
  /// request are refused (status::invalid_argument, stage "input").
  request_id add(Drafter& drafter, Verifier& verifier, std::span<const token_id> prompt, generation_config config,
                 Policy policy = Policy{}) {
    auto r = std::make_unique<request>(next_id_++, std::move(config), drafter, verifier, std::move(policy), backend_);
    const request_id id = r->id;
    if (in_use(drafter, verifier)) {
      r->result.error = status::invalid_argument;
      r->result.failed_stage = "input";
      finish(*r);
      return id;
    }
    try {
      r->decoder.start(prompt, r->config, r->result);
    } catch (...) {  // the request has ended (speculative_decoder::generate says how): it is finished all the same
      finish(*r);
      throw;
    }
    if (r->decoder.done())
      finish(*r);
    else
      active_.push_back(std::move(r));
    return id;
  }

  /// From the next step on, plans every step's drafts for the whole batch (plan_batch_drafts) instead of
  /// request by request: row_cost[R-1] prices a step by its total rows R, every request's anchor and kept
  /// drafts (say a step_cost_model's curve over rows, refined from last_step() between steps). A step with
  /// more requests than the curve prices verifies no drafts. Call again with a new curve at any time. A
  /// cost that is not finite and positive throws `error` (and the plan stays as it was).
  void plan_drafts(std::vector<double> row_cost)
    requires batch_trimming_policy<Policy>
  {
    detail::check_plan_inputs("plan_drafts", {}, row_cost);
    row_cost_ = std::move(row_cost);
    planning_ = true;
  }

  /// The last step's rows and scoring time.
  [[nodiscard]] const batch_step_record& last_step() const { return last_; }

  /// One step of every active request. A request that fails leaves with its error and the others go on;
  /// a failed score_batch fails the whole batch's step (stage "verify"). An exception from a callback, a
  /// model or the policy ends its own request (as speculative_decoder::generate says; a throwing
  /// score_batch all of the step's) and is rethrown once every other request has finished the step.
  /// Returns the requests still active.
  std::size_t step() {
    in_step_ = true;  // on_tokens may cancel: its request leaves at the end of the step
    raised_ = nullptr;
    blocks_.clear();
    verifiers_.clear();
    stepping_.clear();
    bool planned = false;
    if constexpr (batch_trimming_policy<Policy>)
      if (planning_) plan_step(), planned = true;
    if (!planned) {
      for (auto& r : active_) {
        std::span<const token_id> block;
        if (keep_going(*r, [&] { return r->decoder.draft_block(block); }) == status::success) add_block(*r, block);
      }
    }
    logits_.assign(stepping_.size(), matrix_view<const float>{});
    last_ = {static_cast<int>(stepping_.size()), 0, 0};
    for (const auto& b : blocks_) last_.rows += static_cast<int>(b.size());
    if (!stepping_.empty()) last_.score_seconds = score();
    for (std::size_t i = 0; i < stepping_.size(); ++i) {
      auto& decoder = stepping_[i]->decoder;
      keep_going(*stepping_[i], [&] {
        return verify_status_[i] == status::success ? decoder.finish_block(logits_[i]) : decoder.verify_failed(verify_status_[i]);
      });
    }
    in_step_ = false;
    retire();
    if (raised_) std::rethrow_exception(std::exchange(raised_, nullptr));
    return active_.size();
  }

  /// Steps until no request is active.
  void run() {
    while (!active_.empty()) step();
  }

  /// Ends an active request before its next step (status::cancelled, failed_stage "cancel"), keeping its
  /// committed tokens; `config.cancel` does the same from another thread. False when the id is not active
  /// (or has ended). From an on_tokens callback inside step() the request leaves when the step ends, since
  /// its decoder may still be running.
  bool cancel(request_id id) {
    for (auto& r : active_)
      if (r->id == id && !r->decoder.done()) {
        r->decoder.cancel();
        if (!in_step_) retire();
        return true;
      }
    return false;
  }

  [[nodiscard]] std::size_t active() const { return active_.size(); }
  [[nodiscard]] bool empty() const { return active_.empty(); }

  /// The requests that have ended since the last call, in the order they ended.
  [[nodiscard]] std::vector<finished_request> take_finished() { return std::exchange(finished_, {}); }

 private:
  struct request {
    request(request_id i, generation_config c, Drafter& d, Verifier& v, Policy p, Backend b)
        : id(i), config(std::move(c)), decoder(d, v, std::move(p), b) {}
    request_id id;
    generation_config config;
    generation_result result;
    decoder_type decoder;
  };

  /// Runs a part of a step; an exception is kept for the end of the step, so that the other requests
  /// finish theirs first. Returns the call's status, model_error on a throw.
  template <class F>
  status keep_going(F&& call) {
    try {
      return std::forward<F>(call)();
    } catch (...) {
      if (!raised_) raised_ = std::current_exception();
      return status::model_error;
    }
  }
  /// The same for a call of request r's decoder, which ends the request when it throws; were it still
  /// active, it is cancelled, so that no request stays active after a throw.
  template <class F>
  status keep_going(request& r, F&& call) {
    const status s = keep_going(std::forward<F>(call));
    if (s == status::model_error && !r.decoder.done()) r.decoder.cancel();
    return s;
  }

  void add_block(request& r, std::span<const token_id> block) {
    stepping_.push_back(&r);
    blocks_.push_back(block);
    verifiers_.push_back(&r.decoder.verifier());
  }

  /// Drafts every active request's block untrimmed, plans which drafts the batch verifies, and trims
  /// each block to its plan. The plan's time is shared among the requests as policy time.
  void plan_step() {
    planned_.clear();
    confidences_.clear();
    for (auto& r : active_) {
      std::span<const float> confidence;
      if (keep_going(*r, [&] { return r->decoder.draft_untrimmed(confidence); }) != status::success) continue;
      planned_.push_back(r.get());
      confidences_.push_back(confidence);
    }
    gains_.resize(std::max(gains_.size(), planned_.size()));
    std::size_t n = 0;  // the requests whose gains the policy gave and the decoder accepted
    for (std::size_t i = 0; i < planned_.size(); ++i)
      if (keep_going(*planned_[i], [&] { return planned_[i]->decoder.draft_gains(confidences_[i], gains_[n]); }) == status::success)
        planned_[n++] = planned_[i];
    planned_.resize(n);
    double seconds = 0;
    detail::stage_clock clock;
    gain_spans_.assign(gains_.begin(), gains_.begin() + static_cast<std::ptrdiff_t>(n));
    kept_.assign(n, 0);
    if (n > 0 && n <= row_cost_.size()) plan_batch_drafts(gain_spans_, row_cost_, kept_, plan_scratch_);
    clock.lap(seconds);
    for (std::size_t i = 0; i < n; ++i) {
      auto& stats = planned_[i]->result.stats.seconds;
      stats.policy += seconds / static_cast<double>(n);
      stats.total += seconds / static_cast<double>(n);
      std::span<const token_id> block;
      if (keep_going(*planned_[i], [&] { return planned_[i]->decoder.trim_block(kept_[i], block); }) == status::success)
        add_block(*planned_[i], block);
    }
  }

  /// Scores the drafted blocks: one batched call, or one call per request. Each request's verify and
  /// total time get the call's wall time (the time that request waited for its rows). A call that throws
  /// fails its requests' steps (model_error, stage "verify"). Returns the scoring's wall time.
  double score() {
    verify_status_.assign(stepping_.size(), status::success);
    if constexpr (batch_scoring_verifier<Verifier>) {
      double seconds = 0;
      detail::stage_clock clock;
      const status s = keep_going([&] {
        return Verifier::score_batch(std::span<Verifier* const>(verifiers_),
                                     std::span<const std::span<const token_id>>(blocks_),
                                     std::span<matrix_view<const float>>(logits_));
      });
      clock.lap(seconds);
      for (std::size_t i = 0; i < stepping_.size(); ++i) {
        verify_status_[i] = s;
        book_verify(*stepping_[i], seconds);
      }
      return seconds;
    } else {
      double all = 0;
      for (std::size_t i = 0; i < stepping_.size(); ++i) {
        double seconds = 0;
        detail::stage_clock clock;
        verify_status_[i] = keep_going([&] { return verifiers_[i]->score(blocks_[i], logits_[i]); });
        clock.lap(seconds);
        book_verify(*stepping_[i], seconds);
        all += seconds;
      }
      return all;
    }
  }

  [[nodiscard]] bool in_use(const Drafter& d, const Verifier& v) {
    for (auto& r : active_)
      if (&r->decoder.drafter() == &d || &r->decoder.verifier() == &v) return true;
    return false;
  }

  static void book_verify(request& r, double seconds) {
    r.result.stats.seconds.verify += seconds;
    r.result.stats.seconds.total += seconds;
  }

  void finish(request& r) { finished_.push_back({r.id, std::move(r.result)}); }

  /// Moves the requests that have ended to the finished list, keeping the others in order.
  void retire() {
    std::size_t kept = 0;
    for (auto& r : active_) {
      if (r->decoder.done())
        finish(*r);
      else
        active_[kept++] = std::move(r);
    }
    active_.resize(kept);
  }

  Backend backend_;
  request_id next_id_ = 1;
  std::vector<std::unique_ptr<request>> active_;
  std::vector<finished_request> finished_;
  bool in_step_ = false;  ///< inside step(): retirement waits for its end
  // Per-step scratch, reused.
  std::vector<request*> stepping_;
  std::vector<std::span<const token_id>> blocks_;
  std::vector<Verifier*> verifiers_;
  std::vector<matrix_view<const float>> logits_;
  std::vector<status> verify_status_;
  batch_step_record last_;
  // The batch plan (plan_drafts) and its scratch.
  bool planning_ = false;
  std::exception_ptr raised_;  ///< the first exception of the step under way
  std::vector<double> row_cost_;
  std::vector<request*> planned_;
  std::vector<std::span<const float>> confidences_;
  std::vector<std::vector<double>> gains_;
  std::vector<std::span<const double>> gain_spans_;
  std::vector<int> kept_;
  std::vector<std::tuple<double, int, int>> plan_scratch_;
};

}  // namespace blockpilot
