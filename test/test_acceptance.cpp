// Acceptance rules: unit cases, chi-square tests that sample-and-match and rejection sampling
// reproduce the target distribution at the first and a later position (and that broken rules
// fail the same test), the q = 0 and empty-residual edge cases, and bad inputs.
#define BOOST_TEST_MODULE acceptance
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <numeric>
#include <utility>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot/cpu/batched_acceptance.hpp"
#include "support/six_token_rows.hpp"

using namespace blockpilot;
using namespace blockpilot::testing;

// Two deliberately broken rules that the distribution test must catch.
struct always_accept {  ///< commits every draft: the output follows q, not p
  static constexpr bool needs_draft_probabilities = false;
  static constexpr std::string_view name = "always-accept";
};
struct rejection_without_residual {  ///< resamples from p instead of max(p - q, 0) after a rejection
  static constexpr bool needs_draft_probabilities = true;
  static constexpr std::string_view name = "rejection-no-residual";
};

template <>
struct blockpilot::acceptance_op<always_accept, cpu_backend> {
  static std::size_t workspace_size(int, std::int64_t vocab) { return static_cast<std::size_t>(vocab) * 8; }
  static status run(const acceptance_input& in, std::span<std::byte> ws, acceptance_result& out) {
    const int b = static_cast<int>(in.block.size());
    out.accepted = b - 1;
    return cpu_detail::sample_row(in.target_logits.row(b - 1), in.temperature,
                                  in.rng.bits64(static_cast<std::uint32_t>(b - 1), random_domain::target_sample),
                                  {reinterpret_cast<std::uint64_t*>(ws.data()), static_cast<std::size_t>(in.target_logits.cols)},
                                  out.bonus);
  }
};

template <>
struct blockpilot::acceptance_op<rejection_without_residual, cpu_backend> {
  static std::size_t workspace_size(int, std::int64_t vocab) { return static_cast<std::size_t>(vocab) * 8; }
  static status run(const acceptance_input& in, std::span<std::byte> ws, acceptance_result& out) {
    const auto weights = std::span<std::uint64_t>(reinterpret_cast<std::uint64_t*>(ws.data()), static_cast<std::size_t>(in.target_logits.cols));
    const int b = static_cast<int>(in.block.size());
    for (int j = 0; j + 1 < b; ++j) {
      const auto row = in.target_logits.row(j);
      float m = 0;
      token_id am = 0;
      (void)cpu_detail::checked_max(row, m, am);
      const auto total = cpu_detail::fill_weights(row, m, in.temperature, weights);
      const token_id x = in.block[static_cast<std::size_t>(j) + 1];
      const double px = static_cast<double>(weights[static_cast<std::size_t>(x)]) / static_cast<double>(total);
      if (in.rng.uniform(static_cast<std::uint32_t>(j), random_domain::accept_test) * in.draft_probs.row(j)[static_cast<std::size_t>(x)] < px)
        continue;
      out = {j, cpu_detail::pick_by_weight(weights, total, in.rng.bits64(static_cast<std::uint32_t>(j), random_domain::residual_sample))};
      return status::success;
    }
    out.accepted = b - 1;
    return cpu_detail::sample_row(in.target_logits.row(b - 1), in.temperature,
                                  in.rng.bits64(static_cast<std::uint32_t>(b - 1), random_domain::target_sample), weights, out.bonus);
  }
};

struct rejection_with_argmax_fallback {  ///< takes p's argmax, not a draw from p, when the residual is empty
  static constexpr bool needs_draft_probabilities = true;
  static constexpr std::string_view name = "rejection-argmax-fallback";
};

template <>
struct blockpilot::acceptance_op<rejection_with_argmax_fallback, cpu_backend> {
  using rule = acceptance_op<rejection_sampling, cpu_backend>;
  static std::size_t workspace_size(int b, std::int64_t vocab) { return rule::workspace_size(b, vocab); }
  static status run(const acceptance_input& in, std::span<std::byte> ws, acceptance_result& out) {
    if (const status s = rule::run(in, ws, out); s != status::success) return s;
    const int j = out.accepted;
    if (j + 1 == static_cast<int>(in.block.size())) return status::success;  // no rejection
    const auto weights = std::span<std::uint64_t>(reinterpret_cast<std::uint64_t*>(ws.data()), static_cast<std::size_t>(in.target_logits.cols));
    float m = 0;
    token_id argmax = 0;
    (void)cpu_detail::checked_max(in.target_logits.row(j), m, argmax);
    const auto total = cpu_detail::fill_weights(in.target_logits.row(j), m, in.temperature, weights);
    bool empty = true;
    for (std::size_t i = 0; i < weights.size(); ++i)
      empty = empty && static_cast<double>(in.draft_probs.row(j)[i]) * static_cast<double>(total) >= static_cast<double>(weights[i]);
    if (empty) out.bonus = argmax;
    return status::success;
  }
};

static_assert(acceptance_rule<greedy_match> && acceptance_rule<sample_and_match> && acceptance_rule<rejection_sampling>);
static_assert(acceptance_rule<always_accept>);
static_assert(!acceptance_rule<greedy_match, cuda_backend>);  // no CUDA implementation in host code

namespace {

constexpr int vocab = testing::six;
constexpr int trials = 20000;
// Chi-square critical value for 5 degrees of freedom at significance 0.001.
constexpr double chi2_critical = 20.515;

using dist = testing::six_dist;


double chi_square(const std::array<std::int64_t, vocab>& counts, const dist& p) {
  std::int64_t n = 0;
  for (const auto c : counts) n += c;
  double chi2 = 0;
  for (int i = 0; i < vocab; ++i) {
    const double e = static_cast<double>(n) * p[static_cast<std::size_t>(i)];
    chi2 += (static_cast<double>(counts[static_cast<std::size_t>(i)]) - e) * (static_cast<double>(counts[static_cast<std::size_t>(i)]) - e) / e;
  }
  return chi2;
}

struct position_counts {
  std::array<std::int64_t, vocab> first{}, second{};
  std::array<std::int64_t, vocab> first_replaced{};  ///< the token that replaced a rejected first draft
  double mean_accepted = 0;
};

/// Runs `Rule` on blocks [anchor, x1, x2] with x_j ~ q_j (the drafter's sampling) and counts the
/// committed token at position 1, and at position 2 when the step reached it. The rule is told
/// `reported` as q (by default the q that was sampled).
template <class Rule>
position_counts run_trials(float temperature, std::span<const dist> q = q_rows, std::span<const dist> reported = {}) {
  const auto logits = logits_for(p_rows, temperature);
  std::vector<float> qf;
  for (const auto& row : reported.empty() ? q : reported)
    for (const double x : row) qf.push_back(static_cast<float>(x));
  std::vector<std::byte> ws(acceptance_op<Rule, cpu_backend>::workspace_size(3, vocab));
  position_counts c;
  for (int t = 0; t < trials; ++t) {
    const philox_stream rng{12345, static_cast<std::uint64_t>(t)};
    const std::array<token_id, 3> block = {0, sample_from(q[0], rng.uniform(1, random_domain::draft_sample)),
                                           sample_from(q[1], rng.uniform(2, random_domain::draft_sample))};
    const acceptance_input in{{logits.data(), 3, vocab}, block, {qf.data(), 2, vocab}, temperature, rng};
    acceptance_result r;
    BOOST_REQUIRE((acceptance_op<Rule, cpu_backend>::run(in, ws, r) == status::success));
    c.mean_accepted += r.accepted;
    if (r.accepted == 0) ++c.first_replaced[static_cast<std::size_t>(r.bonus)];
    ++c.first[static_cast<std::size_t>(r.accepted >= 1 ? block[1] : r.bonus)];
    if (r.accepted >= 1) ++c.second[static_cast<std::size_t>(r.accepted >= 2 ? block[2] : r.bonus)];
  }
  c.mean_accepted /= trials;
  return c;
}

template <class Rule>
std::pair<double, double> chi_squares(float temperature) {
  const auto c = run_trials<Rule>(temperature);
  const double a = chi_square(c.first, p_rows[0]), b = chi_square(c.second, p_rows[1]);
  BOOST_TEST_MESSAGE(Rule::name << " T=" << temperature << ": chi2 first position " << a << ", second position " << b
                                << " (critical " << chi2_critical << " at 0.001, 5 dof)");
  return {a, b};
}

}  // namespace

BOOST_AUTO_TEST_CASE(sample_and_match_reproduces_the_target_distribution) {
  for (const float t : {1.0f, 0.7f}) {
    const auto [first, second] = chi_squares<sample_and_match>(t);
    BOOST_TEST(first < chi2_critical);
    BOOST_TEST(second < chi2_critical);
  }
}

BOOST_AUTO_TEST_CASE(rejection_sampling_reproduces_the_target_distribution) {
  for (const float t : {1.0f, 0.7f}) {
    const auto [first, second] = chi_squares<rejection_sampling>(t);
    BOOST_TEST(first < chi2_critical);
    BOOST_TEST(second < chi2_critical);
  }
}

BOOST_AUTO_TEST_CASE(broken_rules_fail_the_same_test) {
  BOOST_TEST(chi_squares<always_accept>(1.0f).first > chi2_critical);
  BOOST_TEST(chi_squares<rejection_without_residual>(1.0f).first > chi2_critical);
}

BOOST_AUTO_TEST_CASE(rejection_accepts_more_than_sample_and_match) {
  const double rejection = run_trials<rejection_sampling>(1.0f).mean_accepted;
  const double match = run_trials<sample_and_match>(1.0f).mean_accepted;
  BOOST_TEST_MESSAGE("mean accepted drafts: rejection " << rejection << ", sample-and-match " << match);
  BOOST_TEST(rejection > match);
}

BOOST_AUTO_TEST_CASE(draft_with_zero_q_is_rejected_and_replaced_from_p) {
  // q puts no mass on token 5, yet the drafter proposes it: never accepted, and the replacement
  // follows p itself.
  const dist q0 = {0.2, 0.2, 0.2, 0.2, 0.2, 0.0};
  const auto logits = logits_for(p_rows, 1.0f);
  std::vector<float> qf;
  for (const double x : q0) qf.push_back(static_cast<float>(x));
  std::vector<std::byte> ws(acceptance_op<rejection_sampling, cpu_backend>::workspace_size(2, vocab));
  std::array<std::int64_t, vocab> counts{};
  for (int t = 0; t < trials; ++t) {
    const std::array<token_id, 2> block = {0, 5};
    const acceptance_input in{{logits.data(), 2, vocab}, block, {qf.data(), 1, vocab}, 1.0f, {7, static_cast<std::uint64_t>(t)}};
    acceptance_result r;
    BOOST_REQUIRE((acceptance_op<rejection_sampling, cpu_backend>::run(in, ws, r) == status::success));
    BOOST_REQUIRE(r.accepted == 0);
    ++counts[static_cast<std::size_t>(r.bonus)];
  }
  BOOST_TEST(chi_square(counts, p_rows[0]) < chi2_critical);
}

BOOST_AUTO_TEST_CASE(empty_residual_falls_back_to_p) {
  // Drafts come from p but the drafter reports q = 2 · p (unnormalised): q >= p for every token, so
  // half the drafts are rejected with a residual of mass 0; the replacement is then drawn from p, and
  // the output still follows p. Taking p's argmax instead must fail the same test.
  const auto doubled = [](const dist& p) {
    dist q;
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = 2.0 * p[i];
    return q;
  };
  const dist drafted[2] = {p_rows[0], p_rows[1]};
  const dist reported[2] = {doubled(p_rows[0]), p_rows[1]};
  const auto c = run_trials<rejection_sampling>(1.0f, drafted, reported);
  const std::int64_t replaced = std::accumulate(c.first_replaced.begin(), c.first_replaced.end(), std::int64_t{0});
  BOOST_TEST(replaced > trials / 3);
  BOOST_TEST(chi_square(c.first_replaced, p_rows[0]) < chi2_critical);
  BOOST_TEST(chi_square(c.first, p_rows[0]) < chi2_critical);
  const auto broken = run_trials<rejection_with_argmax_fallback>(1.0f, drafted, reported);
  BOOST_TEST(chi_square(broken.first_replaced, p_rows[0]) > chi2_critical);
}

BOOST_AUTO_TEST_CASE(greedy_match_unit_cases) {
  // Row j's argmax: 2, 4, 1. Drafts [2, 4] are both accepted, bonus 1.
  const std::vector<float> logits = {0, 1, 5, 2, 0, 0,  //
                                     0, 0, 0, 0, 9, 1,  //
                                     3, 7, 0, 0, 0, 0};
  acceptance_result r;
  const std::array<token_id, 3> all_match = {0, 2, 4};
  BOOST_TEST_REQUIRE((acceptance_op<greedy_match, cpu_backend>::run({{logits.data(), 3, vocab}, all_match, {}, 0.0f, {}}, {}, r) == status::success));
  BOOST_TEST(r.accepted == 2);
  BOOST_TEST(r.bonus == 1);
  const std::array<token_id, 3> second_wrong = {0, 2, 3};
  BOOST_TEST_REQUIRE((acceptance_op<greedy_match, cpu_backend>::run({{logits.data(), 3, vocab}, second_wrong, {}, 0.0f, {}}, {}, r) == status::success));
  BOOST_TEST(r.accepted == 1);
  BOOST_TEST(r.bonus == 4);
  const std::array<token_id, 1> no_drafts = {3};
  BOOST_TEST_REQUIRE((acceptance_op<greedy_match, cpu_backend>::run({{logits.data(), 1, vocab}, no_drafts, {}, 0.0f, {}}, {}, r) == status::success));
  BOOST_TEST(r.accepted == 0);
  BOOST_TEST(r.bonus == 2);
  // Ties go to the smaller token id.
  const std::vector<float> tie = {1, 3, 3, 0, 0, 0};
  BOOST_TEST_REQUIRE((acceptance_op<greedy_match, cpu_backend>::run({{tie.data(), 1, vocab}, no_drafts, {}, 0.0f, {}}, {}, r) == status::success));
  BOOST_TEST(r.bonus == 1);
}

BOOST_AUTO_TEST_CASE(bad_inputs_give_a_status) {
  std::vector<float> logits(2 * vocab, 0.0f);
  std::vector<float> q(vocab, 1.0f / vocab);
  std::vector<std::byte> ws(acceptance_op<rejection_sampling, cpu_backend>::workspace_size(2, vocab));
  const std::array<token_id, 2> block = {0, 1};
  acceptance_result r;
  const auto run = [&](auto rule, float t, std::span<std::byte> w, std::span<const token_id> blk = {}) {
    const acceptance_input in{{logits.data(), 2, vocab}, blk.empty() ? std::span<const token_id>(block) : blk, {q.data(), 1, vocab}, t, {}};
    return acceptance_op<decltype(rule), cpu_backend>::run(in, w, r);
  };
  logits[3] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST((run(greedy_match{}, 0.0f, ws) == status::non_finite_logits));
  BOOST_TEST((run(sample_and_match{}, 1.0f, ws) == status::non_finite_logits));
  BOOST_TEST((run(rejection_sampling{}, 1.0f, ws) == status::non_finite_logits));
  logits[3] = std::numeric_limits<float>::infinity();
  BOOST_TEST((run(sample_and_match{}, 1.0f, ws) == status::non_finite_logits));
  logits[3] = -std::numeric_limits<float>::infinity();  // a masked token is fine
  BOOST_TEST((run(sample_and_match{}, 1.0f, ws) == status::success));
  std::fill(logits.begin(), logits.begin() + vocab, -std::numeric_limits<float>::infinity());  // nothing finite
  BOOST_TEST((run(greedy_match{}, 0.0f, ws) == status::non_finite_logits));
  std::fill(logits.begin(), logits.end(), 0.0f);
  BOOST_TEST((run(sample_and_match{}, -1.0f, ws) == status::invalid_temperature));
  BOOST_TEST((run(rejection_sampling{}, 1.0f, std::span<std::byte>(ws).first(8)) == status::workspace_too_small));
  std::vector<std::uint64_t> aligned(ws.size() / sizeof(std::uint64_t) + 1);  // a weight row off its 8-byte alignment
  const std::span<std::byte> shifted(reinterpret_cast<std::byte*>(aligned.data()) + 4, ws.size());
  BOOST_TEST((run(sample_and_match{}, 1.0f, shifted) == status::invalid_argument));
  BOOST_TEST((run(rejection_sampling{}, 1.0f, shifted) == status::invalid_argument));
  const std::array<token_id, 2> bad_token = {0, vocab};
  BOOST_TEST((run(greedy_match{}, 0.0f, ws, bad_token) == status::invalid_token));

  // Vocabularies past the fixed-point sums' bound (the CUDA kernels' limit too) are refused, not wrapped.
  const std::int64_t wide = detail::max_sampling_vocab + 1;
  std::vector<float> wide_row(static_cast<std::size_t>(wide), 0.0f);
  std::vector<std::byte> wide_ws(acceptance_op<sample_and_match, cpu_backend>::workspace_size(1, wide));
  const std::array<token_id, 1> anchor = {0};
  const acceptance_input wide_in{{wide_row.data(), 1, wide}, anchor, {}, 1.0f, {}};
  BOOST_TEST((acceptance_op<sample_and_match, cpu_backend>::run(wide_in, wide_ws, r) == status::invalid_argument));
  BOOST_TEST((batched_acceptance<sample_and_match, cpu_backend>::can_implement({1, 1, wide}) == status::invalid_argument));
  BOOST_TEST((batched_acceptance<sample_and_match, cpu_backend>::can_implement({1, 1, wide - 1}) == status::success));

  // Views without data, or with rows closer than a row apart, are refused before anything is read.
  const auto run_rejection = [&](matrix_view<const float> target, matrix_view<const float> draft) {
    return acceptance_op<rejection_sampling, cpu_backend>::run({target, block, draft, 1.0f, philox_stream{1, 1}}, ws, r);
  };
  BOOST_TEST((run_rejection({logits.data(), 2, vocab}, {q.data(), 1, vocab}) == status::success));
  BOOST_TEST((run_rejection({nullptr, 2, vocab}, {q.data(), 1, vocab}) == status::invalid_argument));
  BOOST_TEST((run_rejection({logits.data(), 2, vocab, vocab - 1}, {q.data(), 1, vocab}) == status::invalid_argument));
  BOOST_TEST((run_rejection({logits.data(), 2, vocab}, {nullptr, 1, vocab}) == status::invalid_argument));
  BOOST_TEST((run_rejection({logits.data(), 2, vocab}, {q.data(), 1, vocab, 2}) == status::invalid_argument));
  BOOST_TEST((acceptance_op<greedy_match, cpu_backend>::run({{nullptr, 2, vocab}, block, {}, 0.0f, {}}, ws, r) ==
              status::invalid_argument));
}

BOOST_AUTO_TEST_CASE(same_stream_same_decision) {
  // The decision is a function of the inputs and the stream alone: fresh buffers give the same one,
  // and other streams give other ones.
  const auto decide = [](std::uint64_t seed) {
    const auto logits = logits_for(p_rows, 1.0f);
    std::vector<float> qf;
    for (const auto& row : q_rows)
      for (const double x : row) qf.push_back(static_cast<float>(x));
    std::vector<std::byte> ws(acceptance_op<rejection_sampling, cpu_backend>::workspace_size(3, vocab));
    const std::array<token_id, 3> block = {0, 1, 3};
    acceptance_result r;
    const acceptance_input in{{logits.data(), 3, vocab}, block, {qf.data(), 2, vocab}, 1.0f, {seed, 4}};
    BOOST_TEST_REQUIRE((acceptance_op<rejection_sampling, cpu_backend>::run(in, ws, r) == status::success));
    return std::pair(r.accepted, r.bonus);
  };
  const auto reference = decide(99);
  BOOST_TEST((decide(99) == reference));
  int other = 0;
  for (std::uint64_t seed = 0; seed < 64; ++seed) other += decide(seed) != reference;
  BOOST_TEST(other > 16);
}

// --- the batched contract on the CPU: every request as the per-request op decides it, both layouts ----

namespace {

/// A batch in host memory, padded: random rows, drafts that often match, per-request temperatures and
/// block sizes (some out of range), q = a perturbed softmax for rejection sampling.
struct host_batch {
  static constexpr int batch = 24, max_block = 6;
  static constexpr std::int64_t vocab_size = 50, stride = 53;  // misaligned rows
  std::vector<float> logits = std::vector<float>(batch * max_block * stride, std::nanf(""));
  std::vector<float> q = std::vector<float>(batch * (max_block - 1) * stride, std::nanf(""));
  std::vector<token_id> blocks = std::vector<token_id>(batch * max_block, -3);
  std::vector<int> sizes;
  std::vector<float> temperatures;
  std::vector<sampling_controls> controls;  ///< per request: each kind, their combination, one invalid
  std::vector<philox_stream> rng;

  explicit host_batch(std::uint64_t seed) {
    const sampling_controls kinds[] = {{}, {3, 1.0f, 0.0f}, {0, 0.7f, 0.0f}, {0, 1.0f, 0.2f}, {5, 0.8f, 0.1f}, {},
                                       {0, 0.0f, 0.0f}, {1, 1.0f, 0.0f}, {}, {0, 0.95f, 0.0f}, {}, {60, 1.0f, 0.0f}};
    std::uint64_t x = seed;
    const auto next = [&] { return x = x * 6364136223846793005ULL + 1442695040888963407ULL; };
    const float ts[] = {0.0f, 0.7f, 1.0f, 1.5f, -1.0f};
    for (int r = 0; r < batch; ++r) {
      const int b = r % 11 == 10 ? max_block + 1 : r % 13 == 12 ? 0 : 1 + static_cast<int>(next() >> 33) % max_block;
      sizes.push_back(b);
      temperatures.push_back(ts[r % 5]);
      controls.push_back(kinds[static_cast<std::size_t>(r + static_cast<int>(seed)) % std::size(kinds)]);
      rng.push_back({seed + static_cast<std::uint64_t>(r), 7});
      for (int j = 0; j < std::min(b, max_block); ++j) {
        float* row = logits.data() + (r * max_block + j) * stride;
        for (std::int64_t i = 0; i < vocab_size; ++i) row[i] = static_cast<float>((next() >> 40) % 1000) / 200.0f;
        if (j + 1 < max_block) {
          float* qr = q.data() + (r * (max_block - 1) + j) * stride;
          double z = 0;
          for (std::int64_t i = 0; i < vocab_size; ++i) z += qr[i] = std::exp(row[i] + static_cast<float>((next() >> 40) % 100) / 100.0f);
          for (std::int64_t i = 0; i < vocab_size; ++i) qr[i] = static_cast<float>(qr[i] / z);
        }
        token_id best = 0;
        for (std::int64_t i = 1; i < vocab_size; ++i)
          if (row[i] > row[best]) best = static_cast<token_id>(i);
        blocks[static_cast<std::size_t>(r * max_block + j)] = (next() >> 60) < 12 ? best : static_cast<token_id>((next() >> 33) % vocab_size);
      }
    }
  }
  batched_acceptance_input padded() const {
    batched_acceptance_input in;
    in.shape = {batch, max_block, vocab_size};
    in.target_logits = logits.data();
    in.logits_row_stride = stride;
    in.blocks = blocks.data();
    in.block_sizes = sizes.data();
    in.draft_probs = q.data();
    in.draft_row_stride = stride;
    in.temperatures = temperatures.data();
    in.per_request_sampling = controls.data();
    in.rng = rng.data();
    return in;
  }
  /// What the per-request op decides for request r.
  template <class Rule>
  std::pair<status, acceptance_result> expected(int r) const {
    const int b = sizes[static_cast<std::size_t>(r)];
    if (b < 1 || b > max_block) return {status::invalid_block_size, {0, -1}};
    std::vector<std::byte> ws(acceptance_op<Rule, cpu_backend>::workspace_size(max_block, vocab_size));
    acceptance_input in{{logits.data() + r * max_block * stride, b, vocab_size, stride},
                              {blocks.data() + r * max_block, static_cast<std::size_t>(b)},
                              {q.data() + r * (max_block - 1) * stride, b - 1, vocab_size, stride},
                              temperatures[static_cast<std::size_t>(r)],
                              rng[static_cast<std::size_t>(r)]};
    in.sampling = controls[static_cast<std::size_t>(r)];
    acceptance_result out;
    const status s = acceptance_op<Rule, cpu_backend>::run(in, ws, out);
    return {s, s == status::success ? out : acceptance_result{0, -1}};
  }
};

template <class Rule>
void check_batched(std::uint64_t seed, bool batch_wide_controls) {
  host_batch h(seed);
  using op = batched_acceptance<Rule, cpu_backend>;
  std::vector<acceptance_result> results(host_batch::batch);
  std::vector<status> statuses(host_batch::batch);
  batched_acceptance_input padded = h.padded();
  if (batch_wide_controls) {  // one set of controls for every request instead of per-request ones
    padded.sampling = {4, 0.9f, 0.05f};
    padded.per_request_sampling = nullptr;
    std::fill(h.controls.begin(), h.controls.end(), padded.sampling);
  }
  std::vector<std::byte> ws(op::workspace_size(padded.shape));
  BOOST_TEST_REQUIRE((op::run(cpu_backend{}, padded, ws, {results.data(), statuses.data()}) == status::success));

  // The flattened layout of the same requests (an empty request becomes max_block + 1: still invalid).
  std::vector<float> flat_logits, flat_q;
  std::vector<token_id> flat_blocks;
  std::vector<int> offsets{0};
  for (int r = 0; r < host_batch::batch; ++r) {
    const int b = std::max(h.sizes[static_cast<std::size_t>(r)], 1);
    const int rows = b == 1 && h.sizes[static_cast<std::size_t>(r)] == 0 ? host_batch::max_block + 1 : b;
    if (rows != b) h.sizes[static_cast<std::size_t>(r)] = rows;
    for (int j = 0; j < rows; ++j) {
      const bool real = j < host_batch::max_block;
      const float* row = h.logits.data() + (r * host_batch::max_block + std::min(j, host_batch::max_block - 1)) * host_batch::stride;
      flat_logits.insert(flat_logits.end(), row, row + host_batch::stride);
      flat_blocks.push_back(real ? h.blocks[static_cast<std::size_t>(r * host_batch::max_block + j)] : 0);
      if (j + 1 < rows) {
        const float* qr = h.q.data() + (r * (host_batch::max_block - 1) + std::min(j, host_batch::max_block - 2)) * host_batch::stride;
        flat_q.insert(flat_q.end(), qr, qr + host_batch::stride);
      }
    }
    offsets.push_back(offsets.back() + rows - 1);
  }
  batched_acceptance_input flat = padded;
  flat.target_logits = flat_logits.data();
  flat.blocks = flat_blocks.data();
  flat.block_sizes = nullptr;
  flat.draft_offsets = offsets.data();
  flat.draft_probs = flat_q.data();
  std::vector<acceptance_result> flat_results(host_batch::batch);
  std::vector<status> flat_statuses(host_batch::batch);
  BOOST_TEST_REQUIRE((op::run(cpu_backend{}, flat, ws, {flat_results.data(), flat_statuses.data()}) == status::success));

  int decided = 0;
  for (int r = 0; r < host_batch::batch; ++r) {
    const auto [want_status, want] = h.expected<Rule>(r);
    BOOST_TEST_CONTEXT(Rule::name << " request " << r << " b " << h.sizes[static_cast<std::size_t>(r)]) {
      BOOST_TEST((statuses[static_cast<std::size_t>(r)] == want_status));
      BOOST_TEST(results[static_cast<std::size_t>(r)].accepted == want.accepted);
      BOOST_TEST(results[static_cast<std::size_t>(r)].bonus == want.bonus);
      BOOST_TEST((flat_statuses[static_cast<std::size_t>(r)] == want_status));
      BOOST_TEST(flat_results[static_cast<std::size_t>(r)].accepted == want.accepted);
      BOOST_TEST(flat_results[static_cast<std::size_t>(r)].bonus == want.bonus);
    }
    decided += want_status == status::success;
  }
  BOOST_TEST(decided >= 12);

  // Call-level errors.
  BOOST_TEST((op::run(cpu_backend{}, padded, std::span<std::byte>(ws).first(ws.size() > 0 ? ws.size() - 1 : 0),
                      {results.data(), statuses.data()}) == (ws.empty() ? status::success : status::workspace_too_small)));
  batched_acceptance_input bad = padded;
  bad.block_sizes = nullptr;
  BOOST_TEST((op::run(cpu_backend{}, bad, ws, {results.data(), statuses.data()}) == status::invalid_argument));
  bad = padded;
  bad.logits_row_stride = host_batch::vocab_size - 1;
  BOOST_TEST((op::run(cpu_backend{}, bad, ws, {results.data(), statuses.data()}) == status::invalid_argument));
  // q's stride matters only to a rule that reads q (as on the device): the others ignore it and q itself.
  bad = padded;
  bad.draft_row_stride = 1;
  bad.draft_probs = Rule::needs_draft_probabilities ? padded.draft_probs : nullptr;
  BOOST_TEST((op::run(cpu_backend{}, bad, ws, {results.data(), statuses.data()}) ==
              (Rule::needs_draft_probabilities ? status::invalid_argument : status::success)));
}

}  // namespace

static_assert(batched_acceptance_rule<greedy_match, cpu_backend> && batched_acceptance_rule<rejection_sampling, cpu_backend>);
static_assert(batched_acceptance_rule<always_accept, cpu_backend>);  // a user's rule gets the batched op too

BOOST_AUTO_TEST_CASE(batched_contract_on_the_cpu_in_both_layouts) {
  for (const std::uint64_t seed : {1u, 2u, 3u})
    for (const bool batch_wide_controls : {false, true}) {
      check_batched<greedy_match>(seed, batch_wide_controls);
      check_batched<sample_and_match>(seed, batch_wide_controls);
      check_batched<rejection_sampling>(seed, batch_wide_controls);
      check_batched<always_accept>(seed, batch_wide_controls);
    }
}
