// Models used by the tests: plain greedy decoding, perfect / always-wrong / random drafters,
// a verifier that injects NaN, and a pair that records the context-feature wiring.
#pragma once

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"

namespace blockpilot::testing {

/// The synthetic world with default parameters at vocabulary `vocab`.
inline synthetic_world synthetic_world_of(std::int64_t vocab) {
  synthetic_params p;
  p.vocab = vocab;
  return synthetic_world(p);
}

/// Greedy decoding of at most `max_new` tokens.
inline generation_config greedy(int max_new) {
  generation_config c;
  c.max_new_tokens = max_new;
  return c;
}

/// Prompt keys "0", "1", ..., "n-1" (the sweeps' keys for synthetic prompt sets).
inline std::vector<std::string> keys_of(std::size_t n) {
  std::vector<std::string> k;
  for (std::size_t i = 0; i < n; ++i) k.push_back(std::to_string(i));
  return k;
}

/// Plain greedy decoding of a verifier, one token per call: the reference output.
template <class Verifier>
std::vector<token_id> greedy_reference(Verifier& v, std::span<const token_id> prompt, int max_new,
                                       std::span<const token_id> stop = {}) {
  std::vector<token_id> out;
  matrix_view<const float> logits;
  if (v.prefill(prompt, logits) != status::success) return out;
  while (static_cast<int>(out.size()) < max_new) {
    token_id t;
    if (cpu_detail::argmax_row(logits.row(0), t) != status::success) break;
    out.push_back(t);
    if (std::find(stop.begin(), stop.end(), t) != stop.end()) break;
    const token_id one[1] = {t};
    if (v.score(one, logits) != status::success || v.commit(1) != status::success) break;
  }
  return out;
}

/// Drafts exactly the target's greedy continuation, by running its own copy of the target.
template <class Verifier>
class perfect_drafter {
 public:
  explicit perfect_drafter(Verifier v) : v_(std::move(v)) {}
  std::int64_t vocab_size() const { return v_.vocab_size(); }
  int max_draft_rows() const { return 64; }
  status begin(std::span<const token_id>) { return status::success; }
  status commit(int) { return status::success; }
  status draft(const draft_request& r, std::span<token_id> out) {
    matrix_view<const float> logits;
    // Prefill on the context without its anchor, then score the anchor and each draft in turn.
    const auto ctx = r.context.first(r.context.size() - 1);
    if (ctx.empty()) return status::invalid_argument;
    if (const status s = v_.prefill(ctx, logits); s != status::success) return s;
    token_id t = r.context.back();
    for (int j = 0; j + 1 < r.block_size; ++j) {
      const token_id one[1] = {t};
      if (const status s = v_.score(one, logits); s != status::success) return s;
      (void)v_.commit(1);
      if (const status s = cpu_detail::argmax_row(logits.row(0), t); s != status::success) return s;
      out[static_cast<std::size_t>(j)] = t;
    }
    return status::success;
  }

 private:
  Verifier v_;
};

/// Proposes tokens from a fixed pseudo-random rule that ignores the target (mostly wrong).
class random_drafter {
 public:
  explicit random_drafter(std::int64_t vocab, std::uint64_t salt = 0) : vocab_(vocab), salt_(salt) {}
  std::int64_t vocab_size() const { return vocab_; }
  int max_draft_rows() const { return 64; }
  status begin(std::span<const token_id>) { return status::success; }
  status commit(int) { return status::success; }
  status draft(const draft_request& r, std::span<token_id> out) {
    for (int j = 0; j + 1 < r.block_size; ++j)
      out[static_cast<std::size_t>(j)] = static_cast<token_id>(
          synthetic_world::mix(salt_ ^ (r.context.size() * 131 + static_cast<std::size_t>(j))) %
          static_cast<std::uint64_t>(vocab_));
    return status::success;
  }

 private:
  std::int64_t vocab_;
  std::uint64_t salt_;
};

/// Wraps a drafter and replaces every draft by a token it is told is wrong: the perfect draft + 1.
template <class Inner>
class always_wrong_drafter {
 public:
  explicit always_wrong_drafter(Inner inner) : inner_(std::move(inner)) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  int max_draft_rows() const { return inner_.max_draft_rows(); }
  status begin(std::span<const token_id> p) { return inner_.begin(p); }
  status commit(int n) { return inner_.commit(n); }
  status draft(const draft_request& r, std::span<token_id> out) {
    if (const status s = inner_.draft(r, out); s != status::success) return s;
    if (r.block_size > 1)  // only the first draft matters: it is always rejected
      out[0] = static_cast<token_id>((out[0] + 1) % vocab_size());
    return status::success;
  }

 private:
  Inner inner_;
};

/// A verifier that returns a NaN logit in the `poison_step`-th score call (0-based).
template <class Inner>
class nan_injecting_verifier {
 public:
  nan_injecting_verifier(Inner inner, int poison_step) : inner_(std::move(inner)), poison_(poison_step) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
    calls_ = 0;
    return inner_.prefill(p, logits);
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    if (const status s = inner_.score(block, logits); s != status::success) return s;
    if (calls_++ != poison_) return status::success;
    copy_.assign(logits.data, logits.data + logits.rows * logits.cols);
    copy_[3] = std::numeric_limits<float>::quiet_NaN();
    logits = {copy_.data(), logits.rows, logits.cols};
    return status::success;
  }
  status commit(int n) { return inner_.commit(n); }

 private:
  Inner inner_;
  int poison_;
  int calls_ = 0;
  std::vector<float> copy_;
};

/// Block size cycles through a list after every step: exercises per-step policies.
struct cycling_policy {
  std::vector<int> sizes{16, 1, 2, 5, 32};
  std::size_t next_index = 0;
  int max_block_size() const { return 32; }
  block_size_choice choose(const request_features&) {
    next_index = 1;
    return {sizes[0], false};
  }
  int next(const step_record&) { return sizes[next_index++ % sizes.size()]; }
};

}  // namespace blockpilot::testing
