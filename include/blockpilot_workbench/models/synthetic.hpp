// The synthetic testbed pair: a seeded autoregressive target whose sharpness differs per prompt,
// and a block drafter whose agreement decays with the block position and with the distance of
// the block size from the size the prompt prefers. Calibrated on real DFlash acceptance data
// (docs/synthetic.md); everything runs without model weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/drafting.hpp"
#include "blockpilot/cpu/row_ops.hpp"

namespace blockpilot {

/// Parameters of the synthetic world. The acceptance model at T = 0: the drafter proposes the
/// target's greedy token at block position j (1-based) with probability
///   alpha_j(b) = min(0.999, A · decay^(j-1) · m(b) · (j >= training_block_size ? untrained : 1)),
/// A = min(0.999, acceptance_base + acceptance_slope · z), m(b) = exp(-shorter_penalty · (b* - b)) for
/// b <= b*, exp(-longer_penalty · (b - b*)) above; b* = clamp(round(16 + preferred_offset +
/// preferred_slope · (z - 0.5) + preferred_noise · n), preferred_min, preferred_max), where z ~ U(0,1)
/// and n ~ N(0,1) are drawn per prompt. z also sets the target's sharpness, so the prefill
/// distribution carries information about b*; n does not. Defaults: a least-squares fit to the mean
/// tau(b) of the shipped gsm8k acceptance data.
struct synthetic_params {
  std::int64_t vocab = 151936;
  std::uint64_t seed = 2026;
  int candidates = 8;              ///< tokens that share the non-background mass at each position
  int training_block_size = 16;    ///< B the drafter was "trained" with
  double sharpness_base = 0.5;     ///< top-1 probability = clamp(sigmoid(base + slope·z + noise·e), 0.5, 0.995)
  double sharpness_slope = 3.0;
  double sharpness_noise = 0.8;    ///< e ~ N(0,1) per position
  double background_share = 0.15;  ///< share of the non-top mass spread over the whole vocabulary (Zipf)
  double ratio_noise = 0.02;       ///< per-position noise of the candidates' decay ratio
  double acceptance_base = 0.9565;
  double acceptance_slope = 0.0454;
  double position_decay = 0.9597;
  double shorter_penalty = 0.0076;
  double longer_penalty = 0.0103;
  double untrained_factor = 0.9857;
  double preferred_offset = 0.2395;
  double preferred_slope = 4.0173;
  double preferred_noise = 0.7615;
  int preferred_min = 13;
  int preferred_max = 19;
  double draft_sharpness = 0.9;    ///< a drafter that "knows" uses top-1 probability p1^(1/draft_sharpness)
};

/// What the world derives from a prompt.
struct synthetic_prompt {
  std::uint64_t hash = 0;
  double latent = 0;        ///< z: sharpness and preferred size
  double preference = 0;    ///< b* before rounding, minus 16: sets how fast the candidates' mass decays
  int preferred_block = 16; ///< b*
};

/// The shared rule of the synthetic pair: target rows, the drafter's knowledge, prompt profiles.
class synthetic_world {
 public:
  explicit synthetic_world(synthetic_params p = {}) : p_(p) {
    if (p_.vocab < 2 || p_.candidates < 1 || p_.candidates > p_.vocab)
      throw error("synthetic_params: vocab must be >= 2 and candidates in [1, vocab]");
    log_background_.resize(static_cast<std::size_t>(p_.vocab));
    std::uint64_t stride = 7919;  // a prime that makes v -> v·stride mod V a permutation of ranks
    while (std::gcd(stride, static_cast<std::uint64_t>(p_.vocab)) != 1) stride += 2;
    double harmonic = 0;
    for (std::int64_t r = 1; r <= p_.vocab; ++r) harmonic += 1.0 / static_cast<double>(r);
    for (std::int64_t v = 0; v < p_.vocab; ++v) {
      const auto rank = (static_cast<std::uint64_t>(v) * stride + p_.seed) % static_cast<std::uint64_t>(p_.vocab);
      log_background_[static_cast<std::size_t>(v)] = static_cast<float>(-std::log((static_cast<double>(rank) + 1.0) * harmonic));
    }
  }

  [[nodiscard]] const synthetic_params& params() const { return p_; }
  [[nodiscard]] std::int64_t vocab_size() const { return p_.vocab; }

  [[nodiscard]] synthetic_prompt profile(std::span<const token_id> prompt) const {
    std::uint64_t h = mix(p_.seed ^ 0x70726f6d7074ULL);
    for (const token_id t : prompt) h = mix(h ^ static_cast<std::uint64_t>(t));
    synthetic_prompt out;
    out.hash = h;
    out.latent = unit(mix(h ^ 1));
    const double noise = normal(mix(h ^ 2));
    out.preference = p_.preferred_offset + p_.preferred_slope * (out.latent - 0.5) + p_.preferred_noise * noise;
    const double b = 16.0 + out.preference;
    out.preferred_block = std::clamp(static_cast<int>(std::nearbyint(b)), p_.preferred_min, p_.preferred_max);
    return out;
  }

  /// The state that determines the target's distribution after the token at `position`
  /// (which is `last`, preceded by `previous`).
  [[nodiscard]] std::uint64_t state(const synthetic_prompt& prompt, std::int64_t position, token_id last,
                                    token_id previous) const {
    return mix(mix(prompt.hash ^ static_cast<std::uint64_t>(position)) ^
               (static_cast<std::uint64_t>(static_cast<std::uint32_t>(last)) << 32 |
                static_cast<std::uint32_t>(previous)));
  }
  /// A state the drafter confuses with `s` when it does not know the answer.
  [[nodiscard]] static std::uint64_t confused(std::uint64_t s) { return mix(s ^ 0xC0FFEEULL); }

  /// The i-th candidate token of a state; candidate 0 is the greedy token.
  [[nodiscard]] token_id candidate(std::uint64_t s, int i) const {
    return static_cast<token_id>(mix(s + 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(i + 1)) %
                                 static_cast<std::uint64_t>(p_.vocab));
  }
  /// The target's greedy token for a state (no row needed).
  [[nodiscard]] token_id greedy_token(std::uint64_t s) const { return candidate(s, 0); }

  /// Top-1 probability at a state of a prompt.
  [[nodiscard]] double top_probability(const synthetic_prompt& prompt, std::uint64_t s) const {
    const double x = p_.sharpness_base + p_.sharpness_slope * prompt.latent + p_.sharpness_noise * normal(mix(s ^ 3));
    return std::clamp(1.0 / (1.0 + std::exp(-x)), 0.5, 0.995);
  }

  /// Writes the logits of state `s` ([vocab]): Zipf background plus the candidates' mass, with
  /// top-1 probability raised to the power `top_exponent` (1 for the target itself).
  void fill_logits(const synthetic_prompt& prompt, std::uint64_t s, double top_exponent, std::span<float> row) const {
    const row_mix m = mix_of(prompt, s, top_exponent);
    for (std::size_t v = 0; v < row.size(); ++v) row[v] = log_background_[v] + m.shift;
    for (int i = 0; i < p_.candidates; ++i) {
      float& x = row[static_cast<std::size_t>(candidate(s, i))];
      x = add_mass(x, m, i);
    }
  }

  /// What fill_logits writes, in sparse form: entry v is `log_background()[v] + shift` except the
  /// candidates, where it is `values[i]` at `tokens[i]` (the final value; a token listed twice has the same
  /// value both times). tokens and values hold params().candidates entries. Returns the shift.
  float sparse_logits(const synthetic_prompt& prompt, std::uint64_t s, double top_exponent, std::span<token_id> tokens,
                      std::span<float> values) const {
    const row_mix m = mix_of(prompt, s, top_exponent);
    for (int i = 0; i < p_.candidates; ++i) {
      const token_id t = candidate(s, i);
      const auto u = static_cast<std::size_t>(i);
      float x = log_background_[static_cast<std::size_t>(t)] + m.shift;  // the entry so far, as fill_logits has it
      for (std::size_t e = 0; e < u; ++e)
        if (tokens[e] == t) x = values[e];
      tokens[u] = t;
      values[u] = add_mass(x, m, i);
      for (std::size_t e = 0; e < u; ++e)
        if (tokens[e] == t) values[e] = values[u];
    }
    return m.shift;
  }
  /// The Zipf background of every row, before the shift ([vocab]).
  [[nodiscard]] std::span<const float> log_background() const { return log_background_; }

  /// Probability that the drafter knows the token at block position j (1-based) with block size b.
  [[nodiscard]] double acceptance_probability(const synthetic_prompt& prompt, int j, int b) const {
    const double a = std::min(0.999, p_.acceptance_base + p_.acceptance_slope * prompt.latent);
    const int gap = b - prompt.preferred_block;
    const double mismatch = gap <= 0 ? std::exp(p_.shorter_penalty * gap) : std::exp(-p_.longer_penalty * gap);
    const double untrained = j >= p_.training_block_size ? p_.untrained_factor : 1.0;
    return std::min(0.999, a * std::pow(p_.position_decay, j - 1) * mismatch * untrained);
  }
  /// The difficulty of a state for the drafter: it knows the token when difficulty < alpha_j(b).
  /// One value per state, whatever the block size and position, so that a token that is hard at one
  /// block size is hard at every size (as with real drafters).
  [[nodiscard]] static double difficulty(std::uint64_t s) { return unit(mix(s ^ 0xD1CEULL)); }

  static constexpr std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  }
  static double unit(std::uint64_t x) { return static_cast<double>(x >> 11) * 0x1p-53; }
  static double normal(std::uint64_t x) {  // Box-Muller from two halves
    const double u1 = (static_cast<double>(x >> 40) + 0.5) * 0x1p-24;
    const double u2 = static_cast<double>((x >> 16) & 0xFFFFFF) * 0x1p-24;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  /// The masses of one row: top-1, the rest, the background's log shift, the candidates' decay.
  struct row_mix {
    double p1, rest;
    float shift;
    double ratio, norm;
  };
  [[nodiscard]] row_mix mix_of(const synthetic_prompt& prompt, std::uint64_t s, double top_exponent) const {
    row_mix m{};
    m.p1 = std::pow(top_probability(prompt, s), top_exponent);
    m.rest = 1.0 - m.p1;
    m.shift = static_cast<float>(std::log(m.rest * p_.background_share));
    const int others = p_.candidates - 1;
    m.ratio = std::clamp(0.3 + 0.4 / (1.0 + std::exp(-prompt.preference / 2.0)) + p_.ratio_noise * normal(mix(s ^ 4)),
                         0.05, 0.95);
    m.norm = others > 0 ? (1.0 - std::pow(m.ratio, others)) / (1.0 - m.ratio) : 1.0;
    return m;
  }
  /// Candidate i's mass added to the entry x.
  [[nodiscard]] float add_mass(float x, const row_mix& m, int i) const {
    const double mass = i == 0 ? m.p1 : m.rest * (1.0 - p_.background_share) * std::pow(m.ratio, i - 1) / m.norm;
    return static_cast<float>(std::log(std::exp(static_cast<double>(x)) + mass));
  }

  synthetic_params p_;
  std::vector<float> log_background_;
};

/// Where the synthetic target stands in a request: the state of each row it is asked for. Shared by
/// synthetic_target and the device-resident target (cuda/synthetic.cuh).
class synthetic_cursor {
 public:
  explicit synthetic_cursor(const synthetic_world& world) : world_(world) {}

  [[nodiscard]] const synthetic_prompt& prompt_profile() const { return prompt_; }

  /// Starts a request (prompt not empty); the state of the prefill row.
  std::uint64_t begin(std::span<const token_id> prompt) {
    prompt_ = world_.profile(prompt);
    committed_ = static_cast<std::int64_t>(prompt.size());
    last_ = prompt.back();
    previous_ = prompt.size() > 1 ? prompt[prompt.size() - 2] : -1;
    return world_.state(prompt_, committed_ - 1, last_, previous_);
  }

  /// Places `block` at the next positions: `row(j, state)` for each of its rows, in order.
  template <class Row>
  void score(std::span<const token_id> block, Row&& row) {
    pending_.assign(block.begin(), block.end());
    token_id previous = last_;
    for (std::size_t j = 0; j < block.size(); ++j) {
      row(static_cast<std::int64_t>(j), world_.state(prompt_, committed_ + static_cast<std::int64_t>(j), block[j], previous));
      previous = block[j];
    }
  }

  /// Keeps the first n positions of the last block.
  status commit(int n) {
    if (n < 1 || static_cast<std::size_t>(n) > pending_.size()) return status::invalid_argument;
    previous_ = n > 1 ? pending_[static_cast<std::size_t>(n) - 2] : last_;
    last_ = pending_[static_cast<std::size_t>(n) - 1];
    committed_ += n;
    pending_.clear();
    return status::success;
  }

 private:
  const synthetic_world& world_;
  synthetic_prompt prompt_;
  std::int64_t committed_ = 0;
  token_id last_ = 0, previous_ = -1;
  std::vector<token_id> pending_;
};

/// The synthetic target as a `verifier`.
class synthetic_target {
 public:
  explicit synthetic_target(const synthetic_world& world) : world_(world), cursor_(world) {}

  [[nodiscard]] std::int64_t vocab_size() const { return world_.vocab_size(); }
  [[nodiscard]] const synthetic_prompt& prompt_profile() const { return cursor_.prompt_profile(); }

  status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) {
    if (prompt.empty()) return status::empty_prompt;
    const std::uint64_t s = cursor_.begin(prompt);
    ensure_rows(1);
    world_.fill_logits(cursor_.prompt_profile(), s, 1.0, row(0));
    logits = {rows_.data(), 1, vocab_size()};
    return status::success;
  }

  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    const auto b = static_cast<std::int64_t>(block.size());
    if (b < 1) return status::invalid_block_size;
    ensure_rows(b);
    cursor_.score(block, [&](std::int64_t j, std::uint64_t s) { world_.fill_logits(cursor_.prompt_profile(), s, 1.0, row(j)); });
    logits = {rows_.data(), b, vocab_size()};
    return status::success;
  }

  status commit(int n) { return cursor_.commit(n); }

 private:
  void ensure_rows(std::int64_t b) {
    if (static_cast<std::int64_t>(rows_.size()) < b * vocab_size()) rows_.resize(static_cast<std::size_t>(b * vocab_size()));
  }
  std::span<float> row(std::int64_t j) {
    return {rows_.data() + j * vocab_size(), static_cast<std::size_t>(vocab_size())};
  }

  const synthetic_world& world_;
  synthetic_cursor cursor_;
  std::vector<float> rows_;
};

/// The synthetic block drafter as a `drafter_with_probabilities`. At T = 0 it proposes greedy
/// tokens of what it believes (the target's state when its coin says it knows, a confused state
/// otherwise); at T > 0 it samples from that belief at T, and exposes it as q.
class synthetic_drafter {
 public:
  explicit synthetic_drafter(const synthetic_world& world, int max_draft_rows = 63)
      : world_(world), max_rows_(max_draft_rows) {}

  [[nodiscard]] std::int64_t vocab_size() const { return world_.vocab_size(); }
  [[nodiscard]] int max_draft_rows() const { return max_rows_; }

  status begin(std::span<const token_id> prompt) {
    prompt_ = world_.profile(prompt);
    return status::success;
  }
  status commit(int) { return status::success; }

  status draft(const draft_request& r, std::span<token_id> out) { return draft_rows(r, out, {}); }
  status draft(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    if (q.rows < r.block_size - 1 || q.cols != vocab_size()) return status::invalid_argument;
    return draft_rows(r, out, q);
  }

 private:
  status draft_rows(const draft_request& r, std::span<token_id> out, matrix_view<float> q) {
    const int b = r.block_size;
    if (b < 1 || b - 1 > max_rows_ || out.size() < static_cast<std::size_t>(b - 1)) return status::invalid_block_size;
    if (r.context.empty()) return status::invalid_argument;
    const auto anchor = static_cast<std::int64_t>(r.context.size()) - 1;
    token_id last = r.context.back();
    token_id previous = anchor > 0 ? r.context[static_cast<std::size_t>(anchor) - 1] : -1;
    const bool rowless = r.temperature < detail::greedy_temperature && (r.process_logits == nullptr || !*r.process_logits);
    if (!rowless) row_.resize(static_cast<std::size_t>(vocab_size()));
    for (int j = 1; j < b; ++j) {
      const std::uint64_t s = world_.state(prompt_, anchor + j - 1, last, previous);
      const bool knows = synthetic_world::difficulty(s) < world_.acceptance_probability(prompt_, j, b);
      const std::uint64_t belief = knows ? s : synthetic_world::confused(s);
      token_id t = world_.greedy_token(belief);
      const std::span<float> q_row = q.empty() ? std::span<float>{} : q.row(j - 1);
      if (rowless) {  // the greedy token needs no row
        cpu_detail::write_one_hot(q_row, t);
      } else {
        world_.fill_logits(prompt_, belief, knows ? 1.0 / world_.params().draft_sharpness : 1.0, row_);
        const auto drafts = std::span<const token_id>(out.data(), static_cast<std::size_t>(j) - 1);
        if (const status st = draft_token(row_, r, j, drafts, scratch_, q_row, t); st != status::success)
          return st;
      }
      out[static_cast<std::size_t>(j) - 1] = t;
      previous = last;
      last = t;
    }
    return status::success;
  }

  const synthetic_world& world_;
  int max_rows_;
  synthetic_prompt prompt_;
  std::vector<float> row_;
  draft_scratch scratch_;
};

/// `count` prompts of random tokens with lengths in [min_length, max_length], from `seed`.
[[nodiscard]] inline std::vector<std::vector<token_id>> synthetic_prompts(int count, std::int64_t vocab, int min_length,
                                                                         int max_length, std::uint64_t seed) {
  std::vector<std::vector<token_id>> prompts(static_cast<std::size_t>(count));
  std::uint64_t x = seed;
  for (auto& p : prompts) {
    x = synthetic_world::mix(x);
    p.resize(static_cast<std::size_t>(min_length + static_cast<int>(x % static_cast<std::uint64_t>(max_length - min_length + 1))));
    for (auto& t : p) t = static_cast<token_id>((x = synthetic_world::mix(x)) % static_cast<std::uint64_t>(vocab));
  }
  return prompts;
}

}  // namespace blockpilot
