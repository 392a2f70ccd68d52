// Acceptance rules: unit cases, chi-square tests that sample-and-match and rejection sampling
// reproduce the target distribution at the first and a later position (and that broken rules
// fail the same test), the q = 0 and empty-residual edge cases, and bad inputs.
#define BOOST_TEST_MODULE acceptance
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>

#include "blockpilot/blockpilot.hpp"

using namespace blockpilot;

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

static_assert(acceptance_rule<greedy_match> && acceptance_rule<sample_and_match> && acceptance_rule<rejection_sampling>);
static_assert(acceptance_rule<always_accept>);
static_assert(!acceptance_rule<greedy_match, cuda_backend>);  // no CUDA implementation in host code

namespace {

constexpr int vocab = 6;
constexpr int trials = 20000;
// Chi-square critical value for 5 degrees of freedom at significance 0.001.
constexpr double chi2_critical = 20.515;

using dist = std::array<double, vocab>;
const dist p_rows[3] = {{0.30, 0.25, 0.20, 0.12, 0.08, 0.05}, {0.05, 0.10, 0.15, 0.20, 0.22, 0.28}, {0.4, 0.1, 0.1, 0.1, 0.2, 0.1}};
const dist q_rows[2] = {{0.10, 0.40, 0.05, 0.25, 0.05, 0.15}, {0.30, 0.02, 0.28, 0.10, 0.20, 0.10}};

/// Logits whose softmax at temperature T is `p`: T · log p.
std::vector<float> logits_for(std::span<const dist> rows, float temperature) {
  std::vector<float> out;
  for (const auto& p : rows)
    for (const double x : p) out.push_back(static_cast<float>(temperature * std::log(x)));
  return out;
}

token_id sample_from(const dist& q, double u) {
  double c = 0;
  for (int i = 0; i < vocab; ++i)
    if (u < (c += q[static_cast<std::size_t>(i)])) return i;
  return vocab - 1;
}

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
  // Drafts come from p but the drafter reports q = 1.01 · p (unnormalised): q >= p for every
  // token, so a rejection (1 % of drafts) leaves a residual of mass 0; the replacement is then
  // drawn from p, and the output still follows p.
  const dist q0 = [] {
    dist q;
    for (int i = 0; i < vocab; ++i) q[static_cast<std::size_t>(i)] = 1.01 * p_rows[0][static_cast<std::size_t>(i)];
    return q;
  }();
  const dist drafted[2] = {p_rows[0], p_rows[1]};
  const dist reported[2] = {q0, p_rows[1]};
  const auto c = run_trials<rejection_sampling>(1.0f, drafted, reported);
  BOOST_TEST(chi_square(c.first, p_rows[0]) < chi2_critical);
  BOOST_TEST(c.mean_accepted > 1.9);  // nearly every draft accepted
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
  const std::array<token_id, 2> bad_token = {0, vocab};
  BOOST_TEST((run(greedy_match{}, 0.0f, ws, bad_token) == status::invalid_token));
}

BOOST_AUTO_TEST_CASE(same_stream_same_decision) {
  const auto logits = logits_for(p_rows, 1.0f);
  std::vector<float> qf;
  for (const auto& row : q_rows)
    for (const double x : row) qf.push_back(static_cast<float>(x));
  std::vector<std::byte> ws(acceptance_op<rejection_sampling, cpu_backend>::workspace_size(3, vocab));
  const std::array<token_id, 3> block = {0, 1, 3};
  acceptance_result a, b;
  const acceptance_input in{{logits.data(), 3, vocab}, block, {qf.data(), 2, vocab}, 1.0f, {99, 4}};
  BOOST_TEST_REQUIRE((acceptance_op<rejection_sampling, cpu_backend>::run(in, ws, a) == status::success));
  BOOST_TEST_REQUIRE((acceptance_op<rejection_sampling, cpu_backend>::run(in, ws, b) == status::success));
  BOOST_TEST(a.accepted == b.accepted);
  BOOST_TEST(a.bonus == b.bonus);
}
