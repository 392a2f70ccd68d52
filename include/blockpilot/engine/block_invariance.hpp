// Whether a verifier scores a row the same alone and inside a block. Speculative decoding is exact with
// respect to the rows the verifier returns: its greedy output equals the verifier's own one-token-at-a-time
// decoding only where a row's logits do not depend on how many rows share its pass. Kernels that pick
// their arithmetic by the number of rows (tiled or repacked matrix products, work split by rows or by
// keys) break that, and a near-tie then decides differently. This check measures it on a sequence.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/row_ops.hpp"

namespace blockpilot {

/// How the rows of blocks of one size compare with the same rows scored alone.
struct block_invariance {
  int block_size = 0;
  int rows = 0;                     ///< rows compared
  double max_abs_difference = 0.0;  ///< the largest |logit in a block - logit alone| (NaN rows: infinity)
  int argmax_changes = 0;           ///< rows whose greedy token moved (or became, or stopped being, undecidable: NaN, +inf)

  /// Bit for bit the same rows: the decoder then reproduces the verifier's plain greedy decoding.
  [[nodiscard]] bool exact() const { return max_abs_difference == 0.0; }

  /// Takes in another sequence's comparison at the same size: rows and argmax changes summed, the
  /// larger difference kept.
  void add(const block_invariance& other) {
    rows += other.rows;
    max_abs_difference = std::max(max_abs_difference, other.max_abs_difference);
    argmax_changes += other.argmax_changes;
  }
};

namespace block_invariance_detail {

/// The greedy decoder's token for the row (cpu_detail::argmax_row), or -1 where it would fail (NaN,
/// +inf, nothing finite).
inline token_id greedy_token(std::span<const float> row) {
  token_id t = -1;
  return cpu_detail::argmax_row(row, t) == status::success ? t : -1;
}

inline void must(status s, const std::string& what) {
  if (s != status::success) throw error("check_block_invariance: the verifier failed to " + what + ": " + std::string(to_string(s)));
}

/// At least `rows` rows of `vocab` logits.
inline void check_shape(const matrix_view<const float>& logits, std::size_t rows, std::size_t vocab) {
  if (logits.data == nullptr || logits.rows < static_cast<std::int64_t>(rows) || static_cast<std::size_t>(logits.cols) != vocab)
    throw error("check_block_invariance: the verifier returned rows of another shape");
}

}  // namespace block_invariance_detail

/// Scores `continuation` after `prompt` one token at a time, then again in blocks of each size of
/// `block_sizes` (each block committed whole, as a fully accepted draft is), and compares every row with
/// its row alone: one result per size. The continuation's last token is not scored (nothing follows it).
/// Holds continuation.size() rows of logits. The verifier's next prefill starts afresh. Throws `error`
/// for an empty prompt, fewer than two continuation tokens, a size below 1, or a failing verifier.
template <verifier V>
[[nodiscard]] std::vector<block_invariance> check_block_invariance(V& v, std::span<const token_id> prompt,
                                                                   std::span<const token_id> continuation,
                                                                   std::span<const int> block_sizes) {
  namespace d = block_invariance_detail;
  if (prompt.empty() || continuation.size() < 2)
    throw error("check_block_invariance: needs a prompt and at least two continuation tokens");
  if (std::ranges::any_of(block_sizes, [](int b) { return b < 1; }))
    throw error("check_block_invariance: block sizes must be at least 1");
  const std::size_t n = continuation.size() - 1;  // rows after the prefill's: those of continuation[0 .. n)
  matrix_view<const float> logits;
  const auto vocab = static_cast<std::size_t>(v.vocab_size());
  d::must(v.prefill(prompt, logits), "prefill the prompt");
  d::check_shape(logits, 1, vocab);
  std::vector<float> alone(n * vocab);
  for (std::size_t j = 0; j < n; ++j) {
    d::must(v.score(continuation.subspan(j, 1), logits), "score one token");
    d::check_shape(logits, 1, vocab);
    std::ranges::copy(logits.row(0), alone.begin() + static_cast<std::ptrdiff_t>(j * vocab));
    d::must(v.commit(1), "commit a token");
  }
  std::vector<block_invariance> out;
  for (const int b : block_sizes) {
    block_invariance r{b};
    d::must(v.prefill(prompt, logits), "prefill the prompt");
    for (std::size_t first = 0; first < n; first += static_cast<std::size_t>(b)) {
      const auto block = continuation.subspan(first, std::min(static_cast<std::size_t>(b), n - first));
      d::must(v.score(block, logits), "score a block of " + std::to_string(block.size()));
      d::check_shape(logits, block.size(), vocab);
      for (std::size_t i = 0; i < block.size(); ++i) {
        const auto row = logits.row(static_cast<std::int64_t>(i));
        const std::span<const float> reference(alone.data() + (first + i) * vocab, vocab);
        for (std::size_t k = 0; k < vocab; ++k) {
          // equal values differ by 0, masked ones (-inf) too; NaN anywhere counts as infinity
          const double difference =
              row[k] == reference[k] ? 0.0 : std::abs(static_cast<double>(row[k]) - static_cast<double>(reference[k]));
          r.max_abs_difference = std::max(r.max_abs_difference, std::isnan(difference) ? std::numeric_limits<double>::infinity() : difference);
        }
        r.argmax_changes += d::greedy_token(row) != d::greedy_token(reference);
        ++r.rows;
      }
      d::must(v.commit(static_cast<int>(block.size())), "commit a block");
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace blockpilot
