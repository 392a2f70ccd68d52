// What followed each n-gram in a corpus of the target's own writing: for every n-gram of n = min..max
// tokens seen at least `min_count` times, its most frequent next token and that token's share. Lookup
// drafting copies the context; where the context has nothing to copy (open chat), the target's turns of
// phrase on other requests often predict it instead.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

class ngram_corpus {
 public:
  /// A predicted next token and its share of the n-gram's occurrences, count / (occurrences + 1).
  struct prediction {
    token_id token = 0;
    float share = 0;
    int ngram = 0;  ///< the n of the matched n-gram
  };

  /// Counts the n-grams of `sequences`. Throws `error` unless 1 <= min_ngram <= max_ngram and min_count >= 1,
  /// or for a negative token id.
  explicit ngram_corpus(std::span<const std::vector<token_id>> sequences, int max_ngram = 4, int min_ngram = 2,
                        int min_count = 1)
      : max_ngram_(max_ngram), min_ngram_(min_ngram) {
    if (min_ngram < 1 || max_ngram < min_ngram || min_count < 1)
      throw error("ngram_corpus: needs 1 <= min_ngram <= max_ngram and min_count >= 1");
    std::vector<std::pair<std::uint64_t, token_id>> seen;  // (n-gram key, next token), one per occurrence
    for (const auto& s : sequences) {
      for (const token_id t : s) {
        if (t < 0) throw error("ngram_corpus: negative token id " + std::to_string(t));
        largest_ = std::max(largest_, t);
      }
      for (std::size_t i = 1; i < s.size(); ++i)
        for (int n = min_ngram; n <= max_ngram && static_cast<std::size_t>(n) <= i; ++n)
          seen.emplace_back(key(std::span(s).subspan(i - static_cast<std::size_t>(n), static_cast<std::size_t>(n))), s[i]);
    }
    std::sort(seen.begin(), seen.end());
    for (std::size_t i = 0; i < seen.size();) {  // runs of one key; within them, runs of one next token
      std::size_t end = i;
      entry e;
      while (end < seen.size() && seen[end].first == seen[i].first) {
        std::size_t run = end;
        while (run < seen.size() && seen[run] == seen[end]) ++run;
        if (run - end > e.count) e.token = seen[end].second, e.count = static_cast<std::uint32_t>(run - end);
        end = run;
      }
      e.total = static_cast<std::uint32_t>(end - i);
      if (e.total >= static_cast<std::uint32_t>(min_count)) table_.emplace(seen[i].first, e);
      i = end;
    }
  }

  [[nodiscard]] int max_ngram() const { return max_ngram_; }
  /// The largest token id in the corpus (-1 when it is empty).
  [[nodiscard]] token_id largest_token() const { return largest_; }
  /// N-grams kept (seen at least min_count times).
  [[nodiscard]] std::size_t size() const { return table_.size(); }

  /// Of the kept n-grams that end `context`, the prediction with the largest share (the longer
  /// n-gram on a tie), or none: a longer n-gram seen once (share 1/2) gives way to a shorter one
  /// that the corpus continued alike many times.
  [[nodiscard]] std::optional<prediction> predict(std::span<const token_id> context) const {
    std::optional<prediction> best;
    for (int n = std::min(max_ngram_, static_cast<int>(context.size())); n >= min_ngram_; --n)
      if (const auto it = table_.find(key(context.last(static_cast<std::size_t>(n)))); it != table_.end()) {
        const float share = static_cast<float>(it->second.count) / static_cast<float>(it->second.total + 1);
        if (!best || share > best->share) best = prediction{it->second.token, share, n};
      }
    return best;
  }

 private:
  struct entry {
    token_id token = 0;
    std::uint32_t count = 0, total = 0;
  };
  /// A 64-bit key of an n-gram (its length mixed in; two n-grams share one with a chance of about
  /// 2^-64 per pair, which the counts ignore).
  [[nodiscard]] static std::uint64_t key(std::span<const token_id> ngram) {
    std::uint64_t h = 0x9e3779b97f4a7c15ull ^ ngram.size();
    for (const token_id t : ngram) {
      h ^= static_cast<std::uint64_t>(static_cast<std::uint32_t>(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdull;
    }
    return h ^ (h >> 33);
  }

  int max_ngram_, min_ngram_;
  token_id largest_ = -1;
  std::unordered_map<std::uint64_t, entry> table_;
};

}  // namespace blockpilot
