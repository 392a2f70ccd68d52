// Policies that decide per step and trim drafted blocks: the step cost model and its calibration,
// the adaptive policy's choices, the confidence and speed cut-offs; exact equality with plain greedy
// decoding under each, the replay of recorded decodes step for step, and the T = 1 output
// distribution under trimming (a drafter whose confidence reveals its draw must fail the same test).
#define BOOST_TEST_MODULE adaptive
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <array>
#include <climits>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "blockpilot/engine/step_timing.hpp"
#include "blockpilot_workbench/eval/step_replay.hpp"
#include "blockpilot_workbench/eval/sweep.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "blockpilot_workbench/models/ngram_corpus.hpp"
#include "support/check_error.hpp"
#include "support/temp_dir.hpp"
#include "support/test_models.hpp"

using namespace blockpilot;
using namespace blockpilot::testing;
namespace bdata = boost::unit_test::data;
namespace tt = boost::test_tools;

namespace {

const synthetic_world& world() {
  static const synthetic_world w = synthetic_world_of(97);
  return w;
}

step_record step(int b, int accepted, double seconds = 0) { return {1, b, accepted, {}, seconds}; }

}  // namespace

static_assert(per_step_block_size_policy<adaptive_block_size>);
static_assert(draft_trimming_policy<confidence_cutoff<runtime_block_size>>);
static_assert(!per_step_block_size_policy<confidence_cutoff<runtime_block_size>>);
static_assert(per_step_block_size_policy<confidence_cutoff<adaptive_block_size>>);
static_assert(draft_trimming_policy<speed_cutoff> && per_step_block_size_policy<speed_cutoff>);
static_assert(drafter_with_confidence<lookup_drafter>);

// --- the step cost model --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(step_costs_come_from_the_prior_then_from_timings) {
  step_cost_model m({1.0, 1.5, 2.0, 3.0}, {.memory = 0.999, .prior_timings = 4});
  BOOST_TEST(m.cost(3) == 2.0);
  m.begin_request();
  m.observe(1, 0.010);
  m.observe(4, 0.020);  // b = 4 timed at twice b = 1 in the same request, against a prior of 3
  BOOST_TEST(m.cost(4) == 3.0);  // a group teaches the curve when it closes
  m.begin_request();
  // One pair of timings is worth half a timing of the contrast (each is centred on their mean). Its
  // departure from the prior, log(2 / 3), is shared between b = 4's own and the level of every size
  // beside b = 1, each shrunk toward 0 as if by 4 timings: a fifth to each. Sizes not timed follow.
  BOOST_TEST(m.cost(4) == 3.0 * std::pow(2.0 / 3.0, 0.2), tt::tolerance(1e-12));
  BOOST_TEST(m.cost(2) == 1.5 * std::pow(2.0 / 3.0, 0.1), tt::tolerance(1e-12));
  BOOST_TEST(m.cost(3) == 2.0 * std::pow(2.0 / 3.0, 0.1), tt::tolerance(1e-12));
  for (const double bad : {0.0, -1.0, double(NAN), double(INFINITY)}) m.observe(2, bad);
  m.observe(9, 1.0);
  BOOST_TEST(m.observed(2) == 0);
  BOOST_TEST(m.observed(4) == 1);
  // Many timings outweigh the prior: b = 4 costs what the machine says (groups close every 32).
  for (int i = 0; i < 400; ++i) m.observe(1, 0.010), m.observe(4, 0.020);
  BOOST_TEST(m.cost(4) == 2.0, tt::tolerance(0.02));
  check_error([&] { (void)m.cost(5); }, {"outside 1..4"});
  check_error([] { step_cost_model({2.0, 3.0}); }, {"1 for b = 1"});
  check_error([] { step_cost_model({1.0, NAN}); }, {"positive, finite"});
  check_error([] { step_cost_model({1.0}, {.memory = 1.0}); }, {"memory"});
  check_error([] { step_cost_model({1.0}, {.prior_timings = 0}); }, {"prior_timings"});
  check_error([] { step_cost_model({1.0}, {.prior_timings = INFINITY}); }, {"prior_timings"});
  check_error([] { step_cost_model({1.0}, {.group_timings = 1}); }, {"group_timings"});
  BOOST_TEST(step_cost_model::linear(3, 0.25).cost(3) == 1.5);
}

BOOST_AUTO_TEST_CASE(step_costs_average_out_scattered_timings) {
  // The machine: b = 3 costs 1.05 plain steps where the load measurement said 1.17, and every timing
  // scatters by a log-normal factor of 20 %, as live timings on a shared machine do; requests differ
  // in context length (their scale). A decode that mostly drafts takes a plain step now and then.
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> scatter(0.0, 0.2);
  const std::vector<double> load{1.0, 1.1, 1.17, 1.22};
  step_cost_model m(load, {.memory = 0.999}), only_drafting(load);
  for (int r = 0; r < 60; ++r) {
    m.begin_request(), only_drafting.begin_request();
    const double scale = 0.005 * (1 + r % 5);
    for (int i = 0; i < 64; ++i) {
      const int b = i % 4 == 0 ? 1 : 3;
      m.observe(b, scale * (b == 3 ? 1.05 : 1.0) * scatter(rng));
      only_drafting.observe(3, scale * 1.05 * scatter(rng));
    }
  }
  BOOST_TEST(m.cost(3) == 1.05, tt::tolerance(0.03));
  BOOST_TEST(m.cost(2) < 1.1);  // never timed: follows b = 3 below the prior
  // Timings of one size alone show nothing of its cost against b = 1: the prior stays.
  BOOST_TEST(only_drafting.cost(3) == 1.17, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(step_costs_compare_steps_of_the_same_request) {
  // Short requests take plain steps, long ones (every step 2.5 times dearer) blocks of 8, which cost
  // 1.6 plain steps within a request. Across requests b = 8 would look 4 times as dear as b = 1.
  step_cost_model m = step_cost_model::linear(8, 0.1);
  for (int r = 0; r < 30; ++r) {
    m.begin_request();
    const bool long_request = r % 2 == 1;
    for (int i = 0; i < 12; ++i) {
      const int b = long_request ? (i % 4 == 0 ? 1 : 8) : (i % 4 == 0 ? 8 : 1);
      m.observe(b, (long_request ? 0.025 : 0.010) * (b == 8 ? 1.6 : 1.0));
    }
  }
  BOOST_TEST(m.cost(8) == 1.6, tt::tolerance(0.03));
}

BOOST_AUTO_TEST_CASE(calibration_times_the_verifier_and_leaves_it_usable) {
  synthetic_target target(world());
  const std::vector<token_id> context{1, 2, 3, 4, 5, 6, 7, 8};
  const auto seconds = measure_step_seconds(target, context, 6, 3);
  BOOST_TEST(seconds.size() == 6u);
  for (const double s : seconds) BOOST_TEST((std::isfinite(s) && s > 0));
  const auto m = step_cost_model::from_seconds(seconds);
  BOOST_TEST(m.cost(1) == 1.0);
  BOOST_TEST(m.cost(6) == seconds[5] / seconds[0], tt::tolerance(1e-9));
  BOOST_TEST(greedy_reference(target, context, 5).size() == 5u);  // prefills afresh
  check_error([&] { (void)measure_step_seconds(target, std::span<const token_id>{}, 4); }, {"needs a context"});
}

namespace {
/// A verifier whose first step after a prefill takes 300 ms (cold caches), and every other one 1 ms.
struct cold_first_step {
  synthetic_target target{world()};
  bool cold = false;
  int scores = 0;
  [[nodiscard]] std::int64_t vocab_size() const { return target.vocab_size(); }
  status prefill(std::span<const token_id> tokens, matrix_view<const float>& logits) {
    cold = true;
    return target.prefill(tokens, logits);
  }
  status score(std::span<const token_id> tokens, matrix_view<const float>& logits) {
    ++scores;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::exchange(cold, false) ? 300 : 1));
    return target.score(tokens, logits);
  }
  status commit(int n) { return target.commit(n); }
};
}  // namespace

BOOST_AUTO_TEST_CASE(calibration_leaves_the_cold_first_step_out) {
  // The step after the prefill is not timed, and of two rounds the median is their mean: the 300 ms
  // cold step counted would put b = 1 at 150 ms or more, against 1 ms for every timed step.
  cold_first_step v;
  const std::vector<token_id> context{1, 2, 3, 4, 5, 6, 7, 8};
  for (const int repeats : {1, 2}) {
    v.scores = 0;
    const auto seconds = measure_step_seconds(v, context, 3, repeats);
    BOOST_TEST(v.scores == 1 + 3 * repeats);
    BOOST_TEST(seconds[0] < 0.1);
  }
}

// --- the adaptive policy --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(adaptive_policy_follows_the_requests_acceptance) {
  adaptive_block_size p(step_cost_model::linear(16, 0.3));
  BOOST_TEST(adaptive_block_size::expected_tokens(0.5, 3) == 1.75);
  BOOST_TEST(adaptive_block_size::expected_tokens(1.0, 3) == 3.0);
  // Prior 0.5 at 30 % per row: b = 2 is best (1.5 / 1.3 against 1.75 / 1.6).
  BOOST_TEST(p.choose({}).block_size == 2);
  int b = 2;
  for (int i = 0; i < 30; ++i) b = p.next(step(b, b - 1));  // every draft accepted
  BOOST_TEST(b >= 8);
  BOOST_TEST(p.acceptance() > 0.9);
  int rejected = 0;
  while (b > 1 && rejected < 30) b = p.next(step(b, 0)), ++rejected;  // every first draft rejected
  BOOST_TEST(b == 1);
  BOOST_TEST(rejected <= 6);  // the accepted run is soon forgotten
  // Plain steps add no evidence: the estimate drifts back to the prior and drafting resumes.
  int plain = 0;
  while (b == 1 && plain < 200) b = p.next(step(1, 0)), ++plain;
  BOOST_TEST(b == 2);
  BOOST_TEST(plain >= 2);
  BOOST_TEST(p.choose({}).block_size == 2);  // a new request starts from the prior
  // A step a trimming policy cut to one token (the policy chose more) leaves the estimate alone.
  b = 2;
  for (int i = 0; i < 10 && b > 1; ++i) b = p.next(step(b, 0));
  const double low = p.acceptance();
  BOOST_TEST(b == 1);
  (void)p.next(step(1, 0));  // its own plain step: drifts
  BOOST_TEST(p.acceptance() > low);
  adaptive_block_size q(step_cost_model::linear(16, 0.3));
  BOOST_TEST(q.choose({}).block_size == 2);
  for (int i = 0; i < 5; ++i) BOOST_TEST(q.next(step(1, 0)) == 2);  // chose 2, was cut to 1
  BOOST_TEST(q.acceptance() == 0.5);
}

BOOST_AUTO_TEST_CASE(adaptive_policy_weighs_the_measured_step_cost) {
  adaptive_block_size p(step_cost_model::linear(8, 0.0));
  BOOST_TEST(p.choose({}).block_size == 8);  // free rows: draft as many as allowed
  int b = 8;
  for (int i = 0; i < 40; ++i) {  // the machine says a row costs as much as a step, acceptance ~0.5
    b = p.next(step(1, 0, 0.01));
    b = p.next(step(8, 1, 0.08));
  }
  BOOST_TEST(p.cost_model().cost(8) > 4);  // against a prior of 1, with two groups of 32 timings
  BOOST_TEST(b == 1);
  check_error([] { adaptive_block_size(step_cost_model::linear(4, 0.1), {1.0, 0.3, 0.1}); }, {"prior_acceptance"});
}

// --- the confidence cut-off -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(cutoff_keeps_the_drafts_before_the_first_unsure_one) {
  const confidence_cutoff<runtime_block_size> p({8}, 0.5f);
  const std::vector<float> c{0.9f, 0.5f, 0.2f, 0.9f};
  BOOST_TEST(p.keep_drafts(c) == 2);
  BOOST_TEST(p.keep_drafts(std::span(c).first(2)) == 2);
  const std::vector<float> nan{NAN, 1.0f};
  BOOST_TEST(p.keep_drafts(nan) == 0);
  check_error([] { confidence_cutoff<runtime_block_size>({4}, 1.5f); }, {"p_min"});
}

// --- the speed cut-off ----------------------------------------------------------------------------

namespace {

/// Expected tokens per cost of verifying the first k drafts, by brute force.
double speed_of_prefix(const speed_cutoff& p, std::span<const float> c, int k) {
  double tokens = 1;
  for (int j = 1; j <= k; ++j) {
    double survive = 1;
    for (int i = 0; i < j; ++i) survive *= p.planned_acceptance(p.level(c[static_cast<std::size_t>(i)]), i);
    tokens += survive;
  }
  return tokens / p.cost_model().cost(k + 1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(speed_cutoff_keeps_the_prefix_with_the_most_tokens_per_cost) {
  speed_cutoff p(step_cost_model({1.0, 1.05, 1.1, 1.3, 1.35, 1.9, 2.0, 2.1}));
  BOOST_TEST(p.choose({}).block_size == 8);
  BOOST_TEST(p.level(0.0f) == 0);
  BOOST_TEST(p.level(1.0f) == 9);
  BOOST_TEST(p.level(NAN) == 0);
  BOOST_TEST(p.acceptance(9, 0) == 0.95);  // the prior: the level's confidence
  BOOST_TEST(p.planned_acceptance(5, 0) == 0.55);
  const speed_cutoff optimist(step_cost_model::linear(8, 0.1), {.explore = 1});
  BOOST_TEST(optimist.planned_acceptance(5, 0) == 0.55 + std::sqrt(0.55 * 0.45 / 8), tt::tolerance(1e-12));
  BOOST_TEST(optimist.planned_acceptance(9, 0) == 1.0);  // at most 1
  std::uint64_t h = 7;
  for (const double explore : {0.0, 1.0}) {
    speed_cutoff q(p.cost_model(), {.explore = explore});
    for (int trial = 0; trial < 500; ++trial) {
      std::vector<float> c(static_cast<std::size_t>(trial % 9));
      for (float& x : c) x = static_cast<float>((h = synthetic_world::mix(h)) % 1001) / 1000.0f;
      const int kept = q.keep_drafts(c);
      int best = 0;
      for (int k = 1; k <= std::min<int>(static_cast<int>(c.size()), 7); ++k)
        if (speed_of_prefix(q, c, k) > speed_of_prefix(q, c, best) * (1 + 1e-12)) best = k;
      BOOST_TEST_REQUIRE(kept == best);
      (void)q.next(step(kept + 1, static_cast<int>(h % static_cast<std::uint64_t>(kept + 1))));  // learn something
    }
  }
  // Free rows: every draft with a chance of acceptance; a row as dear as a step: none.
  speed_cutoff free_rows(step_cost_model::linear(6, 0.0)), dear_rows(step_cost_model::linear(6, 1.0));
  const std::vector<float> sure(5, 0.99f);
  BOOST_TEST(free_rows.keep_drafts(sure) == 5);
  BOOST_TEST(dear_rows.keep_drafts(sure) == 0);
  check_error([] { speed_cutoff(step_cost_model::linear(4, 0.1), {.levels = 0}); }, {"levels"});
  check_error([] { speed_cutoff(step_cost_model::linear(4, 0.1), {.memory = 0}); }, {"memory"});
  check_error([] { speed_cutoff(step_cost_model::linear(4, 0.1), {.explore = -1}); }, {"explore"});
  // Options that would overflow the tables' size or turn every chance into NaN (then taken as 1) are refused.
  check_error([] { speed_cutoff(step_cost_model::linear(4, 0.1), {.levels = 65536, .positions = 65536}); }, {"levels in 1..1000"});
  check_error([] { speed_cutoff(step_cost_model::linear(4, 0.1), {.positions = block_size_limit + 1}); }, {"positions"});
  check_error([] { speed_cutoff(step_cost_model::linear(block_size_limit + 1, 0.1)); }, {"at most 256 sizes", "not 257"});
  BOOST_CHECK_NO_THROW(speed_cutoff(step_cost_model::linear(block_size_limit, 0.1)));
  for (const double inf : {double(INFINITY), double(NAN)}) {
    check_error([&] { speed_cutoff(step_cost_model::linear(4, 0.1), {.prior_weight = inf}); }, {"prior_weight"});
    check_error([&] { speed_cutoff(step_cost_model::linear(4, 0.1), {.request_weight = inf}); }, {"request_weight"});
    check_error([&] { speed_cutoff(step_cost_model::linear(4, 0.1), {.explore = inf}); }, {"explore"});
  }
  // With no weight on the earlier requests, a request's first drafts take their estimate, not 0 / 0.
  speed_cutoff own_counts(step_cost_model::linear(8, 0.5), {.request_weight = 0});
  (void)own_counts.choose({});
  BOOST_TEST(own_counts.acceptance(0, 0) == 0.05);
  BOOST_TEST(own_counts.keep_drafts(std::vector<float>(7, 0.0f)) == 0);
  (void)own_counts.keep(std::vector<float>(1, 0.0f), 1);
  (void)own_counts.next(step(2, 1));  // one level-0 draft accepted: the request's own count is all there is
  BOOST_TEST(own_counts.acceptance(0, 0) == 1.0);
}

BOOST_AUTO_TEST_CASE(speed_cutoff_learns_each_levels_acceptance) {
  speed_cutoff p(step_cost_model::linear(8, 0.1));
  const std::vector<float> doubtful(7, 0.35f), sure(7, 0.95f);
  (void)p.choose({});
  BOOST_TEST(p.keep_drafts(doubtful) >= 1);  // the prior 0.35 pays at 10 % a row
  // Drafts of confidence 0.35 always rejected, of 0.95 always accepted.
  for (int i = 0; i < 10; ++i) {
    const int kept = p.keep_drafts(doubtful);
    (void)p.next(step(kept + 1, 0));
    (void)p.next(step(p.keep_drafts(sure) + 1, 0 + p.keep_drafts(sure)));
  }
  BOOST_TEST(p.keep_drafts(doubtful) == 0);
  BOOST_TEST(p.keep_drafts(sure) == 7);
  const double learned = p.acceptance(3, 0);
  BOOST_TEST(learned < 0.1);
  // A new request forgets its own counts but keeps the earlier requests' estimate (a level never
  // seen keeps the prior); drafts after the first rejection show nothing.
  (void)p.choose({});
  BOOST_TEST(p.acceptance(3, 0) > learned);
  BOOST_TEST(p.acceptance(3, 0) < 0.35);
  BOOST_TEST(p.acceptance(3, 1) == 0.35, tt::tolerance(1e-12));  // never reached: the prior
  BOOST_TEST(p.acceptance(5, 1) == 0.55, tt::tolerance(1e-12));
  const std::vector<float> mixed{0.95f, 0.55f, 0.55f};
  BOOST_TEST_REQUIRE(p.keep_drafts(mixed) == 3);
  (void)p.next(step(4, 0));  // the first draft (level 9) rejected: level 5 unseen
  BOOST_TEST(p.acceptance(5, 1) == 0.55, tt::tolerance(1e-12));
  BOOST_TEST(p.acceptance(9, 0) < 0.95);
  BOOST_TEST(p.acceptance(9, 3) > 0.95);  // sure drafts after three accepted ones: always accepted
  // The step cost follows the timings, or stays the prior curve.
  speed_cutoff learns(step_cost_model::linear(4, 0.1)), keeps(step_cost_model::linear(4, 0.1), {.learn_costs = false});
  for (speed_cutoff* q : {&learns, &keeps}) {
    (void)q->choose({});
    for (int i = 1; i <= 64; ++i) {  // two groups of timings
      (void)q->keep_drafts(std::vector<float>(3, 0.95f));
      (void)q->next({i, i % 2 ? 1 : 4, 0, {}, i % 2 ? 0.01 : 0.04});
    }
  }
  BOOST_TEST(learns.cost_model().cost(4) > 2.5);
  BOOST_TEST(keeps.cost_model().cost(4) == 1.3, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(lookup_confidence_marks_the_matched_continuation) {
  lookup_drafter d(100, 4, 1);
  const std::vector<token_id> ctx = {1, 2, 3, 4, 9, 2, 3};  // "2 3" was followed by 4 9 2 3, then the context ends
  std::vector<token_id> out(6);
  BOOST_TEST_REQUIRE((d.draft({ctx, 7, 0.0f, {}}, out) == status::success));
  auto c = d.draft_confidence();  // a 2-gram match of at most 4: confidence 2 / 4 where it continues
  BOOST_TEST(std::vector<float>(c.begin(), c.end()) == (std::vector<float>{0.5, 0.5, 0.5, 0.5, 0, 0}));
  const std::vector<token_id> longest = {5, 1, 2, 3, 4, 7, 1, 2, 3, 4};
  BOOST_TEST_REQUIRE((d.draft({longest, 3, 0.0f, {}}, out) == status::success));
  c = d.draft_confidence();
  BOOST_TEST(std::vector<float>(c.begin(), c.end()) == (std::vector<float>{1, 1}));
  const std::vector<token_id> none = {5, 6, 7};
  BOOST_TEST_REQUIRE((d.draft({none, 3, 0.0f, {}}, out) == status::success));
  c = d.draft_confidence();
  BOOST_TEST(std::vector<float>(c.begin(), c.end()) == (std::vector<float>{0, 0}));
}

BOOST_AUTO_TEST_CASE(lookup_q_refuses_what_it_cannot_hold) {
  lookup_drafter d(10, 4, 1);
  const std::vector<token_id> ctx = {1, 2, 3, 4, 1, 2, 3}, foreign = {1, 50, 3, 1};  // 50: another vocabulary's
  std::vector<token_id> out(3, -7);
  std::vector<float> q(3 * 10, -1.0f);
  BOOST_TEST((d.draft({ctx, 4, 0.0f, {}}, out, matrix_view<float>(q.data(), 2, 10)) == status::invalid_argument));
  BOOST_TEST((d.draft({ctx, 4, 0.0f, {}}, out, matrix_view<float>(q.data(), 3, 9)) == status::invalid_argument));
  BOOST_TEST((d.draft({ctx, 4, 0.0f, {}}, out, matrix_view<float>(nullptr, 3, 10)) == status::invalid_argument));
  BOOST_TEST((out == std::vector<token_id>(3, -7)));  // refused before drafting
  BOOST_TEST((d.draft({foreign, 4, 0.0f, {}}, out, matrix_view<float>(q.data(), 3, 10)) == status::invalid_token));
  BOOST_TEST_REQUIRE((d.draft({ctx, 4, 0.0f, {}}, out, matrix_view<float>(q.data(), 3, 10)) == status::success));
  BOOST_TEST((out == std::vector<token_id>{4, 1, 2}));
  for (int j = 0; j < 3; ++j)
    for (int v = 0; v < 10; ++v) BOOST_TEST(q[static_cast<std::size_t>(j * 10 + v)] == (v == out[static_cast<std::size_t>(j)] ? 1.0f : 0.0f));
}

BOOST_AUTO_TEST_CASE(lookup_evidence_grades_the_match_by_extent_and_agreement) {
  lookup_drafter d(200, 3, 1, 63, lookup_confidence::evidence);
  std::vector<token_id> out(6);
  const auto grade = [&](const std::vector<token_id>& ctx) {
    BOOST_TEST_REQUIRE((d.draft({ctx, 3, 0.0f, {}}, out) == status::success));
    return d.draft_confidence()[0];
  };
  BOOST_TEST(grade({1, 2, 3, 4, 9, 2, 3}) == 0.6f);            // "2 3" matched, the token before differs
  BOOST_TEST(grade({5, 1, 2, 3, 4, 7, 8, 1, 2, 3, 4}) == 0.75f);  // "2 3 4" matched, "1" before it too: 4 tokens
  BOOST_TEST(grade({1, 2, 5, 1, 2, 6, 1, 2}) == 0.3f);         // "1 2" was followed by 6 and by 5: halved
  BOOST_TEST(grade({7, 1, 2, 5, 7, 1, 2}) == 0.65f);           // "7 1 2": 3 tokens, one occurrence
  std::vector<token_id> copied;
  for (int round = 0; round < 2; ++round) {
    for (token_id t = 0; t < 20; ++t) copied.push_back(t);
    if (round == 0) copied.push_back(100);
  }
  BOOST_TEST(grade(copied) == 0.95f);  // 20 tokens agree: capped at 16
  BOOST_TEST(out[0] == 100);           // the drafts are those of the n-gram grade
  BOOST_TEST(grade({5, 6, 7}) == 0.0f);
}

BOOST_AUTO_TEST_CASE(ngram_corpus_predicts_the_most_frequent_next_token_of_the_longest_ngram) {
  const std::vector<std::vector<token_id>> seqs = {{1, 2, 3, 4}, {1, 2, 3, 4}, {9, 2, 3, 5}, {7, 8}, {7, 8}};
  const ngram_corpus corpus(seqs, 3, 2, 2);
  const auto predict = [&](std::vector<token_id> ctx) { return corpus.predict(ctx); };
  auto p = predict({0, 2, 3});  // "2 3" seen 3 times: 4 twice, 5 once
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->token == 4);
  BOOST_TEST(p->share == 2.0f / 4.0f);
  BOOST_TEST(p->ngram == 2);
  p = predict({1, 2, 3});  // "1 2 3" seen twice, always followed by 4: the longer n-gram wins
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->token == 4);
  BOOST_TEST(p->share == 2.0f / 3.0f);
  BOOST_TEST(p->ngram == 3);
  BOOST_TEST(!predict({9, 2}).has_value());  // "9 2" seen once: below min_count
  BOOST_TEST(!predict({3}).has_value());     // shorter than min_ngram
  BOOST_TEST(!predict({7, 8}).has_value());  // nothing followed it
  // By default n-grams seen once count too, and the largest share wins over the longest n-gram.
  const ngram_corpus all(std::vector<std::vector<token_id>>{{1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, {9, 2, 3, 5}});
  p = all.predict(std::vector<token_id>{9, 2, 3});  // "9 2 3": 5 once (1/2); "2 3": 4 three times of four (3/5)
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->token == 4);
  BOOST_TEST(p->share == 3.0f / 5.0f);
  BOOST_TEST(p->ngram == 2);
  p = all.predict(std::vector<token_id>{0, 9, 2});  // "9 2" once: kept, share 1/2
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->token == 3);
  BOOST_TEST(p->share == 0.5f);
  p = all.predict(std::vector<token_id>{1, 2, 3});  // "1 2 3" and "2 3": 3/4 against 3/5, the longer wins
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->ngram == 3);
  check_error([&] { ngram_corpus(seqs, 2, 3); }, {"min_ngram"});
  check_error([&] { ngram_corpus(seqs, 3, 2, 0); }, {"min_count"});
  check_error([&] { ngram_corpus(std::vector<std::vector<token_id>>{{1, -2}}); }, {"negative token id -2"});
  BOOST_TEST(corpus.largest_token() == 9);
  check_error([&] { lookup_drafter(9, 3, 1, 63, lookup_confidence::ngram, std::make_shared<const ngram_corpus>(seqs)); },
              {"the corpus has token 9, beyond a vocabulary of 9"});
}

BOOST_AUTO_TEST_CASE(lookup_drafts_from_its_corpus_where_the_context_has_nothing_surer) {
  // The corpus: "5 6" -> 7 (3 of 3), "6 7" -> 8, "7 8" -> 9 (3 of 3 each); "2 3" -> 30 (3 of 3).
  const std::vector<std::vector<token_id>> seqs(3, std::vector<token_id>{5, 6, 7, 8, 9, 0, 2, 3, 30});
  lookup_drafter d(100, 3, 1, 63, lookup_confidence::evidence, std::make_shared<const ngram_corpus>(seqs, 3, 2, 2));
  std::vector<token_id> out(5);
  const auto draft = [&](const std::vector<token_id>& ctx) {
    BOOST_TEST_REQUIRE((d.draft({ctx, 6, 0.0f, {}}, out) == status::success));
    const auto c = d.draft_confidence();
    return std::vector<float>(c.begin(), c.end());
  };
  // No match in the context: the corpus's chain 7 8 9 0 2, each 3 of 3 occurrences: 3 / (3 + 1).
  auto c = draft({40, 41, 5, 6});
  BOOST_TEST(out == (std::vector<token_id>{7, 8, 9, 0, 2}), tt::per_element());
  BOOST_TEST(c == (std::vector<float>(5, 0.75f)), tt::per_element());
  // A match as sure as the corpus (4 tokens agree: 0.75) is kept; past the context's end the corpus
  // continues it ("5 6" -> 7).
  c = draft({1, 2, 5, 6, 1, 2, 5, 6});
  BOOST_TEST(out == (std::vector<token_id>{1, 2, 5, 6, 7}), tt::per_element());
  BOOST_TEST(c == (std::vector<float>(5, 0.75f)), tt::per_element());
  // A long match (16 tokens agree: 0.95) beats the corpus's 0.75 for "5 6".
  std::vector<token_id> copied;
  for (token_id t = 10; t < 26; ++t) copied.push_back(t);
  copied.insert(copied.end(), {5, 6, 60});
  copied.insert(copied.end(), copied.begin(), copied.begin() + 18);  // ... 10 .. 25 5 6: the match goes on with 60
  c = draft(copied);
  BOOST_TEST(out[0] == 60);
  BOOST_TEST(c[0] == 0.95f);
  BOOST_TEST(out[1] == 10);
  // A one-token match (0.3) loses to the corpus: "2 3" -> 30, not the context's 31; nothing follows
  // "3 30" in the corpus, so the rest is padding.
  c = draft({50, 3, 31, 2, 3});
  BOOST_TEST(out[0] == 30);
  BOOST_TEST(c == (std::vector<float>{0.75f, 0, 0, 0, 0}), tt::per_element());
  // Nothing in either: padding at confidence 0.
  c = draft({70, 71});
  BOOST_TEST(c == (std::vector<float>(5, 0.0f)), tt::per_element());
}

// --- greedy identity ------------------------------------------------------------------------------

template <class Drafter, class Policy>
void check_greedy_equal(Drafter& d, Policy policy, int max_new) {
  synthetic_target target(world()), reference(world());
  speculative_decoder<Drafter, synthetic_target, Policy> dec(d, target, std::move(policy));
  std::int64_t steps = 0, drafted = 0;
  for (const auto& p : synthetic_prompts(6, 97, 1, 12, 7)) {
    generation_result r;
    BOOST_TEST_REQUIRE(dec.generate(p, greedy(max_new), r) == status::success);
    BOOST_TEST(r.tokens == greedy_reference(reference, p, max_new));
    steps += r.stats.steps;
    drafted += r.stats.drafted;
  }
  BOOST_TEST(drafted > 0);
  BOOST_TEST(drafted < steps * (dec.policy().max_block_size() - 1));  // sizes did change
}

/// The target's greedy continuations of other prompts than the tests decode: lookup's corpus.
std::shared_ptr<const ngram_corpus> synthetic_corpus() {
  synthetic_target target(world());
  std::vector<std::vector<token_id>> written;
  for (const auto& p : synthetic_prompts(30, 97, 1, 12, 99)) written.push_back(greedy_reference(target, p, 60));
  return std::make_shared<const ngram_corpus>(written);
}

BOOST_DATA_TEST_CASE(greedy_equal_adaptive_and_cutoff, bdata::make({0, 1, 2, 3, 4}), kind) {
  lookup_drafter lookup(97);
  synthetic_drafter synthetic(world());
  const auto adaptive = adaptive_block_size(step_cost_model::linear(16, 0.05));
  if (kind == 0) check_greedy_equal(synthetic, adaptive, 90);
  if (kind == 1) check_greedy_equal(lookup, confidence_cutoff<runtime_block_size>({16}, 0.5f), 90);
  if (kind == 2) check_greedy_equal(lookup, confidence_cutoff<adaptive_block_size>(adaptive, 0.5f), 90);
  if (kind == 3) check_greedy_equal(lookup, speed_cutoff(step_cost_model::linear(16, 0.05)), 90);
  if (kind == 4) {
    lookup_drafter with_corpus(97, 3, 1, 63, lookup_confidence::evidence, synthetic_corpus());
    check_greedy_equal(with_corpus, speed_cutoff(step_cost_model::linear(16, 0.05)), 90);
  }
}

// --- replay of recorded greedy decodes ---------------------------------------------------------------

template <class Policy>
void check_replay_takes_the_decoders_steps(const Policy& policy, std::shared_ptr<const ngram_corpus> corpus = nullptr) {
  lookup_drafter live(97, 3, 1, 63, lookup_confidence::evidence, corpus), replayed = live;
  synthetic_target target(world());
  speculative_decoder<lookup_drafter, synthetic_target, Policy> dec(live, target, policy);
  const std::vector<double> cost{1, 1.1, 1.2, 1.3, 1.5, 1.6, 1.7, 1.8};
  std::int64_t drafted = 0;
  Policy replaying = policy;  // one instance over the requests, as the decoder's (policies may learn across them)
  for (const auto& p : synthetic_prompts(6, 97, 1, 12, 7)) {
    generation_result r;
    BOOST_TEST_REQUIRE(dec.generate(p, greedy(90), r) == status::success);
    const step_replay_result s = replay_steps(replaying, replayed, p, r.tokens, cost);
    BOOST_TEST(s.steps == r.stats.steps);
    BOOST_TEST(s.steps_by_block == r.stats.steps_by_block, tt::per_element());
    BOOST_TEST(s.committed == static_cast<std::int64_t>(r.tokens.size()) - 1);
    double expected = 0;
    for (std::size_t b = 1; b < s.steps_by_block.size(); ++b) expected += static_cast<double>(s.steps_by_block[b]) * cost[b - 1];
    BOOST_TEST(s.cost == expected, tt::tolerance(1e-12));
    BOOST_TEST(s.speedup() == static_cast<double>(s.committed) / expected, tt::tolerance(1e-12));
    drafted += r.stats.drafted;
  }
  BOOST_TEST(drafted > 0);
}

BOOST_AUTO_TEST_CASE(replay_takes_the_steps_of_a_live_decode) {
  check_replay_takes_the_decoders_steps(runtime_block_size{4});
  check_replay_takes_the_decoders_steps(runtime_block_size{8});
  check_replay_takes_the_decoders_steps(confidence_cutoff<runtime_block_size>({8}, 0.5f));
  speed_cutoff_options fixed_costs;  // the live decode's timings are not the replay's: costs stay the prior's
  fixed_costs.learn_costs = false;
  check_replay_takes_the_decoders_steps(speed_cutoff(step_cost_model::linear(8, 0.1), fixed_costs), synthetic_corpus());
  lookup_drafter d(97);
  runtime_block_size eight{8};
  const std::vector<token_id> prompt{1, 2, 3}, continuation{4, 5};
  check_error([&] { (void)replay_steps(eight, d, prompt, continuation, std::vector<double>{1, 1.1}); }, {"step cost"});
}

/// A target whose next token follows from the last one alone (a fixed random map of the vocabulary):
/// its greedy text falls into cycles that prompt lookup then proposes, and leaves them never.
struct cycling_target {
  std::vector<token_id> next;
  std::vector<float> rows;

  explicit cycling_target(std::int64_t vocab, std::uint64_t seed) : next(static_cast<std::size_t>(vocab)) {
    std::mt19937_64 rng(seed);
    for (auto& t : next) t = static_cast<token_id>(rng() % static_cast<std::uint64_t>(vocab));
  }
  [[nodiscard]] std::int64_t vocab_size() const { return static_cast<std::int64_t>(next.size()); }
  status prefill(std::span<const token_id> tokens, matrix_view<const float>& logits) { return score(tokens.last(1), logits); }
  status score(std::span<const token_id> tokens, matrix_view<const float>& logits) {
    rows.assign(tokens.size() * next.size(), 0.0f);
    for (std::size_t j = 0; j < tokens.size(); ++j)
      rows[j * next.size() + static_cast<std::size_t>(next[static_cast<std::size_t>(tokens[j])])] = 1.0f;
    logits = {rows.data(), static_cast<std::int64_t>(tokens.size()), vocab_size()};
    return status::success;
  }
  static status commit(int) { return status::success; }
};

/// A per-step policy of one size that records what it is told.
struct recording_policy {
  int size = 8;
  std::vector<step_record>* told = nullptr;
  [[nodiscard]] int max_block_size() const { return size; }
  block_size_choice choose(const request_features&) { return {size}; }
  int next(const step_record& s) {
    told->push_back({s.step, s.block_size, s.accepted, {}, 0});
    return size;
  }
};

BOOST_AUTO_TEST_CASE(replay_tells_a_policy_only_the_outcomes_it_knows) {
  // Without what the target writes after the continuation, a replay tells the policy the live decode's
  // steps, except a last one whose drafts ran past the continuation's end.
  lookup_drafter live(97), replayed(97);
  cycling_target target(97, 5);
  std::vector<step_record> live_told, replay_told;
  speculative_decoder<lookup_drafter, cycling_target, recording_policy> dec(live, target, recording_policy{8, &live_told});
  const std::vector<double> cost(8, 1.0);
  std::size_t untold = 0;
  for (const auto& p : synthetic_prompts(24, 97, 1, 12, 7)) {
    live_told.clear();
    replay_told.clear();
    generation_result r;
    BOOST_TEST_REQUIRE(dec.generate(p, greedy(40), r) == status::success);
    recording_policy replaying{8, &replay_told};
    (void)replay_steps(replaying, replayed, p, r.tokens, cost);
    BOOST_TEST_REQUIRE(replay_told.size() <= live_told.size());
    BOOST_TEST(live_told.size() - replay_told.size() <= 1u);
    for (std::size_t i = 0; i < replay_told.size(); ++i) {
      BOOST_TEST(replay_told[i].block_size == live_told[i].block_size);
      BOOST_TEST(replay_told[i].accepted == live_told[i].accepted);
    }
    untold += live_told.size() - replay_told.size();
  }
  BOOST_TEST(untold > 0u);
}

BOOST_AUTO_TEST_CASE(replayed_sweep_equals_the_decoded_one) {
  // Every size's tau from one plain decode and replays equals decoding at that size, in a dataset
  // with the same prompts and prefill rows and no timings; a journal resumes it like the sweep's.
  cycling_target target(97, 5);
  lookup_drafter decoded_drafter(97), replayed_drafter(97);
  const auto prompts = synthetic_prompts(8, 97, 1, 12, 11);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < prompts.size(); ++i) keys.push_back("p" + std::to_string(i));
  const std::vector<int> sizes{1, 2, 3, 5, 8};
  const auto decoded = sweep_policy_dataset(decoded_drafter, target, keys, prompts, sizes, greedy(40));
  const auto replayed = replay_policy_dataset(replayed_drafter, target, keys, prompts, sizes, greedy(40));
  BOOST_TEST(replayed.prompts == decoded.prompts, tt::per_element());
  BOOST_TEST(replayed.tau == decoded.tau, tt::per_element());
  BOOST_TEST(replayed.prefill_logits == decoded.prefill_logits, tt::per_element());
  BOOST_TEST(decoded.has_timing());
  BOOST_TEST(!replayed.has_timing());
  BOOST_TEST(std::ranges::count_if(replayed.tau, [](double t) { return t > 2.0; }) >= 16);  // what lookup proposes counts
  const testing::temp_dir dir;
  const auto journal = dir.path / "journal.jsonl";
  (void)replay_policy_dataset(replayed_drafter, target, std::span(keys).first(3), std::span(prompts).first(3), sizes,
                              greedy(40), journal);
  BOOST_TEST(replay_policy_dataset(replayed_drafter, target, keys, prompts, sizes, greedy(40), journal).tau == decoded.tau,
             tt::per_element());
  // With a stop token, which a decoder's last step may draft past.
  generation_config stopping = greedy(40);
  stopping.stop_tokens = {target.next[static_cast<std::size_t>(target.next[static_cast<std::size_t>(prompts[2].back())])]};
  const auto decoded_stopping = sweep_policy_dataset(decoded_drafter, target, keys, prompts, sizes, stopping);
  BOOST_TEST((decoded_stopping.tau != decoded.tau));  // the stop token ends some requests early
  BOOST_TEST(replay_policy_dataset(replayed_drafter, target, keys, prompts, sizes, stopping).tau == decoded_stopping.tau,
             tt::per_element());
  // With no length cap, until the stop token (which prompt 2's text reaches): the replay decodes only a
  // block past it.
  stopping.max_new_tokens = INT_MAX;
  const auto third = std::span(keys).subspan(2, 1);
  const auto third_prompt = std::span(prompts).subspan(2, 1);
  BOOST_TEST(replay_policy_dataset(replayed_drafter, target, third, third_prompt, sizes, stopping).tau ==
                 sweep_policy_dataset(decoded_drafter, target, third, third_prompt, sizes, stopping).tau,
             tt::per_element());
  generation_config sampled = greedy(40);
  sampled.temperature = 1.0f;
  check_error([&] { (void)replay_policy_dataset(replayed_drafter, target, keys, prompts, sizes, sampled); }, {"T = 0"});
}

BOOST_AUTO_TEST_CASE(step_oracle_is_never_beaten_and_finds_the_copied_run) {
  // A prompt whose second half the continuation copies: lookup proposes the copy once a match starts.
  const std::vector<token_id> prompt{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 1, 2};
  const std::vector<token_id> continuation{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3, 4, 5, 6, 7};
  const std::vector<double> cost{1, 1.1, 1.2, 1.3, 1.5, 1.6, 1.7, 1.8};
  lookup_drafter d(97, 3, 1, 7);
  const step_replay_result o = replay_step_oracle(d, prompt, continuation, cost);
  BOOST_TEST(o.committed == static_cast<std::int64_t>(continuation.size()) - 1);
  // After the prefill's 10, the copied 11..19 and the 3 after them take two steps (one of 8 and one
  // of 2, as cheap as 6 and 4 or 7 and 3), since no step verifies more than 7 drafts; nothing matches
  // 4..7, which take plain steps: 1.8 + 1.1 + 4.
  BOOST_TEST(o.cost == 6.9, tt::tolerance(1e-12));
  BOOST_TEST(o.steps == 6);
  BOOST_TEST(o.steps_by_block[1] == 4);
  for (int b = 1; b <= 8; ++b) {
    runtime_block_size fixed{b};
    BOOST_TEST(replay_steps(fixed, d, prompt, continuation, cost).cost >= o.cost - 1e-12);
  }
  // Against every policy on many requests: lower or equal cost on each.
  synthetic_target target(world());
  for (const auto& p : synthetic_prompts(6, 97, 1, 12, 7)) {
    const auto r = greedy_reference(target, p, 90);
    const double best = replay_step_oracle(d, p, r, cost).cost;
    speed_cutoff speed{step_cost_model(cost)};
    runtime_block_size four{4};
    confidence_cutoff<runtime_block_size> cut({8}, 0.5f);
    BOOST_TEST(replay_steps(speed, d, p, r, cost).cost >= best - 1e-12);
    BOOST_TEST(replay_steps(four, d, p, r, cost).cost >= best - 1e-12);
    BOOST_TEST(replay_steps(cut, d, p, r, cost).cost >= best - 1e-12);
  }
}

// --- the output distribution under trimming -------------------------------------------------------

namespace {

constexpr int V = 6;

/// A target over six tokens whose rows depend on the last token and the position.
class six_token_target {
 public:
  std::int64_t vocab_size() const { return V; }
  status prefill(std::span<const token_id> p, matrix_view<const float>& l) {
    context_.assign(p.begin(), p.end());
    return rows({}, l);
  }
  status score(std::span<const token_id> block, matrix_view<const float>& l) { return rows(block, l); }
  status commit(int n) {
    context_.insert(context_.end(), pending_.begin(), pending_.begin() + n);
    return status::success;
  }
  /// Row after `prefix`.
  static std::array<float, V> row(std::span<const token_id> prefix) {
    std::array<float, V> r{};
    const auto h = static_cast<std::uint64_t>(prefix.back() * 7 + static_cast<int>(prefix.size()));
    for (int t = 0; t < V; ++t) r[static_cast<std::size_t>(t)] = static_cast<float>((synthetic_world::mix(h * 31 + t) % 1000) / 400.0);
    return r;
  }

 private:
  status rows(std::span<const token_id> block, matrix_view<const float>& l) {
    pending_.assign(block.begin(), block.end());
    std::vector<token_id> prefix = context_;
    out_.clear();
    const std::size_t n = std::max<std::size_t>(block.size(), 1);
    for (std::size_t j = 0; j < n; ++j) {
      if (!block.empty()) prefix.push_back(block[j]);
      const auto r = row(prefix);
      out_.insert(out_.end(), r.begin(), r.end());
    }
    l = {out_.data(), static_cast<std::int64_t>(n), V};
    return status::success;
  }
  std::vector<token_id> context_, pending_;
  std::vector<float> out_;
};

/// Draws each draft from a fixed q; its confidence is drawn apart from the draft (honest), or is
/// whether the draw landed on a low token (`reveals_draw`: a trim that sees the draw).
struct six_token_drafter {
  bool reveals_draw = false;
  std::array<float, V> q{0.3f, 0.25f, 0.2f, 0.1f, 0.1f, 0.05f};
  std::vector<float> confidence;
  std::int64_t vocab_size() const { return V; }
  int max_draft_rows() const { return 8; }
  status begin(std::span<const token_id>) { return status::success; }
  status commit(int) { return status::success; }
  status draft(const draft_request& r, std::span<token_id> out) {
    std::vector<float> ignored(static_cast<std::size_t>(r.block_size - 1) * V);
    return draft(r, out, {ignored.data(), r.block_size - 1, V});
  }
  status draft(const draft_request& r, std::span<token_id> out, matrix_view<float> rows) {
    confidence.resize(static_cast<std::size_t>(r.block_size - 1));
    for (int j = 0; j + 1 < r.block_size; ++j) {
      double u = r.rng.uniform(static_cast<std::uint32_t>(j + 1), random_domain::draft_sample);
      token_id t = 0;
      while (t + 1 < V && u >= q[static_cast<std::size_t>(t)]) u -= q[static_cast<std::size_t>(t++)];
      out[static_cast<std::size_t>(j)] = t;
      std::copy(q.begin(), q.end(), rows.row(j).begin());
      const double coin = static_cast<double>(synthetic_world::mix(r.rng.seed * 977 + r.rng.offset * 13 + j) % 1000) / 1000;
      confidence[static_cast<std::size_t>(j)] = reveals_draw ? (t < 2 ? 1.0f : 0.0f) : static_cast<float>(coin);
    }
    return status::success;
  }
  std::span<const float> draft_confidence() const { return confidence; }
};

/// Chi-square of the first two tokens over 36 cells at T = 1 against the target's rows, trimmed by the
/// confidence cut-off (drafts of confidence 0.5 and up) or by the speed cut-off (which learns as it goes).
template <class Rule, class Policy = confidence_cutoff<runtime_block_size>>
double two_token_chi_square(bool reveals_draw) {
  six_token_drafter d;
  d.reveals_draw = reveals_draw;
  six_token_target target;
  auto policy = [] {
    if constexpr (std::same_as<Policy, speed_cutoff>)
      return speed_cutoff(step_cost_model::linear(3, 0.2));
    else
      return confidence_cutoff<runtime_block_size>({3}, 0.5f);
  }();
  speculative_decoder<six_token_drafter, six_token_target, Policy, Rule> dec(d, target, std::move(policy));
  const std::vector<token_id> prompt{2, 5};
  constexpr int requests = 20000;
  std::array<std::int64_t, V * V> counts{};
  std::int64_t trimmed_steps = 0, verified_drafts = 0;
  for (int s = 0; s < requests; ++s) {
    generation_config c;
    c.max_new_tokens = 2;
    c.temperature = 1.0f;
    c.seed = static_cast<std::uint64_t>(s);
    generation_result r;
    BOOST_TEST_REQUIRE(dec.generate(prompt, c, r) == status::success);
    BOOST_TEST_REQUIRE(r.tokens.size() == 2u);
    ++counts[static_cast<std::size_t>(r.tokens[0] * V + r.tokens[1])];
    trimmed_steps += r.stats.steps_by_block[3] == 0;
    verified_drafts += r.stats.steps_by_block[2] + r.stats.steps_by_block[3];
  }
  BOOST_TEST(trimmed_steps > requests / 10);  // the cut-off did trim
  BOOST_TEST(verified_drafts > requests / 10);  // and did not only decode plainly
  const auto softmax = [](std::array<float, V> x) {
    std::array<double, V> p{};
    double sum = 0;
    for (int t = 0; t < V; ++t) sum += p[static_cast<std::size_t>(t)] = std::exp(static_cast<double>(x[static_cast<std::size_t>(t)]));
    for (auto& v : p) v /= sum;
    return p;
  };
  const auto p1 = softmax(six_token_target::row(prompt));
  double chi2 = 0;
  for (int a = 0; a < V; ++a) {
    std::vector<token_id> prefix = prompt;
    prefix.push_back(a);
    const auto p2 = softmax(six_token_target::row(prefix));
    for (int b = 0; b < V; ++b) {
      const double expected = requests * p1[static_cast<std::size_t>(a)] * p2[static_cast<std::size_t>(b)];
      const double diff = static_cast<double>(counts[static_cast<std::size_t>(a * V + b)]) - expected;
      chi2 += diff * diff / expected;
    }
  }
  return chi2;
}

constexpr double chi2_critical_35 = 66.62;  // 35 degrees of freedom, significance 0.001

}  // namespace

BOOST_AUTO_TEST_CASE(trimming_keeps_rejection_sampling_exact) {
  const double chi2 = two_token_chi_square<rejection_sampling>(false);
  BOOST_TEST_MESSAGE("rejection sampling, honest confidence: chi2 " << chi2);
  BOOST_TEST(chi2 < chi2_critical_35);
  BOOST_TEST(two_token_chi_square<sample_and_match>(false) < chi2_critical_35);
  const double speed = two_token_chi_square<rejection_sampling, speed_cutoff>(false);
  BOOST_TEST_MESSAGE("rejection sampling, speed cut-off: chi2 " << speed);
  BOOST_TEST(speed < chi2_critical_35);
}

BOOST_AUTO_TEST_CASE(a_confidence_that_reveals_the_draw_fails_the_same_test) {
  const double chi2 = two_token_chi_square<rejection_sampling>(true);
  BOOST_TEST_MESSAGE("rejection sampling, confidence revealing the draw: chi2 " << chi2);
  BOOST_TEST(chi2 > chi2_critical_35);
  BOOST_TEST((two_token_chi_square<rejection_sampling, speed_cutoff>(true) > chi2_critical_35));
  // Sample-and-match ignores q and the draft's value, so even that trim keeps it exact.
  BOOST_TEST(two_token_chi_square<sample_and_match>(true) < chi2_critical_35);
}
