// CPU pass behind prompt_features: replays prompt lookup over the prompt's own tokens (n-gram hash
// tables of the most recent earlier occurrence, one per n, in the caller's workspace) and counts how
// often a match exists, how often it predicts the next token, and how many drafts it would have had
// accepted. O(tokens × max_ngram × draft_tokens), no allocation.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::cpu_detail::prompt {

/// Slots of one n-gram table for a tail of `tokens` prompt tokens: a power of two with load <= 1/2.
[[nodiscard]] constexpr std::size_t table_slots(int tokens) noexcept {
  return std::bit_ceil(static_cast<std::size_t>(2 * std::max(tokens, 1)));
}

/// What one pass counts over the positions i = 1 .. L-1 of the analysed tail t[0..L) (position i is the
/// prediction of t[i] from t[0..i)). Shares are over those L-1 positions; all values are finite.
struct tallies {
  double distinct_share = 0;  ///< distinct tokens / L
  double repeat_share[8]{};   ///< [n-1]: positions whose last n tokens occurred earlier (n <= i required)
  double hit_share[8]{};      ///< [n-1]: ... and whose most recent earlier occurrence is followed by t[i]
  double lookup_hit = 0;      ///< the lookup rule (longest n first) predicts t[i]
  double lookup_accepted = 0; ///< mean drafts lookup would have had accepted in a block of draft_tokens + 1
};

/// A view of one table: slot -> end (exclusive) of the most recent occurrence of an n-gram, stored as a
/// float (exact: ends are below 2^24); -1 marks an empty slot. Probing is linear; a candidate is confirmed
/// by comparing its tokens, so hash collisions cost time, never correctness.
class ngram_table {
 public:
  ngram_table(std::span<float> slots, std::span<const token_id> t, int n) : slots_(slots), t_(t), n_(n) {}

  /// End of the most recent stored occurrence of t[end - n .. end), or -1.
  [[nodiscard]] std::int64_t find(std::size_t end) const noexcept {
    for (std::size_t s = hash(end) & mask();; s = (s + 1) & mask()) {
      const float v = slots_[s];
      if (v < 0) return -1;
      if (same(static_cast<std::size_t>(v), end)) return static_cast<std::int64_t>(v);
    }
  }
  /// Stores `end` as the most recent occurrence of t[end - n .. end); true when the n-gram was new.
  bool insert(std::size_t end) noexcept {
    for (std::size_t s = hash(end) & mask();; s = (s + 1) & mask()) {
      const float v = slots_[s];
      if (v < 0 || same(static_cast<std::size_t>(v), end)) {
        slots_[s] = static_cast<float>(end);
        return v < 0;
      }
    }
  }

 private:
  [[nodiscard]] std::size_t mask() const noexcept { return slots_.size() - 1; }
  [[nodiscard]] std::uint64_t hash(std::size_t end) const noexcept {
    std::uint64_t h = 0x9e3779b97f4a7c15ull;
    for (std::size_t j = end - static_cast<std::size_t>(n_); j < end; ++j)
      h = (h ^ static_cast<std::uint32_t>(t_[j])) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
  }
  [[nodiscard]] bool same(std::size_t a, std::size_t b) const noexcept {
    return std::equal(t_.begin() + static_cast<std::ptrdiff_t>(a) - n_, t_.begin() + static_cast<std::ptrdiff_t>(a),
                      t_.begin() + static_cast<std::ptrdiff_t>(b) - n_);
  }

  std::span<float> slots_;
  std::span<const token_id> t_;
  int n_;
};

/// Counts the tallies of tail `t` with n-grams 1..max_ngram (<= 8) and blocks of draft_tokens drafts.
/// workspace: max_ngram * table_slots(t.size()) floats. The lookup rule is lookup_drafter's: the longest
/// n whose last n tokens occurred before, the tokens after its most recent occurrence, drafts only
/// from tokens already seen (a match may not run past position i).
[[nodiscard]] inline status count(std::span<const token_id> t, int max_ngram, int draft_tokens, std::span<float> workspace,
                                  tallies& out) noexcept {
  out = {};
  if (max_ngram < 1 || max_ngram > 8 || draft_tokens < 1 || t.empty()) return status::invalid_argument;
  const std::size_t slots = table_slots(static_cast<int>(t.size()));
  if (workspace.size() < slots * static_cast<std::size_t>(max_ngram)) return status::workspace_too_small;
  std::fill_n(workspace.begin(), slots * static_cast<std::size_t>(max_ngram), -1.0f);
  const auto table = [&](int n) { return ngram_table(workspace.subspan(static_cast<std::size_t>(n - 1) * slots, slots), t, n); };

  const std::size_t length = t.size();
  std::size_t distinct = 0;
  for (std::size_t i = 1; i <= length; ++i) {
    // Predict t[i] from t[0..i) (every table holds the n-grams ending before i), then store the n-grams
    // ending at i; the last round only stores, so that distinct counts every token.
    std::int64_t lookup_from = -1;
    for (int n = std::min<int>(max_ngram, static_cast<int>(i)); n >= 1 && i < length; --n) {
      const std::int64_t from = table(n).find(i);
      if (from < 0) continue;
      out.repeat_share[n - 1] += 1;
      out.hit_share[n - 1] += t[static_cast<std::size_t>(from)] == t[i];
      if (lookup_from < 0) lookup_from = from;
    }
    if (lookup_from >= 0) {
      const auto from = static_cast<std::size_t>(lookup_from);
      out.lookup_hit += t[from] == t[i];
      std::size_t a = 0;
      while (a < static_cast<std::size_t>(draft_tokens) && from + a < i && i + a < length && t[from + a] == t[i + a]) ++a;
      out.lookup_accepted += static_cast<double>(a);
    }
    for (int n = 1; n <= max_ngram && static_cast<std::size_t>(n) <= i; ++n) {
      const bool added = table(n).insert(i);
      if (n == 1) distinct += added;
    }
  }
  const double positions = static_cast<double>(std::max<std::size_t>(length - 1, 1));
  for (int n = 0; n < max_ngram; ++n) {
    out.repeat_share[n] /= positions;
    out.hit_share[n] /= positions;
  }
  out.lookup_hit /= positions;
  out.lookup_accepted /= positions;
  out.distinct_share = static_cast<double>(distinct) / static_cast<double>(length);
  return status::success;
}

}  // namespace blockpilot::cpu_detail::prompt
