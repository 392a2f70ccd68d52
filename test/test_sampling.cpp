// Sampling controls (top-k, top-p, min-p) and the logits-processor hook: the kept sets on known rows, the
// rules reproducing the processed distribution (chi-square, drafts from raw and from processed q, and a
// broken rule that the test must catch), and the decoder applying both consistently.
#define BOOST_TEST_MODULE sampling
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "blockpilot/cpu/sampling_controls.hpp"
#include "support/test_models.hpp"
#include "support/processed_distribution.hpp"
#include "support/six_token_rows.hpp"

using namespace blockpilot;
using namespace blockpilot::testing;

namespace {

constexpr int vocab = testing::six;
constexpr int trials = 20000;
using dist = testing::six_dist;
/// Rejection sampling with a bug a port could make: the controls shape the accept test but the residual
/// is taken from the unprocessed p.
struct rejection_with_raw_residual {
  static constexpr bool needs_draft_probabilities = true;
  static constexpr std::string_view name = "broken";
};
}  // namespace

template <>
struct blockpilot::acceptance_op<rejection_with_raw_residual, cpu_backend> {
  static std::size_t workspace_size(int b, std::int64_t v) { return acceptance_op<rejection_sampling, cpu_backend>::workspace_size(b, v); }
  static status run(const acceptance_input& in, std::span<std::byte> ws, acceptance_result& out) {
    acceptance_input raw = in;
    raw.sampling = {};
    acceptance_result with_controls, without;
    if (const status s = acceptance_op<rejection_sampling, cpu_backend>::run(in, ws, with_controls); s != status::success) return s;
    if (const status s = acceptance_op<rejection_sampling, cpu_backend>::run(raw, ws, without); s != status::success) return s;
    // Same accept decisions as with the controls; the replacement token of a rejection from raw p.
    out = with_controls;
    if (with_controls.accepted == without.accepted && with_controls.accepted < static_cast<int>(in.block.size()) - 1)
      out.bonus = without.bonus;
    return status::success;
  }
};

namespace {

struct counts {
  std::array<std::int64_t, vocab> first{}, second{};
};

/// The rule on blocks [anchor, x1, x2] with x_j drawn from `q` (raw or processed), counting the committed
/// token at positions 1 and 2.
template <class Rule>
counts run_trials(const sampling_controls& controls, float temperature, bool processed_q) {
  const auto logits = logits_for(p_rows, temperature);
  dist q[2] = {q_rows[0], q_rows[1]};
  if (processed_q)
    for (auto& row : q) row = processed(row, controls);
  std::vector<float> qf;
  for (const auto& row : q)
    for (const double x : row) qf.push_back(static_cast<float>(x));
  std::vector<std::byte> ws(acceptance_op<Rule, cpu_backend>::workspace_size(3, vocab));
  counts c;
  for (int t = 0; t < trials; ++t) {
    const philox_stream rng{777, static_cast<std::uint64_t>(t)};
    const std::array<token_id, 3> block = {0, sample_from(q[0], rng.uniform(1, random_domain::draft_sample)),
                                           sample_from(q[1], rng.uniform(2, random_domain::draft_sample))};
    acceptance_input in{{logits.data(), 3, vocab}, block, {qf.data(), 2, vocab}, temperature, rng};
    in.sampling = controls;
    acceptance_result r;
    BOOST_REQUIRE((acceptance_op<Rule, cpu_backend>::run(in, ws, r) == status::success));
    ++c.first[static_cast<std::size_t>(r.accepted >= 1 ? block[1] : r.bonus)];
    if (r.accepted >= 1) ++c.second[static_cast<std::size_t>(r.accepted >= 2 ? block[2] : r.bonus)];
  }
  return c;
}

/// Whether both positions pass the chi-square test against the processed target rows.
template <class Rule>
bool reproduces(const sampling_controls& controls, float temperature, bool processed_q) {
  const counts c = run_trials<Rule>(controls, temperature, processed_q);
  // The target's rows are p at temperature 1 by construction of the logits (T · log p at T).
  int dof_a = 0, dof_b = 0;
  const double a = chi_square(c.first, processed(p_rows[0], controls), dof_a);
  const double b = chi_square(c.second, processed(p_rows[1], controls), dof_b);
  BOOST_TEST_MESSAGE(Rule::name << " T " << temperature << " top_k " << controls.top_k << " top_p " << controls.top_p << " min_p " << controls.min_p
                                << (processed_q ? ", processed q" : ", raw q") << ": chi2 " << a << " (" << dof_a << " dof), "
                                << b << " (" << dof_b << " dof)");
  return passes_chi_square(a, dof_a) && passes_chi_square(b, dof_b);
}

const sampling_controls control_cases[] = {{3, 1.0f, 0.0f}, {0, 0.6f, 0.0f}, {0, 1.0f, 0.3f}, {4, 0.6f, 0.3f}, {1, 1.0f, 0.0f}};

}  // namespace

BOOST_AUTO_TEST_CASE(kept_sets_on_known_rows) {
  // Weights of p_rows[0] at T = 1.
  const auto logits = logits_for(p_rows, 1.0f);
  const std::span<const float> row(logits.data(), vocab);
  std::vector<std::uint64_t> w(vocab);
  const auto kept = [&](const sampling_controls& c) {
    float m;
    token_id a;
    BOOST_REQUIRE((cpu_detail::checked_max(row, m, a) == status::success));
    const std::uint64_t total = cpu_detail::apply_sampling_controls(w, cpu_detail::fill_weights(row, m, 1.0f, w), c);
    BOOST_TEST(total == std::accumulate(w.begin(), w.end(), std::uint64_t{0}));
    std::vector<int> ids;
    for (int i = 0; i < vocab; ++i)
      if (w[static_cast<std::size_t>(i)] > 0) ids.push_back(i);
    return ids;
  };
  BOOST_TEST(kept({}) == (std::vector<int>{0, 1, 2, 3, 4, 5}));
  BOOST_TEST(kept({2, 1.0f, 0.0f}) == (std::vector<int>{0, 1}));
  BOOST_TEST(kept({0, 0.5f, 0.0f}) == (std::vector<int>{0, 1}));         // 0.30 + 0.25 >= 0.5
  BOOST_TEST(kept({0, 0.56f, 0.0f}) == (std::vector<int>{0, 1, 2}));     // 0.55 < 0.56
  BOOST_TEST(kept({0, 1.0f, 0.5f}) == (std::vector<int>{0, 1, 2}));      // >= 0.15
  BOOST_TEST(kept({0, 1.0f, 1.0f}) == (std::vector<int>{0}));
  BOOST_TEST(kept({0, 1e-6f, 0.0f}) == (std::vector<int>{0}));
  BOOST_TEST(kept({5, 0.9f, 0.2f}) == (std::vector<int>{0, 1, 2, 3}));   // top-k and min-p keep 5 (mass 0.95); top-p 0.9 of that (0.855) keeps 4
  BOOST_TEST(kept({100, 1.0f, 0.0f}) == (std::vector<int>{0, 1, 2, 3, 4, 5}));

  // Ties at the cut are all kept.
  const std::vector<float> tied = {0.0f, -1.0f, -1.0f, -1.0f, -5.0f};
  std::vector<std::uint64_t> tw(tied.size());
  const std::uint64_t t_total = cpu_detail::fill_weights(tied, 0.0f, 1.0f, tw);
  const std::uint64_t t_kept = cpu_detail::apply_sampling_controls(tw, t_total, {2, 1.0f, 0.0f});
  BOOST_TEST(std::count_if(tw.begin(), tw.end(), [](std::uint64_t x) { return x > 0; }) == 4);
  BOOST_TEST(t_kept == tw[0] + 3 * tw[1]);

  // Out-of-range controls.
  BOOST_TEST((sampling_controls{-1, 1.0f, 0.0f}.check() == status::invalid_argument));
  BOOST_TEST((sampling_controls{0, 0.0f, 0.0f}.check() == status::invalid_argument));
  BOOST_TEST((sampling_controls{0, 1.5f, 0.0f}.check() == status::invalid_argument));
  BOOST_TEST((sampling_controls{0, 1.0f, -0.1f}.check() == status::invalid_argument));
  BOOST_TEST((sampling_controls{0, std::nanf(""), 0.0f}.check() == status::invalid_argument));
  BOOST_TEST((sampling_controls{}.check() == status::success));
}

BOOST_AUTO_TEST_CASE(weight_selection_on_large_random_rows) {
  // select_weight against a full sort, by mass (top-p's threshold) and by count (top-k's k-th weight), on
  // rows with many ties, a long tail, zeros and weights up to 2^40, with and without a cut below.
  std::uint64_t x = 99;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::uint64_t> w(1000 + static_cast<std::size_t>(trial) * 37);
    for (auto& v : w) {
      x = synthetic_world::mix(x);
      v = x % 7 == 0 ? (x >> 40) % 50 : x % 11 == 0 ? 0 : (x >> 20) % (std::uint64_t{1} << (20 + trial % 21));
    }
    w[static_cast<std::size_t>(trial)] = std::uint64_t{1} << 40;  // the row maximum
    const std::uint64_t cut = trial % 3 == 0 ? 0 : (x >> 30) % 1000;
    std::vector<std::uint64_t> sorted;
    for (const auto v : w) sorted.push_back(detail::cut_weight(v, cut));
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const std::uint64_t total = std::accumulate(sorted.begin(), sorted.end(), std::uint64_t{0});
    const std::uint64_t target = 1 + (x >> 3) % total;
    std::uint64_t mass = 0, expected = 0;
    for (const auto v : sorted) {
      mass += v;
      expected = v;
      if (mass >= target) break;
    }
    BOOST_TEST(cpu_detail::select_weight(w, target, true, cut) == expected);
    const std::size_t k = 1 + (x >> 7) % w.size();
    BOOST_TEST(cpu_detail::select_weight(w, k, false, cut) == sorted[k - 1]);
  }
}

BOOST_AUTO_TEST_CASE(sample_and_match_reproduces_the_processed_distribution) {
  for (const auto& c : control_cases)
    for (const float t : {1.0f, 0.7f}) BOOST_TEST(reproduces<sample_and_match>(c, t, false));
}

BOOST_AUTO_TEST_CASE(rejection_sampling_reproduces_the_processed_distribution) {
  for (const auto& c : control_cases)
    for (const bool processed_q : {false, true})
      for (const float t : {1.0f, 0.7f}) BOOST_TEST(reproduces<rejection_sampling>(c, t, processed_q));
}

BOOST_AUTO_TEST_CASE(a_rule_that_ignores_the_controls_in_its_residual_is_caught) {
  // Drafts from raw q often fall outside the kept set: their rejections must resample from the processed p.
  BOOST_TEST(!reproduces<rejection_with_raw_residual>({3, 1.0f, 0.0f}, 1.0f, false));
  BOOST_TEST(!reproduces<rejection_with_raw_residual>({0, 0.6f, 0.0f}, 1.0f, false));
}

// --- the decoder: controls and the processor on both p and q -----------------------------------

namespace {

const synthetic_world& world() {
  static const synthetic_world w(synthetic_world_of(97));
  return w;
}

/// A processor that depends on the prefix: the last token of the prefix is penalised and token 5 banned.
void penalise(std::span<const token_id> prefix, std::span<float> row) {
  row[static_cast<std::size_t>(prefix.back())] -= 4.0f;
  row[5] = -std::numeric_limits<float>::infinity();
}

/// The synthetic target with the processor applied to its rows, following its own prefix: the reference.
class processed_target {
 public:
  explicit processed_target(const synthetic_world& w) : inner_(w) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
    prefix_.assign(p.begin(), p.end());
    return process(inner_.prefill(p, logits), {}, logits);
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    pending_.assign(block.begin(), block.end());
    return process(inner_.score(block, logits), block, logits);
  }
  status commit(int n) {
    prefix_.insert(prefix_.end(), pending_.begin(), pending_.begin() + n);
    return inner_.commit(n);
  }

 private:
  status process(status s, std::span<const token_id> block, matrix_view<const float>& logits) {
    if (s != status::success) return s;
    rows_.assign(logits.data, logits.data + logits.rows * logits.cols);
    std::vector<token_id> prefix = prefix_;
    for (std::int64_t j = 0; j < logits.rows; ++j) {
      if (!block.empty()) prefix.push_back(block[static_cast<std::size_t>(j)]);
      penalise(prefix, std::span<float>(rows_.data() + j * logits.cols, static_cast<std::size_t>(logits.cols)));
    }
    logits = {rows_.data(), logits.rows, logits.cols};
    return status::success;
  }
  synthetic_target inner_;
  std::vector<token_id> prefix_, pending_;
  std::vector<float> rows_;
};

template <class Rule>
std::vector<token_id> decode(const std::vector<token_id>& prompt, generation_config c, int b) {
  synthetic_drafter d(world());
  synthetic_target t(world());
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size, Rule> dec(d, t, {b});
  generation_result r;
  BOOST_TEST_REQUIRE((dec.generate(prompt, c, r) == status::success), to_string(r.error) << " in " << r.failed_stage);
  return r.tokens;
}

}  // namespace

BOOST_AUTO_TEST_CASE(processor_applies_to_every_target_row_with_its_prefix) {
  // Greedy on the processed target is the reference, for every rule at T = 0 and every block size;
  // the drafter does not know the processor (its drafts of token 5 must all be rejected).
  for (const auto& prompt : synthetic_prompts(4, 97, 2, 10, 21)) {
    processed_target reference(world());
    const auto expected = greedy_reference(reference, prompt, 60);
    BOOST_TEST(std::count(expected.begin(), expected.end(), 5) == 0);
    for (const int b : {1, 4, 16}) {
      generation_config c = greedy(60);
      c.process_logits = penalise;
      BOOST_TEST(decode<greedy_match>(prompt, c, b) == expected);
      BOOST_TEST(decode<sample_and_match>(prompt, c, b) == expected);
      BOOST_TEST(decode<rejection_sampling>(prompt, c, b) == expected);
    }
    // Sampling: the banned token never appears.
    generation_config c;
    c.max_new_tokens = 80;
    c.temperature = 1.0f;
    c.process_logits = penalise;
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      c.seed = seed;
      const auto sampled = decode<rejection_sampling>(prompt, c, 8);
      BOOST_TEST(std::count(sampled.begin(), sampled.end(), 5) == 0);
      const auto matched = decode<sample_and_match>(prompt, c, 8);
      BOOST_TEST(std::count(matched.begin(), matched.end(), 5) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(controls_that_keep_one_token_are_greedy_at_any_temperature) {
  for (const auto& prompt : synthetic_prompts(3, 97, 2, 10, 33)) {
    synthetic_target reference(world());
    const auto expected = greedy_reference(reference, prompt, 50);
    for (const sampling_controls controls : {sampling_controls{1, 1.0f, 0.0f}, sampling_controls{0, 1e-6f, 0.0f},
                                             sampling_controls{0, 1.0f, 1.0f}}) {
      generation_config c;
      c.max_new_tokens = 50;
      c.temperature = 1.0f;
      c.seed = 4;
      c.sampling = controls;
      BOOST_TEST(decode<sample_and_match>(prompt, c, 8) == expected);
      BOOST_TEST(decode<rejection_sampling>(prompt, c, 8) == expected);  // the drafter follows the controls too
      BOOST_TEST(decode<rejection_sampling>(prompt, c, 1) == expected);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_controls_are_refused_before_anything_runs) {
  synthetic_drafter d(world());
  synthetic_target t(world());
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size, rejection_sampling> dec(d, t, {4});
  generation_config c;
  c.temperature = 1.0f;
  c.sampling.top_p = 0.0f;
  generation_result r;
  BOOST_TEST((dec.generate(synthetic_prompts(1, 97, 3, 3, 1)[0], c, r) == status::invalid_argument));
  BOOST_TEST(r.failed_stage == "input");
  BOOST_TEST(r.tokens.empty());
}
