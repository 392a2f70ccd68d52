// Self-speculative early exit: the target's first L decoder layers, its final norm and its output
// head draft the block autoregressively with a KV cache of their own, cropped to the accepted prefix.
// A model of `drafter_with_probabilities`: it samples at the request temperature and exposes q.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/drafting.hpp"
#include "blockpilot/cpu/row_ops.hpp"
#include "blockpilot_workbench/models/llama.hpp"

namespace blockpilot {

/// Options of an `early_exit_drafter`; checked at construction.
struct early_exit_options {
  int layers = 8;                     ///< L: decoder layers of the draft model, in [1, model layers]
  std::int64_t max_positions = 4096;  ///< draft KV-cache capacity: at least the target's (prompt + output + block)
  int max_draft_rows = 63;            ///< largest b - 1 it drafts
  int threads = 2;                    ///< threads of the draft model's forward pass
};

/// Drafts b-1 tokens with the first L layers of a `llama_model` (which must outlive it). Draft row j
/// (1-based) is drawn from q_j = softmax(logits_j / T) with the step's Philox stream
/// (`rng.bits64(j, random_domain::draft_sample)`, the fixed-point weights of the acceptance rules);
/// at T below `detail::greedy_temperature` it is the argmax (first maximum) and q_j is one-hot. The
/// draft cache holds the committed context but the anchor; `draft` feeds the anchor and the first
/// b-2 drafts one at a time, `commit(n)` crops the cache to the anchor and the n-1 accepted drafts,
/// and the next `draft` feeds whatever committed tokens the cache lacks (the last accepted draft
/// after a full acceptance, the new anchor) in one batched pass. With L = every layer the drafts are
/// the target's own greedy continuation at T = 0. Every buffer is allocated at construction. Not
/// thread-safe: one request at a time.
class early_exit_drafter {
 public:
  /// Throws `error` naming the model file and the option when an option is out of range.
  early_exit_drafter(const llama_model& model, early_exit_options options = {})
      : options_(checked(model, options)),
        model_(model, draft_model_options(options_)) {
    cached_.reserve(static_cast<std::size_t>(options_.max_positions));
    scratch_.weights.resize(static_cast<std::size_t>(model.config().vocab));
  }

  [[nodiscard]] std::int64_t vocab_size() const { return model_.vocab_size(); }
  [[nodiscard]] int max_draft_rows() const { return options_.max_draft_rows; }
  /// L, the draft model's decoder layers.
  [[nodiscard]] int layers() const { return options_.layers; }
  [[nodiscard]] const early_exit_options& options() const { return options_; }
  /// Positions held by the draft cache.
  [[nodiscard]] std::int64_t cached() const { return static_cast<std::int64_t>(cached_.size()); }

  /// Starts a request: runs the prompt through the draft model (the anchor comes with the first draft).
  [[nodiscard]] status begin(std::span<const token_id> prompt) {
    cached_.clear();
    drafted_at_ = -1;
    return feed(prompt, 0);
  }

  /// The anchor and n-1 drafts of the last block were accepted: the cache keeps exactly those of
  /// them it holds. invalid_argument when n is outside [1, b] of the last draft.
  [[nodiscard]] status commit(int n) {
    if (drafted_at_ < 0 || n < 1 || n > drafted_rows_ + 1) return status::invalid_argument;
    const auto keep = std::min<std::int64_t>(drafted_at_ + n, cached());
    drafted_at_ = -1;
    cached_.resize(static_cast<std::size_t>(keep));
    return model_.truncate(keep);
  }

  /// Writes out[0..b-2] (b = r.block_size). invalid_block_size for b outside [1, max_draft_rows + 1]
  /// or a short `out`; invalid_argument for an empty context or a context beyond max_positions;
  /// non_finite_logits when the draft model's row is not finite.
  [[nodiscard]] status draft(const draft_request& r, std::span<token_id> out) { return draft_rows(r, out, {}); }
  /// The same drafts with q `[b-1][vocab]` (row-major, caller-owned): each row the distribution its
  /// draft was drawn from. invalid_argument when q has fewer rows or another width.
  [[nodiscard]] status draft(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    if (q.rows < r.block_size - 1 || q.cols != vocab_size()) return status::invalid_argument;
    return draft_rows(r, out, q);
  }

 private:
  static early_exit_options checked(const llama_model& model, early_exit_options o) {
    const int total = model.config().layers;
    const auto bad = [&](const std::string& field, const std::string& what) {
      return error("early_exit_drafter for '" + model.source() + "': option '" + field + "': " + what);
    };
    if (o.layers < 1 || o.layers > total)
      throw bad("layers", std::to_string(o.layers) + " is outside [1, " + std::to_string(total) +
                              "] (the model has " + std::to_string(total) + " decoder layers)");
    if (o.max_draft_rows < 0 || o.max_draft_rows > 4095) throw bad("max_draft_rows", "must be in [0, 4095]");
    if (o.max_positions < 1 || o.max_positions > (1 << 22)) throw bad("max_positions", "must be in [1, 2^22]");
    if (o.threads < 1 || o.threads > 256) throw bad("threads", "must be in [1, 256]");
    return o;
  }

  static llama_verifier_options draft_model_options(const early_exit_options& o) {
    llama_verifier_options v;
    v.max_positions = o.max_positions;
    v.max_block = 64;
    v.threads = o.threads;
    v.layers = o.layers;
    return v;
  }

  /// Runs `tokens` at positions `at`.. (the cache is first cropped to `at`), in passes of at most
  /// max_block rows, and commits them; `logits_` becomes the row after the last token. On an error the
  /// cache keeps what was committed before it.
  status feed(std::span<const token_id> tokens, std::int64_t at) {
    if (tokens.empty()) return status::success;
    if (at + static_cast<std::int64_t>(tokens.size()) > options_.max_positions) return status::invalid_argument;
    cached_.resize(static_cast<std::size_t>(at));
    if (at == 0) {
      if (const status s = model_.prefill(tokens, logits_); s != status::success) return s;
      cached_.assign(tokens.begin(), tokens.end());
      return status::success;
    }
    if (const status s = model_.truncate(at); s != status::success) return s;
    const auto step = static_cast<std::size_t>(model_.max_block());
    for (std::size_t i = 0; i < tokens.size(); i += step) {
      const auto part = tokens.subspan(i, std::min(step, tokens.size() - i));
      if (const status s = model_.score(part, logits_); s != status::success) return s;
      if (const status s = model_.commit(static_cast<int>(part.size())); s != status::success) return s;
      cached_.insert(cached_.end(), part.begin(), part.end());
    }
    return status::success;
  }

  status draft_rows(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    const int b = r.block_size;
    if (b < 1 || b - 1 > options_.max_draft_rows || out.size() < static_cast<std::size_t>(b - 1))
      return status::invalid_block_size;
    if (r.context.empty()) return status::invalid_argument;
    const auto n = static_cast<std::int64_t>(r.context.size());
    drafted_at_ = n - 1;
    drafted_rows_ = b - 1;
    if (b == 1) return status::success;
    // The cache must hold context[0, n-1); keep its longest prefix that agrees and feed the rest,
    // the anchor last (usually just the anchor, or the last accepted draft and the anchor).
    const auto past = r.context.first(static_cast<std::size_t>(n - 1));
    const auto limit = std::min(cached_.size(), past.size());
    const auto agree = static_cast<std::int64_t>(
        std::mismatch(cached_.begin(), cached_.begin() + static_cast<std::ptrdiff_t>(limit), past.begin()).first -
        cached_.begin());
    if (const status s = feed(r.context.subspan(static_cast<std::size_t>(agree)), agree); s != status::success)
      return s;
    for (int j = 1; j < b; ++j) {
      if (j > 1) {
        const token_id previous = out[static_cast<std::size_t>(j) - 2];
        if (const status s = feed(std::span(&previous, 1), cached()); s != status::success) return s;
      }
      const auto drafts = std::span<const token_id>(out.data(), static_cast<std::size_t>(j) - 1);
      if (const status s = draft_token(logits_.row(logits_.rows - 1), r, j, drafts, scratch_,
                                                   q.empty() ? std::span<float>{} : q.row(j - 1), out[static_cast<std::size_t>(j) - 1]);
          s != status::success)
        return s;
    }
    return status::success;
  }

  early_exit_options options_;
  llama_verifier model_;
  matrix_view<const float> logits_;
  draft_scratch scratch_;
  std::vector<token_id> cached_;       ///< the tokens whose K/V rows the draft cache holds, in order
  std::int64_t drafted_at_ = -1;       ///< position of the last draft's anchor (-1: nothing to commit)
  int drafted_rows_ = 0;               ///< b - 1 of the last draft
};

static_assert(drafter_with_probabilities<early_exit_drafter>);

}  // namespace blockpilot
