// The roles an engine supplies: drafter, verifier, block-size policy — each a C++20 concept built
// from small named pieces — and the optional capabilities the decoder detects and wires through.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "blockpilot/acceptance/sampling.hpp"
#include "blockpilot/backend.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// One drafting call: the committed context and how many rows to draft.
struct draft_request {
  std::span<const token_id> context;  ///< every committed token of the request; the last one is the anchor
  int block_size = 1;                 ///< b: the drafter writes b-1 tokens
  float temperature = 0.0f;           ///< the request's temperature (a drafter may sample at it or stay greedy)
  philox_stream rng;                  ///< this step's stream; drafters draw with random_domain::draft_sample
  /// The request's sampling controls and logits processor (null when none): a drafter that samples
  /// applies them to its own rows, so that q follows the distribution the target is held to.
  sampling_controls sampling{};
  const logits_processor* process_logits = nullptr;
};

/// What a policy sees of a request when it decides.
struct request_features {
  std::span<const token_id> prompt;
  std::span<const float> prefill_logits;  ///< [vocab]: the target's last prompt row
  float temperature = 0.0f;
};

/// A policy's decision; `fallback` records that the policy could not use its model (for example
/// non-finite features) and returned its default size.
struct block_size_choice {
  int block_size = 1;
  bool fallback = false;
};

// --- pieces -------------------------------------------------------------------------------------

/// Reports the vocabulary size it works over.
template <class T>
concept has_vocab_size = requires(const T& t) {
  { t.vocab_size() } -> std::convertible_to<std::int64_t>;
};

/// Keeps per-request state that is reset by `begin(prompt)` and advanced by `commit(n)`.
template <class T>
concept has_request_state = requires(T& t, std::span<const token_id> prompt, int n) {
  { t.begin(prompt) } -> std::same_as<status>;
  { t.commit(n) } -> std::same_as<status>;
};

// --- drafter ------------------------------------------------------------------------------------

/// Proposes the b-1 draft tokens of a block. `draft(request, out)` fills out[0..b-2];
/// `commit(n)` tells it that the anchor and n-1 drafts of the last block were accepted (its state
/// must then cover exactly the committed tokens but the new anchor); `max_draft_rows()` bounds b-1.
template <class D>
concept drafter = has_vocab_size<D> && has_request_state<D> &&
                  requires(D& d, const D& cd, const draft_request& r, std::span<token_id> out) {
                    { cd.max_draft_rows() } -> std::convertible_to<int>;
                    { d.draft(r, out) } -> std::same_as<status>;
                  };

/// A drafter that also writes its draft distribution q: `draft(request, out, q)` with q a
/// caller-owned [b-1][vocab] row-major matrix of probabilities; drafts must be samples of q
/// (one-hot q for a deterministic drafter). Rejection sampling requires it.
template <class D>
concept drafter_with_probabilities =
    drafter<D> && requires(D& d, const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
      { d.draft(r, out, q) } -> std::same_as<status>;
    };

/// A drafter that conditions on the target's per-position context features (block-diffusion
/// drafters read hidden states of a few target layers): `append_context(rows)` receives the rows
/// of newly committed positions, in order.
template <class D>
concept drafter_with_context = drafter<D> && requires(D& d, matrix_view<const float> rows) {
  { d.append_context(rows) } -> std::same_as<status>;
};

/// A drafter that says how sure it is at each position of its last `draft` call: `draft_confidence()`
/// returns [b-1] values in [0, 1] — a model drafter the top probability of its row, prompt lookup the
/// matched n-gram's length over its longest where the match continues and 0 where it pads. A value must follow from the context, the earlier
/// drafts and the position's distribution, never from the token drawn there: a trim that sees the draw
/// would bias rejection sampling. A policy that weighs later positions too (speed_cutoff, the batch
/// plans) sees position j+1's value when it keeps draft j, so under rejection sampling at T > 0 it needs
/// values that do not depend on the earlier drafts either (drafts of one parallel pass, as DFlash's, or
/// deterministic ones, as lookup's); confidence_cutoff stops at the first low value and needs only the
/// rule above. A span (not a container returned by value, which would not outlive the call) valid until
/// the next draft call.
template <class D>
concept drafter_with_confidence = drafter<D> && requires(D& d) {
  { d.draft_confidence() } -> std::same_as<std::span<const float>>;
};

// --- verifier -----------------------------------------------------------------------------------

/// The target model. `prefill(prompt, logits)` starts a request and returns the last prompt row
/// ([1][vocab]); `score(block, logits)` runs the b tokens at the next b positions in one call and
/// returns [b][vocab], row j predicting the token after block[j]; `commit(n)` keeps the first n
/// scored positions (cache crop). Views stay valid until the next call.
template <class V>
concept verifier = has_vocab_size<V> &&
                   requires(V& v, std::span<const token_id> tokens, matrix_view<const float>& logits, int n) {
                     { v.prefill(tokens, logits) } -> std::same_as<status>;
                     { v.score(tokens, logits) } -> std::same_as<status>;
                     { v.commit(n) } -> std::same_as<status>;
                   };

/// A verifier that exposes per-position context features of its last prefill or score call:
/// [positions][features], one row per token it processed.
template <class V>
concept verifier_with_context_features = verifier<V> && requires(const V& v) {
  { v.context_features() } -> std::convertible_to<matrix_view<const float>>;
};

/// A verifier whose instances (one per request: sequences of one shared model, say) can be scored
/// together: `V::score_batch(verifiers, blocks, logits)` runs blocks[i] on *verifiers[i] in one call and
/// sets logits[i] to its [blocks[i].size()][vocab] rows, each valid until that verifier's next call.
/// batched_decoder makes one such call per step; without it, one score() per request.
template <class V>
concept batch_scoring_verifier =
    verifier<V> && requires(std::span<V* const> verifiers, std::span<const std::span<const token_id>> blocks,
                            std::span<matrix_view<const float>> logits) {
      { V::score_batch(verifiers, blocks, logits) } -> std::same_as<status>;
    };

// --- block-size policy --------------------------------------------------------------------------

/// Maps a request to a block size once after prefill. `max_block_size()` sizes buffers once.
template <class P>
concept block_size_policy = requires(P& p, const P& cp, const request_features& f) {
  { cp.max_block_size() } -> std::convertible_to<int>;
  { p.choose(f) } -> std::same_as<block_size_choice>;
};

/// What one decode step did, for policies that revise the block size during a request.
struct step_record {
  int step = 0;        ///< 0-based
  int block_size = 1;  ///< b used in this step
  int accepted = 0;    ///< drafts accepted, in [0, b-1]
  /// The target's rows of the accepted+1 committed positions ([accepted+1][vocab]; row j predicted
  /// the token committed at position j of the step). Valid only during the call that receives it.
  matrix_view<const float> target_logits{};
  double seconds = 0;  ///< wall time of the step: drafting, scoring (the engine's too) and acceptance
};

/// A policy that may change the block size after every step: `next(record)` returns the size of
/// the next step (it may read the target rows the step produced).
template <class P>
concept per_step_block_size_policy = block_size_policy<P> && requires(P& p, const step_record& r) {
  { p.next(r) } -> std::convertible_to<int>;
};

/// A policy that trims every drafted block: `keep_drafts(confidence)` gets the drafter's confidence in
/// each of the b-1 drafts and returns how many of them (a prefix, clamped to [0, b-1]) to verify. The
/// drafter must model drafter_with_confidence. A position cut off is decided by the target's own row
/// there, so every acceptance rule stays exact.
template <class P>
concept draft_trimming_policy = block_size_policy<P> && requires(P& p, std::span<const float> confidence) {
  { p.keep_drafts(confidence) } -> std::convertible_to<int>;
};

/// A trimming policy whose drafts a batch may plan together with other requests': `draft_gains(confidence,
/// gains)` gives each draft's expected extra committed tokens (non-increasing along the block) without
/// deciding, and `keep(confidence, k)` records the prefix of k drafts kept, as keep_drafts would.
template <class P>
concept batch_trimming_policy = draft_trimming_policy<P> &&
    requires(P& p, const P& cp, std::span<const float> confidence, std::vector<double>& gains, int k) {
      cp.draft_gains(confidence, gains);
      { p.keep(confidence, k) } -> std::convertible_to<int>;
    };

// --- near misses ---------------------------------------------------------------------------------

/// An optional capability is detected, not configured: a type that declares one of its member functions
/// with another signature (a missing const, a parameter taken by value or mutable reference, another
/// return type) would silently go without it. The decoders refuse such a type with the signature they
/// call. A single member function (or static one) of that name counts; data members and overloaded or
/// template members are not checked.
namespace detail {
template <class M>
concept function_member = std::is_member_function_pointer_v<M> || std::is_function_v<std::remove_pointer_t<M>>;
template <class T>
concept names_append_context = requires { &T::append_context; } && function_member<decltype(&T::append_context)>;
template <class T>
concept names_score_batch = requires { &T::score_batch; } && function_member<decltype(&T::score_batch)>;
template <class T>
concept names_next = requires { &T::next; } && function_member<decltype(&T::next)>;
template <class T>
concept names_keep_drafts = requires { &T::keep_drafts; } && function_member<decltype(&T::keep_drafts)>;
template <class T>
concept names_draft_gains = requires { &T::draft_gains; } && function_member<decltype(&T::draft_gains)>;
}  // namespace detail

namespace detail {
template <class P>
struct policy_logits_backend {
  using type = cpu_backend;
};
template <class P>
  requires requires { typename P::logits_backend; }
struct policy_logits_backend<P> {
  using type = typename P::logits_backend;
};
}  // namespace detail

/// Where a policy reads the target's logits (`request_features::prefill_logits`,
/// `step_record::target_logits`): the memory of `P::logits_backend` when it declares one (`void`: it
/// reads none), else host memory. The decoder on `Backend` accepts a policy that reads them there.
template <class P, class Backend>
concept reads_logits_on = std::is_void_v<typename detail::policy_logits_backend<P>::type> ||
                          std::is_same_v<typename detail::policy_logits_backend<P>::type, Backend>;

}  // namespace blockpilot
