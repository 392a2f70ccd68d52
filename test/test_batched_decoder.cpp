// The step API and continuous batching: a batch of requests with their own block sizes, seeds and
// policies, joining and leaving between steps, decides exactly as independent decoders do, for all
// three rules; one verifier call per step when the verifier scores batches; the batch's plan of which
// drafts to verify is the best one (by rows, and by width for padded blocks) and keeps greedy decoding exact; cancellation and errors end one
// request and keep its tokens.
#define BOOST_TEST_MODULE batched_decoder
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <stop_token>

#include "blockpilot/engine/batched_decoder.hpp"
#include "blockpilot/policy/batch_plan.hpp"
#include "blockpilot/policy/speed_cutoff.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "support/check_error.hpp"
#include "support/test_models.hpp"

using namespace blockpilot;
using namespace blockpilot::testing;

namespace {

const synthetic_world& world() {
  static const synthetic_world w(synthetic_world_of(97));
  return w;
}

/// The synthetic target with batch scoring: one call scores every request's block, and counts itself.
class batch_target : public synthetic_target {
 public:
  using synthetic_target::synthetic_target;
  static inline int batch_calls = 0;
  static inline std::size_t largest_batch = 0;
  static status score_batch(std::span<batch_target* const> targets, std::span<const std::span<const token_id>> blocks,
                            std::span<matrix_view<const float>> logits) {
    if (targets.size() != blocks.size() || targets.size() != logits.size()) return status::invalid_argument;
    ++batch_calls;
    largest_batch = std::max(largest_batch, targets.size());
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (const status s = targets[i]->score(blocks[i], logits[i]); s != status::success) return s;
    return status::success;
  }
};
static_assert(batch_scoring_verifier<batch_target>);
static_assert(!batch_scoring_verifier<synthetic_target>);

/// One request of a scenario: prompt, block size, seed, length, and the step at which it joins.
struct job {
  std::vector<token_id> prompt;
  int block_size = 8;
  std::uint64_t seed = 0;
  int max_new = 40;
  int joins_at = 0;
};

std::vector<job> scenario() {
  const auto prompts = synthetic_prompts(8, 97, 1, 14, 11);
  const int sizes[] = {1, 2, 4, 8, 16, 5, 3, 12};
  const int lengths[] = {40, 7, 61, 1, 33, 50, 2, 45};
  const int joins[] = {0, 0, 0, 1, 2, 2, 5, 9};
  std::vector<job> jobs;
  for (std::size_t i = 0; i < prompts.size(); ++i) jobs.push_back({prompts[i], sizes[i], 1000 + i, lengths[i], joins[i]});
  return jobs;
}

generation_config config_of(const job& j, float temperature) {
  generation_config c;
  c.max_new_tokens = j.max_new;
  c.temperature = temperature;
  c.seed = j.seed;
  return c;
}

/// The same job on its own speculative_decoder.
template <class Rule, class Target>
generation_result alone(const job& j, float temperature) {
  synthetic_drafter d(world());
  Target t(world());
  speculative_decoder<synthetic_drafter, Target, runtime_block_size, Rule> dec(d, t, {j.block_size});
  generation_result r;
  dec.generate(j.prompt, config_of(j, temperature), r);
  return r;
}

/// Runs the scenario through one batched_decoder, jobs joining at their step; results by job index.
template <class Rule, class Target>
std::vector<generation_result> batched(const std::vector<job>& jobs, float temperature, int* steps_run = nullptr) {
  std::vector<synthetic_drafter> drafters(jobs.size(), synthetic_drafter(world()));
  std::vector<Target> targets(jobs.size(), Target(world()));
  batched_decoder<synthetic_drafter, Target, runtime_block_size, Rule> batch;
  std::vector<generation_result> results(jobs.size());
  std::vector<std::vector<token_id>> streamed(jobs.size());
  std::map<request_id, std::size_t> index;
  int step = 0;
  std::size_t joined = 0;
  while (joined < jobs.size() || !batch.empty()) {
    for (std::size_t i = 0; i < jobs.size(); ++i)
      if (jobs[i].joins_at == step) {
        generation_config c = config_of(jobs[i], temperature);
        c.on_tokens = [&streamed, i](std::span<const token_id> piece) { streamed[i].insert(streamed[i].end(), piece.begin(), piece.end()); };
        index[batch.add(drafters[i], targets[i], jobs[i].prompt, std::move(c), runtime_block_size{jobs[i].block_size})] = i;
        ++joined;
      }
    if (!batch.empty()) batch.step();
    for (auto& f : batch.take_finished()) results[index.at(f.id)] = std::move(f.result);
    ++step;
  }
  if (steps_run) *steps_run = step;
  for (std::size_t i = 0; i < jobs.size(); ++i) BOOST_TEST(streamed[i] == results[i].tokens);
  return results;
}

template <class Rule, class Target = synthetic_target>
void check_batch_equals_alone(float temperature) {
  const auto jobs = scenario();
  const auto results = batched<Rule, Target>(jobs, temperature);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const auto expected = alone<Rule, synthetic_target>(jobs[i], temperature);
    BOOST_TEST_CONTEXT("job " << i << " (b = " << jobs[i].block_size << ", T = " << temperature << ")") {
      BOOST_TEST(results[i].error == status::success);
      BOOST_TEST(results[i].tokens == expected.tokens);
      BOOST_TEST(results[i].tokens.size() == static_cast<std::size_t>(jobs[i].max_new));
      BOOST_TEST(results[i].stats.steps == expected.stats.steps);
      BOOST_TEST(results[i].stats.accepted == expected.stats.accepted);
      BOOST_TEST(results[i].stats.steps_by_block == expected.stats.steps_by_block);
      BOOST_TEST(results[i].stats.block_size == jobs[i].block_size);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(batch_equals_independent_decoders_greedy) {
  check_batch_equals_alone<greedy_match>(0.0f);
  // Greedy: also equal to plain greedy decoding.
  const auto jobs = scenario();
  const auto results = batched<greedy_match, synthetic_target>(jobs, 0.0f);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    synthetic_target reference(world());
    BOOST_TEST(results[i].tokens == greedy_reference(reference, jobs[i].prompt, jobs[i].max_new));
  }
}

BOOST_AUTO_TEST_CASE(batch_equals_independent_decoders_sampling) {
  check_batch_equals_alone<sample_and_match>(1.0f);
  check_batch_equals_alone<sample_and_match>(0.7f);
  check_batch_equals_alone<rejection_sampling>(1.0f);
  check_batch_equals_alone<rejection_sampling>(0.7f);
}

BOOST_AUTO_TEST_CASE(batch_scoring_verifier_is_called_once_per_step) {
  batch_target::batch_calls = 0;
  batch_target::largest_batch = 0;
  check_batch_equals_alone<rejection_sampling, batch_target>(1.0f);
  BOOST_TEST(batch_target::largest_batch >= 4u);  // several requests, several block sizes, one call
  batch_target::batch_calls = 0;
  int steps = 0;
  const auto jobs = scenario();
  batched<greedy_match, batch_target>(jobs, 0.0f, &steps);
  BOOST_TEST(batch_target::batch_calls > 0);
  BOOST_TEST(batch_target::batch_calls <= steps);  // one call per step (none on a step with no request)
}

BOOST_AUTO_TEST_CASE(per_step_policies_in_a_batch) {
  const auto prompts = synthetic_prompts(3, 97, 2, 9, 5);
  std::vector<synthetic_drafter> drafters(3, synthetic_drafter(world()));
  std::vector<synthetic_target> targets(3, synthetic_target(world()));
  batched_decoder<synthetic_drafter, synthetic_target, cycling_policy, rejection_sampling> batch;
  std::vector<request_id> ids;
  for (std::size_t i = 0; i < 3; ++i) {
    cycling_policy p;
    std::rotate(p.sizes.begin(), p.sizes.begin() + static_cast<std::ptrdiff_t>(i), p.sizes.end());
    generation_config c;
    c.max_new_tokens = 80;
    c.temperature = 1.0f;
    c.seed = 7 + i;
    ids.push_back(batch.add(drafters[i], targets[i], prompts[i], c, p));
  }
  batch.run();
  auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 3u);
  for (const auto& f : finished) {
    const std::size_t i = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), f.id) - ids.begin());
    cycling_policy p;
    std::rotate(p.sizes.begin(), p.sizes.begin() + static_cast<std::ptrdiff_t>(i), p.sizes.end());
    synthetic_drafter d(world());
    synthetic_target t(world());
    speculative_decoder<synthetic_drafter, synthetic_target, cycling_policy, rejection_sampling> dec(d, t, p);
    generation_config c;
    c.max_new_tokens = 80;
    c.temperature = 1.0f;
    c.seed = 7 + i;
    generation_result expected;
    BOOST_TEST_REQUIRE(dec.generate(prompts[i], c, expected) == status::success);
    BOOST_TEST(f.result.tokens == expected.tokens);
    BOOST_TEST(f.result.stats.steps_by_block == expected.stats.steps_by_block);
    BOOST_TEST(std::count_if(f.result.stats.steps_by_block.begin(), f.result.stats.steps_by_block.end(),
                             [](std::int64_t n) { return n > 0; }) > 1);  // the size changed inside the request
  }
}

namespace {

/// A speed cut-off that logs, for every step, the levels of the drafts it kept and how many the
/// target accepted: what its counts must have learned.
struct logging_cutoff {
  using logits_backend = void;
  speed_cutoff cutoff;
  std::shared_ptr<std::vector<std::pair<std::vector<int>, int>>> log;
  std::vector<int> kept{};

  [[nodiscard]] int max_block_size() const { return cutoff.max_block_size(); }
  [[nodiscard]] block_size_choice choose(const request_features& f) { return cutoff.choose(f); }
  [[nodiscard]] int keep_drafts(std::span<const float> confidence) {
    const int k = cutoff.keep_drafts(confidence);
    kept.clear();
    for (int j = 0; j < k; ++j) kept.push_back(cutoff.level(confidence[static_cast<std::size_t>(j)]));
    return k;
  }
  [[nodiscard]] int next(const step_record& s) {
    log->emplace_back(std::exchange(kept, {}), s.accepted);
    return cutoff.next(s);
  }
};
static_assert(draft_trimming_policy<logging_cutoff> && per_step_block_size_policy<logging_cutoff>);

}  // namespace

BOOST_AUTO_TEST_CASE(speed_cutoffs_of_concurrent_requests_learn_together) {
  const speed_cutoff_options options{.memory = 1, .learn_costs = false};  // counts add up exactly
  const speed_cutoff learner(step_cost_model::linear(8, 0.05), options);
  const auto prompts = synthetic_prompts(6, 97, 1, 12, 7);
  std::vector<lookup_drafter> drafters(prompts.size(), lookup_drafter(97, 3, 1, 63, lookup_confidence::evidence));
  std::vector<synthetic_target> targets(prompts.size(), synthetic_target(world()));
  batched_decoder<lookup_drafter, synthetic_target, logging_cutoff> batch;
  const auto log = std::make_shared<std::vector<std::pair<std::vector<int>, int>>>();
  std::map<request_id, std::size_t> index;
  for (std::size_t i = 0; i < prompts.size(); ++i)  // all at once: their steps interleave
    index[batch.add(drafters[i], targets[i], prompts[i], greedy(90), logging_cutoff{learner.shared(), log})] = i;
  batch.run();
  synthetic_target reference(world());
  for (const auto& f : batch.take_finished())
    BOOST_TEST(f.result.tokens == greedy_reference(reference, prompts[index.at(f.id)], 90));
  // The learner's counts are every request's kept drafts up to the first rejection, at their own levels.
  std::vector<speed_cutoff::counts> expected(static_cast<std::size_t>(options.levels * options.positions));
  double seen = 0;
  for (const auto& [levels, accepted] : *log)
    for (int j = 0; j < std::min(accepted + 1, static_cast<int>(levels.size())); ++j) {
      auto& c = expected[static_cast<std::size_t>(levels[static_cast<std::size_t>(j)] * options.positions +
                                                  std::min(j, options.positions - 1))];
      c.hits += j < accepted, c.seen += 1, seen += 1;
    }
  BOOST_TEST(seen > 50);
  for (int l = 0; l < options.levels; ++l)
    for (int j = 0; j < options.positions; ++j) {
      BOOST_TEST_CONTEXT("level " << l << ", position " << j) {
        BOOST_TEST(learner.learned(l, j).hits == expected[static_cast<std::size_t>(l * options.positions + j)].hits);
        BOOST_TEST(learner.learned(l, j).seen == expected[static_cast<std::size_t>(l * options.positions + j)].seen);
      }
    }
  // A copy learns on its own; a shared() one with the learner.
  speed_cutoff copy = learner, pooled = learner.shared();
  const std::vector<float> sure(3, 0.95f);
  for (speed_cutoff* p : {&copy, &pooled}) {
    (void)p->choose({});
    (void)p->next(step_record{1, p->keep_drafts(sure) + 1, 0, {}, 0});
  }
  BOOST_TEST(learner.learned(9, 0).seen == expected[static_cast<std::size_t>(9 * options.positions)].seen + 1);
  BOOST_TEST(copy.learned(9, 0).seen == learner.learned(9, 0).seen);
}

// --- the batch's plan of drafts -------------------------------------------------------------------

namespace {

/// The best rate over every way to keep prefixes of each request's drafts: (n + gains kept) / cost(rows).
std::pair<double, int> best_plan_by_enumeration(const std::vector<std::vector<double>>& gains,
                                                const std::vector<double>& rows) {
  const int n = static_cast<int>(gains.size());
  std::vector<int> k(gains.size(), 0);
  double best = -1;
  int best_rows = 0;
  while (true) {
    int total = n;
    double tokens = n;
    for (std::size_t i = 0; i < gains.size(); ++i)
      for (int j = 0; j < k[i]; ++j) tokens += gains[i][static_cast<std::size_t>(j)], ++total;
    if (total <= static_cast<int>(rows.size())) {
      const double rate = tokens / rows[static_cast<std::size_t>(total - 1)];
      if (rate > best + 1e-12 || (rate > best - 1e-12 && total < best_rows)) best = rate, best_rows = total;
    }
    std::size_t i = 0;  // the next combination
    while (i < k.size() && k[i] == static_cast<int>(gains[i].size())) k[i++] = 0;
    if (i == k.size()) break;
    ++k[i];
  }
  return {best, best_rows};
}

}  // namespace

BOOST_AUTO_TEST_CASE(batch_plan_is_the_best_plan) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::tuple<double, int, int>> scratch;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 3);
    std::vector<std::vector<double>> gains(static_cast<std::size_t>(n));
    for (auto& g : gains) {
      double survive = 1;
      for (int k = 0, drafts = static_cast<int>(rng() % 5); k < drafts; ++k)
        g.push_back(survive *= u(rng) < 0.2 ? 1.0 : u(rng));
    }
    std::vector<double> cost{1.0};  // rising by row, in steps that are flat, gentle or steep
    for (int r = 2; r <= 12; ++r) cost.push_back(cost.back() * (1 + (u(rng) < 0.3 ? 0 : 0.5 * u(rng) * u(rng))));
    std::vector<std::span<const double>> spans(gains.begin(), gains.end());
    std::vector<int> kept(gains.size());
    plan_batch_drafts(spans, cost, kept, scratch);
    int total = n;
    double tokens = n;
    for (std::size_t i = 0; i < gains.size(); ++i) {
      BOOST_TEST_REQUIRE((kept[i] >= 0 && kept[i] <= static_cast<int>(gains[i].size())));
      for (int j = 0; j < kept[i]; ++j) tokens += gains[i][static_cast<std::size_t>(j)], ++total;
    }
    const auto [best, best_rows] = best_plan_by_enumeration(gains, cost);
    BOOST_TEST_CONTEXT("trial " << trial) {
      BOOST_TEST(tokens / cost[static_cast<std::size_t>(total - 1)] == best, boost::test_tools::tolerance(1e-9));
      BOOST_TEST(total == best_rows);
    }
  }
  // One request: the speed cut-off's own choice.
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<double> cost{1.0};
    for (int r = 2; r <= 8; ++r) cost.push_back(cost.back() * (1 + 0.3 * u(rng)));
    speed_cutoff alone(step_cost_model(cost), {.learn_costs = false});
    std::vector<float> confidence(7);
    for (auto& c : confidence) c = static_cast<float>(u(rng));
    std::vector<double> gains;
    alone.draft_gains(confidence, gains);
    const std::span<const double> one(gains);
    int kept = -1;
    plan_batch_drafts(std::span(&one, 1), cost, std::span(&kept, 1), scratch);
    BOOST_TEST(kept == alone.keep_drafts(confidence));
  }
  std::vector<int> one(1), three(3);
  const std::vector<std::span<const double>> requests(3);
  check_error([&] { plan_batch_drafts(requests, std::vector<double>{1.0, 1.1}, three, scratch); }, {"anchor"});
  check_error([&] { plan_batch_drafts(requests, std::vector<double>{1.0, 1.1, 1.2, 1.3}, one, scratch); }, {"kept"});
  // Gains that are not finite, negative or rising along the drafts, and costs that are not finite and
  // positive, are refused: the plan would read them as a rate.
  const std::vector<double> rising{0.1, 0.9}, nan{0.5, std::nan("")}, negative{-0.1}, fine{0.9, 0.5};
  const std::vector<double> costs{1.0, 1.5, 2.0};
  for (const auto* gains : {&rising, &nan, &negative}) {
    const std::span<const double> bad(*gains);
    check_error([&] { plan_batch_drafts(std::span(&bad, 1), costs, one, scratch); }, {"gains must be"});
    check_error([&] { plan_padded_drafts(std::span(&bad, 1), costs, one); }, {"gains must be"});
  }
  const std::span<const double> good(fine);
  for (const std::vector<double>& bad : {std::vector<double>{1.0, 0.0, 2.0}, std::vector<double>{1.0, std::nan(""), 2.0}}) {
    check_error([&] { plan_batch_drafts(std::span(&good, 1), bad, one, scratch); }, {"finite and positive"});
    check_error([&] { plan_padded_drafts(std::span(&good, 1), bad, one); }, {"finite and positive"});
  }
  batched_decoder<lookup_drafter, synthetic_target, speed_cutoff> batch;
  check_error([&] { batch.plan_drafts({1.0, -1.0}); }, {"finite and positive"});
}

BOOST_AUTO_TEST_CASE(padded_plan_is_the_best_plan) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 3);
    std::vector<std::vector<double>> gains(static_cast<std::size_t>(n));
    for (auto& g : gains) {
      double survive = 1;
      for (int k = 0, drafts = static_cast<int>(rng() % 5); k < drafts; ++k) g.push_back(survive *= u(rng));
    }
    std::vector<double> cost{1.0};  // by the widest block: flat, gentle or steep steps
    for (int w = 2, widths = 1 + static_cast<int>(rng() % 6); w <= widths; ++w)
      cost.push_back(cost.back() * (1 + (u(rng) < 0.3 ? 0 : 0.6 * u(rng))));
    std::vector<std::span<const double>> spans(gains.begin(), gains.end());
    std::vector<int> kept(gains.size());
    plan_padded_drafts(spans, cost, kept);
    // Every combination of prefixes that the costs cover, priced by its widest block.
    double best = 0;
    std::vector<int> k(gains.size(), 0);
    for (bool more = true; more;) {
      int widest = 0;
      double tokens = n;
      for (std::size_t i = 0; i < gains.size(); ++i) {
        widest = std::max(widest, k[i]);
        for (int j = 0; j < k[i]; ++j) tokens += gains[i][static_cast<std::size_t>(j)];
      }
      if (widest < static_cast<int>(cost.size())) best = std::max(best, tokens / cost[static_cast<std::size_t>(widest)]);
      more = false;
      for (std::size_t i = 0; i < k.size() && !more; ++i)
        if (++k[i] <= static_cast<int>(gains[i].size())) more = true;
        else k[i] = 0;
    }
    int widest = 0;
    double tokens = n;
    for (std::size_t i = 0; i < gains.size(); ++i) {
      BOOST_TEST_REQUIRE((kept[i] >= 0 && kept[i] <= static_cast<int>(gains[i].size())));
      widest = std::max(widest, kept[i]);
      for (int j = 0; j < kept[i]; ++j) tokens += gains[i][static_cast<std::size_t>(j)];
    }
    BOOST_TEST_CONTEXT("trial " << trial) {
      BOOST_TEST_REQUIRE(widest < static_cast<int>(cost.size()));
      BOOST_TEST(tokens / cost[static_cast<std::size_t>(widest)] == best, boost::test_tools::tolerance(1e-9));
    }
  }
  std::vector<int> three(3);
  const std::vector<std::span<const double>> requests(3);
  std::vector<int> one(1);
  check_error([&] { plan_padded_drafts(requests, std::vector<double>{}, three); }, {"one row"});
  check_error([&] { plan_padded_drafts(requests, std::vector<double>{1.0}, one); }, {"kept"});
}

namespace {

/// A speed cut-off that logs the gains it reports and the drafts it keeps in each step.
struct plan_logging_cutoff {
  using logits_backend = void;
  speed_cutoff cutoff;
  struct log {
    std::vector<std::vector<double>> gains;
    std::vector<int> kept;
  };
  std::shared_ptr<log> steps;

  [[nodiscard]] int max_block_size() const { return cutoff.max_block_size(); }
  [[nodiscard]] block_size_choice choose(const request_features& f) { return cutoff.choose(f); }
  [[nodiscard]] int keep_drafts(std::span<const float> confidence) { return cutoff.keep_drafts(confidence); }
  void draft_gains(std::span<const float> confidence, std::vector<double>& gains) const {
    cutoff.draft_gains(confidence, gains);
    steps->gains.push_back(gains);
  }
  int keep(std::span<const float> confidence, int k) { return steps->kept.emplace_back(cutoff.keep(confidence, k)); }
  [[nodiscard]] int next(const step_record& s) { return cutoff.next(s); }
};
static_assert(batch_trimming_policy<plan_logging_cutoff> && batch_trimming_policy<speed_cutoff>);

}  // namespace

/// A speed cut-off whose gains rise along the drafts when `rising`, and that throws when `throws`: a
/// policy the plan cannot trust.
struct rising_gains_cutoff {
  using logits_backend = void;
  speed_cutoff cutoff;
  bool rising = false, throws = false;
  [[nodiscard]] int max_block_size() const { return cutoff.max_block_size(); }
  [[nodiscard]] block_size_choice choose(const request_features& f) { return cutoff.choose(f); }
  [[nodiscard]] int keep_drafts(std::span<const float> confidence) { return cutoff.keep_drafts(confidence); }
  void draft_gains(std::span<const float> confidence, std::vector<double>& gains) const {
    if (throws) throw std::runtime_error("a broken policy");
    cutoff.draft_gains(confidence, gains);
    if (rising && gains.size() >= 2) gains[1] = gains[0] + 0.5;
  }
  int keep(std::span<const float> confidence, int k) { return cutoff.keep(confidence, k); }
  [[nodiscard]] int next(const step_record& s) { return cutoff.next(s); }
};

BOOST_AUTO_TEST_CASE(a_plan_refuses_gains_it_cannot_trust) {
  // The second request's policy reports rising gains, or throws: it ends at its first planned step
  // (invalid_argument or model_error, stage policy) with its first token, the exception reaches the
  // caller once the step is over, and the others decode as greedy does.
  const auto prompts = synthetic_prompts(3, 97, 1, 12, 7);
  synthetic_target reference(world());
  for (const bool throws : {false, true}) {
    BOOST_TEST_CONTEXT((throws ? "throws" : "rising gains")) {
      std::vector<lookup_drafter> drafters(3, lookup_drafter(97, 3, 1, 63, lookup_confidence::evidence));
      std::vector<synthetic_target> targets(3, synthetic_target(world()));
      batched_decoder<lookup_drafter, synthetic_target, rising_gains_cutoff> batch;
      batch.plan_drafts(std::vector<double>(40, 1.0));
      const speed_cutoff learner(step_cost_model::linear(8, 0.05), {.learn_costs = false});
      std::map<request_id, std::size_t> index;
      for (std::size_t i = 0; i < 3; ++i)
        index[batch.add(drafters[i], targets[i], prompts[i], greedy(60), {learner.shared(), i == 1 && !throws, i == 1 && throws})] = i;
      if (throws) BOOST_CHECK_THROW(batch.step(), std::runtime_error);
      batch.run();
      const auto finished = batch.take_finished();
      BOOST_TEST_REQUIRE(finished.size() == 3u);
      for (const auto& f : finished) {
        if (index.at(f.id) == 1) {
          BOOST_TEST((f.result.error == (throws ? status::model_error : status::invalid_argument)));
          BOOST_TEST(f.result.failed_stage == "policy");
          BOOST_TEST(f.result.tokens.size() == 1u);
        } else {
          BOOST_TEST((f.result.error == status::success));
          BOOST_TEST(f.result.tokens == greedy_reference(reference, prompts[index.at(f.id)], 60));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_planned_batch_verifies_the_planned_drafts_and_stays_exact) {
  const auto prompts = synthetic_prompts(5, 97, 1, 12, 7);
  synthetic_target reference(world());
  for (const double per_row : {0.0, 0.04, 0.15, 2.0}) {
    BOOST_TEST_CONTEXT("row cost " << per_row) {
      const speed_cutoff learner(step_cost_model::linear(8, 0.05), {.learn_costs = false});
      std::vector<double> rows;
      for (int r = 1; r <= 40; ++r) rows.push_back(1 + per_row * (r - 1));
      std::vector<lookup_drafter> drafters(prompts.size(), lookup_drafter(97, 3, 1, 63, lookup_confidence::evidence));
      std::vector<batch_target> targets(prompts.size(), batch_target(world()));
      batched_decoder<lookup_drafter, batch_target, plan_logging_cutoff> batch;
      batch.plan_drafts(rows);
      const auto log = std::make_shared<plan_logging_cutoff::log>();
      std::map<request_id, std::size_t> index;
      for (std::size_t i = 0; i < prompts.size(); ++i)
        index[batch.add(drafters[i], targets[i], prompts[i], greedy(90), {learner.shared(), log})] = i;
      std::vector<std::tuple<double, int, int>> scratch;
      int drafts_kept = 0, steps = 0;
      while (!batch.empty()) {
        log->gains.clear(), log->kept.clear();
        batch.step();
        ++steps;
        // Each step keeps what the plan of that step's gains says, request by request.
        std::vector<std::span<const double>> spans(log->gains.begin(), log->gains.end());
        std::vector<int> planned(spans.size());
        plan_batch_drafts(spans, rows, planned, scratch);
        BOOST_TEST_REQUIRE(log->kept == planned);
        int step_rows = 0;
        for (const int k : log->kept) drafts_kept += k, step_rows += k + 1;
        BOOST_TEST(batch.last_step().rows == step_rows);
        BOOST_TEST(batch.last_step().requests == static_cast<int>(planned.size()));
      }
      std::int64_t drafts_scored = 0;  // by the blocks the requests' decoders scored
      for (const auto& f : batch.take_finished()) {
        BOOST_TEST(f.result.error == status::success);
        BOOST_TEST(f.result.tokens == greedy_reference(reference, prompts[index.at(f.id)], 90));
        for (std::size_t b = 1; b < f.result.stats.steps_by_block.size(); ++b)
          drafts_scored += static_cast<std::int64_t>(b - 1) * f.result.stats.steps_by_block[b];
      }
      BOOST_TEST(drafts_scored == drafts_kept);
      if (per_row == 0.0) BOOST_TEST(drafts_kept > steps);  // free rows: every draft worth anything
      if (per_row == 2.0) BOOST_TEST(drafts_kept == 0);     // dear rows: plain decoding
    }
  }
}

BOOST_AUTO_TEST_CASE(a_planned_batch_refined_from_its_step_timings) {
  // The engine's loop: each step's rows and scoring time refine a curve over rows, which plans the next.
  const auto prompts = synthetic_prompts(3, 97, 1, 12, 7);
  std::vector<lookup_drafter> drafters(prompts.size(), lookup_drafter(97, 3, 1, 63, lookup_confidence::evidence));
  std::vector<batch_target> targets(prompts.size(), batch_target(world()));
  batched_decoder<lookup_drafter, batch_target, speed_cutoff> batch;
  const speed_cutoff learner(step_cost_model::linear(8, 0.05));
  step_cost_model rows = step_cost_model::linear(24, 0.02, {.group_timings = 4});
  std::map<request_id, std::size_t> index;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    index[batch.add(drafters[i], targets[i], prompts[i], greedy(60), learner.shared())] = i;
  std::vector<double> curve(24);
  while (!batch.empty()) {
    for (int r = 1; r <= 24; ++r) curve[static_cast<std::size_t>(r - 1)] = rows.cost(r);
    batch.plan_drafts(curve);
    batch.step();
    BOOST_TEST((batch.last_step().rows >= batch.last_step().requests && batch.last_step().score_seconds > 0));
    rows.observe(batch.last_step().rows, batch.last_step().score_seconds);
  }
  long observed = 0;
  for (int r = 1; r <= 24; ++r) observed += rows.observed(r);
  BOOST_TEST(observed > 10);
  synthetic_target reference(world());
  for (const auto& f : batch.take_finished()) {
    BOOST_TEST(f.result.tokens == greedy_reference(reference, prompts[index.at(f.id)], 60));
    BOOST_TEST(f.result.stats.seconds.policy > 0);
  }
}

// --- the step API on one decoder ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(step_api_equals_generate_and_splits_a_step) {
  const auto jobs = scenario();
  for (const auto& j : jobs) {
    const auto expected = alone<rejection_sampling, synthetic_target>(j, 1.0f);
    synthetic_drafter d(world());
    synthetic_target t(world());
    speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size, rejection_sampling> dec(d, t, {j.block_size});
    const generation_config c = config_of(j, 1.0f);
    generation_result r;
    BOOST_TEST_REQUIRE(dec.start(j.prompt, c, r) == status::success);
    // The engine's own scoring between the halves of a step.
    std::span<const token_id> block;
    matrix_view<const float> logits;
    int steps = 0;
    while (!dec.done()) {
      BOOST_TEST_REQUIRE(dec.draft_block(block) == status::success);
      BOOST_TEST(block.size() == static_cast<std::size_t>(j.block_size));
      BOOST_TEST((dec.draft_block(block) == status::invalid_argument));  // a block is already out
      BOOST_TEST((dec.step() == status::invalid_argument));
      BOOST_TEST_REQUIRE(t.score(block, logits) == status::success);
      BOOST_TEST_REQUIRE(dec.finish_block(logits) == status::success);
      ++steps;
    }
    BOOST_TEST(r.tokens == expected.tokens);
    BOOST_TEST(r.stats.steps == steps);
    BOOST_TEST((dec.step() == status::success));  // done: nothing happens, the result stands
    BOOST_TEST((dec.finish_block(logits) == status::invalid_argument));
    BOOST_TEST(r.tokens == expected.tokens);
    // The same with the drafting half split again: drafts, then the engine's trim (all of them).
    generation_result split;
    BOOST_TEST_REQUIRE(dec.start(j.prompt, c, split) == status::success);
    std::span<const float> confidence;
    BOOST_TEST((dec.trim_block(0, block) == status::invalid_argument));  // nothing drafted
    while (!dec.done()) {
      BOOST_TEST_REQUIRE(dec.draft_untrimmed(confidence) == status::success);
      BOOST_TEST((dec.draft_untrimmed(confidence) == status::invalid_argument));  // drafts are out
      BOOST_TEST((dec.step() == status::invalid_argument));
      BOOST_TEST((dec.finish_block(logits) == status::invalid_argument));       // nothing to score yet
      BOOST_TEST_REQUIRE(dec.trim_block(j.block_size - 1, block) == status::success);
      BOOST_TEST(block.size() == static_cast<std::size_t>(j.block_size));
      BOOST_TEST_REQUIRE(t.score(block, logits) == status::success);
      BOOST_TEST_REQUIRE(dec.finish_block(logits) == status::success);
    }
    BOOST_TEST(split.tokens == expected.tokens);
  }
}

BOOST_AUTO_TEST_CASE(cancellation_keeps_the_committed_tokens) {
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 200, 0};
  const auto full = alone<greedy_match, synthetic_target>(j, 0.0f);
  synthetic_drafter d(world());
  synthetic_target t(world());
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size> dec(d, t, {4});

  // From the token stream: cancel after 30 tokens; the request ends before its next step.
  std::stop_source source;
  generation_config c = config_of(j, 0.0f);
  c.cancel = source.get_token();
  std::size_t seen = 0;
  c.on_tokens = [&](std::span<const token_id> piece) {
    seen += piece.size();
    if (seen >= 30) source.request_stop();
  };
  generation_result r;
  BOOST_TEST((dec.generate(j.prompt, c, r) == status::cancelled));
  BOOST_TEST(r.failed_stage == "cancel");
  BOOST_TEST(r.tokens.size() == seen);
  BOOST_TEST(r.tokens.size() >= 30u);
  BOOST_TEST(r.tokens.size() < 34u);
  BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), full.tokens.begin()));

  // Requested before the start: nothing runs.
  BOOST_TEST((dec.generate(j.prompt, c, r) == status::cancelled));
  BOOST_TEST(r.tokens.empty());

  // The decoder is usable after.
  BOOST_TEST((dec.generate(j.prompt, config_of(j, 0.0f), r) == status::success));
  BOOST_TEST(r.tokens == full.tokens);

  // In a batch, by id: the others go on.
  std::vector<synthetic_drafter> drafters(2, synthetic_drafter(world()));
  std::vector<synthetic_target> targets(2, synthetic_target(world()));
  batched_decoder<synthetic_drafter, synthetic_target, runtime_block_size> batch;
  const request_id a = batch.add(drafters[0], targets[0], j.prompt, config_of(j, 0.0f), {4});
  const request_id b = batch.add(drafters[1], targets[1], j.prompt, config_of(j, 0.0f), {4});
  batch.step();
  batch.step();
  BOOST_TEST(batch.cancel(a));
  BOOST_TEST(!batch.cancel(a));  // no longer active
  BOOST_TEST(batch.active() == 1u);
  batch.run();
  auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 2u);
  BOOST_TEST(finished[0].id == a);
  BOOST_TEST((finished[0].result.error == status::cancelled));
  BOOST_TEST(finished[0].result.tokens.size() > 1u);
  BOOST_TEST(std::equal(finished[0].result.tokens.begin(), finished[0].result.tokens.end(), full.tokens.begin()));
  BOOST_TEST(finished[1].id == b);
  BOOST_TEST(finished[1].result.tokens == full.tokens);
}

BOOST_AUTO_TEST_CASE(cancel_from_the_token_stream_during_a_step) {
  // One request's on_tokens cancels the request stepped before it, itself and the one stepped after it:
  // they leave when the step ends (the decoders are still running), the fourth goes on.
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 200, 0};
  const auto full = alone<greedy_match, synthetic_target>(j, 0.0f);
  std::vector<synthetic_drafter> drafters(4, synthetic_drafter(world()));
  std::vector<synthetic_target> targets(4, synthetic_target(world()));
  batched_decoder<synthetic_drafter, synthetic_target, runtime_block_size> batch;
  std::vector<request_id> ids;
  std::size_t seen = 0;
  bool cancelled = false;
  for (std::size_t i = 0; i < 4; ++i) {
    generation_config c = config_of(j, 0.0f);
    if (i == 1)
      c.on_tokens = [&](std::span<const token_id> piece) {
        seen += piece.size();
        if (seen < 30 || cancelled) return;
        cancelled = true;
        BOOST_TEST(batch.cancel(ids[0]));
        BOOST_TEST(batch.cancel(ids[1]));
        BOOST_TEST(batch.cancel(ids[2]));
        BOOST_TEST(!batch.cancel(ids[1]));  // already ended
        BOOST_TEST(batch.active() == 4u);   // until the step ends
        BOOST_TEST(batch.take_finished().empty());
      };
    ids.push_back(batch.add(drafters[i], targets[i], j.prompt, std::move(c), {4}));
  }
  while (!cancelled && batch.step() > 0) {
  }
  BOOST_TEST_REQUIRE(cancelled);
  BOOST_TEST(batch.active() == 1u);
  auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(finished[i].id == ids[i]);
    BOOST_TEST((finished[i].result.error == status::cancelled));
    BOOST_TEST(finished[i].result.failed_stage == "cancel");
    BOOST_TEST(finished[i].result.tokens.size() < full.tokens.size());
    BOOST_TEST(std::equal(finished[i].result.tokens.begin(), finished[i].result.tokens.end(), full.tokens.begin()));
  }
  BOOST_TEST(finished[1].result.tokens.size() == seen);
  batch.run();
  finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 1u);
  BOOST_TEST(finished[0].id == ids[3]);
  BOOST_TEST(finished[0].result.tokens == full.tokens);
}

BOOST_AUTO_TEST_CASE(the_last_chunk_comes_after_the_request_has_ended) {
  // A request's on_tokens cancels it on the chunk that reaches max_new_tokens: too late, cancel(id) says
  // false and the request finishes complete and successful, as alone.
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 50, 0};
  const auto full = alone<greedy_match, synthetic_target>(j, 0.0f);
  synthetic_drafter drafter(world());
  synthetic_target target(world());
  batched_decoder<synthetic_drafter, synthetic_target, runtime_block_size> batch;
  request_id id = 0;
  std::size_t seen = 0;
  int refused = 0;
  generation_config c = config_of(j, 0.0f);
  c.on_tokens = [&](std::span<const token_id> piece) {
    seen += piece.size();
    if (seen == static_cast<std::size_t>(j.max_new)) refused += batch.cancel(id) ? 0 : 1;
  };
  id = batch.add(drafter, target, j.prompt, std::move(c), {4});
  batch.run();
  BOOST_TEST(refused == 1);
  const auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 1u);
  BOOST_TEST((finished[0].result.error == status::success));
  BOOST_TEST(finished[0].result.tokens == full.tokens);
}

BOOST_AUTO_TEST_CASE(a_callback_that_throws_ends_only_its_request) {
  // The second of three requests throws from on_tokens: step() rethrows it after the third has finished
  // the step; the thrower has ended (cancelled) with its committed tokens, the others decode as alone.
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 200, 0};
  const auto full = alone<greedy_match, synthetic_target>(j, 0.0f);
  std::vector<synthetic_drafter> drafters(3, synthetic_drafter(world()));
  std::vector<synthetic_target> targets(3, synthetic_target(world()));
  batched_decoder<synthetic_drafter, synthetic_target, runtime_block_size> batch;
  std::size_t seen = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    generation_config c = config_of(j, 0.0f);
    if (i == 1)
      c.on_tokens = [&](std::span<const token_id> piece) {
        seen += piece.size();
        if (seen >= 30) throw std::runtime_error("the client left");
      };
    batch.add(drafters[i], targets[i], j.prompt, std::move(c), {4});
  }
  bool thrown = false;
  while (!thrown && batch.active() > 0) {
    try {
      batch.step();
    } catch (const std::runtime_error&) {
      thrown = true;
    }
  }
  BOOST_TEST_REQUIRE(thrown);
  BOOST_TEST(batch.active() == 2u);
  auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 1u);
  BOOST_TEST((finished[0].result.error == status::cancelled));
  BOOST_TEST(finished[0].result.tokens.size() == seen);
  BOOST_TEST(std::equal(finished[0].result.tokens.begin(), finished[0].result.tokens.end(), full.tokens.begin()));
  batch.run();
  finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 2u);
  for (const auto& f : finished) BOOST_TEST(f.result.tokens == full.tokens);
}

namespace {
/// The synthetic models, throwing at their `throw_at`-th draft or score (counting from 0; -1: never).
struct throwing_drafter : synthetic_drafter {
  using synthetic_drafter::synthetic_drafter;
  int throw_at = -1, drafts = 0;
  status draft(const draft_request& r, std::span<token_id> out) {
    if (drafts++ == throw_at) throw std::runtime_error("the drafter ran out of memory");
    return synthetic_drafter::draft(r, out);
  }
};
/// Steps until no request is active (at most 1,000 steps), going on after every std::runtime_error a
/// step rethrows; returns how many there were.
template <class Batch>
int run_counting_throws(Batch& batch) {
  int thrown = 0, steps = 0;
  while (batch.active() > 0) {
    try {
      batch.step();
    } catch (const std::runtime_error&) {
      ++thrown;
    }
    BOOST_TEST_REQUIRE(++steps < 1000);
  }
  return thrown;
}

/// Batch scoring that throws at its fourth call.
struct throwing_batch : synthetic_target {
  using synthetic_target::synthetic_target;
  static inline int calls = 0;
  static status score_batch(std::span<throwing_batch* const> targets, std::span<const std::span<const token_id>> blocks,
                            std::span<matrix_view<const float>> logits) {
    if (++calls == 4) throw std::runtime_error("the device was lost");
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (const status s = targets[i]->score(blocks[i], logits[i]); s != status::success) return s;
    return status::success;
  }
};
struct throwing_target : synthetic_target {
  using synthetic_target::synthetic_target;
  int throw_at = -1, scores = 0;
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    if (scores++ == throw_at) throw std::runtime_error("the device was lost");
    return synthetic_target::score(block, logits);
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(a_model_that_throws_ends_only_its_request) {
  // The second of three requests' drafter, or its target, throws at its fifth step: step() rethrows
  // once the others have finished the step; the request has ended (model_error, stage draft or verify)
  // with the tokens committed before, and the others decode as alone.
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 200, 0};
  const auto full = alone<greedy_match, synthetic_target>(j, 0.0f);
  for (const std::string stage : {"draft", "verify"}) {
    BOOST_TEST_CONTEXT(stage) {
      std::vector<throwing_drafter> drafters(3, throwing_drafter(world()));
      std::vector<throwing_target> targets(3, throwing_target(world()));
      (stage == "draft" ? drafters[1].throw_at : targets[1].throw_at) = 4;
      batched_decoder<throwing_drafter, throwing_target, runtime_block_size> batch;
      for (std::size_t i = 0; i < 3; ++i) batch.add(drafters[i], targets[i], j.prompt, config_of(j, 0.0f), {4});
      BOOST_TEST(run_counting_throws(batch) == 1);
      const auto finished = batch.take_finished();
      BOOST_TEST_REQUIRE(finished.size() == 3u);
      BOOST_TEST((finished[0].result.error == status::model_error));
      BOOST_TEST(finished[0].result.failed_stage == stage);
      BOOST_TEST(finished[0].result.stats.steps == 4);
      BOOST_TEST(std::equal(finished[0].result.tokens.begin(), finished[0].result.tokens.end(), full.tokens.begin()));
      for (const std::size_t i : {1u, 2u}) BOOST_TEST(finished[i].result.tokens == full.tokens);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_request_whose_start_throws_is_finished_all_the_same) {
  // A prefill that throws inside add(): the exception reaches the caller and the request is in
  // take_finished() with model_error (stage prefill); the models are free for the next request.
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 40, 0};
  struct throwing_prefill : synthetic_target {
    using synthetic_target::synthetic_target;
    bool broken = true;
    status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
      if (std::exchange(broken, false)) throw std::runtime_error("the device was lost");
      return synthetic_target::prefill(p, logits);
    }
  };
  throwing_drafter drafter(world());
  throwing_prefill target(world());
  batched_decoder<throwing_drafter, throwing_prefill, runtime_block_size> batch;
  BOOST_CHECK_THROW(batch.add(drafter, target, j.prompt, config_of(j, 0.0f), {4}), std::runtime_error);
  auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 1u);
  BOOST_TEST((finished[0].result.error == status::model_error));
  BOOST_TEST(finished[0].result.failed_stage == "prefill");
  batch.add(drafter, target, j.prompt, config_of(j, 0.0f), {4});
  batch.run();
  finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 1u);
  BOOST_TEST(finished[0].result.tokens == (alone<greedy_match, synthetic_target>(j, 0.0f).tokens));
}

BOOST_AUTO_TEST_CASE(a_batch_scoring_call_that_throws_fails_its_step) {
  // score_batch throws at the fourth step: every request of that step ends (model_error, stage verify)
  // with the tokens committed before, and step() rethrows once.
  const job j{synthetic_prompts(1, 97, 5, 5, 3)[0], 4, 42, 200, 0};
  const auto full = alone<greedy_match, synthetic_target>(j, 0.0f);
  std::vector<synthetic_drafter> drafters(3, synthetic_drafter(world()));
  std::vector<throwing_batch> targets(3, throwing_batch(world()));
  batched_decoder<synthetic_drafter, throwing_batch, runtime_block_size> batch;
  for (std::size_t i = 0; i < 3; ++i) batch.add(drafters[i], targets[i], j.prompt, config_of(j, 0.0f), {4});
  BOOST_TEST(run_counting_throws(batch) == 1);
  for (const auto& f : batch.take_finished()) {
    BOOST_TEST((f.result.error == status::model_error));
    BOOST_TEST(f.result.failed_stage == "verify");
    BOOST_TEST(f.result.stats.steps == 3);
    BOOST_TEST(std::equal(f.result.tokens.begin(), f.result.tokens.end(), full.tokens.begin()));
  }
}

BOOST_AUTO_TEST_CASE(errors_end_one_request_and_keep_its_tokens) {
  using poisoned = nan_injecting_verifier<synthetic_target>;
  const auto prompts = synthetic_prompts(3, 97, 3, 8, 9);
  synthetic_drafter d0(world()), d1(world()), d2(world());
  poisoned t0(synthetic_target(world()), 2), t1(synthetic_target(world()), 1000), t2(synthetic_target(world()), 1000);
  batched_decoder<synthetic_drafter, poisoned, runtime_block_size> batch;
  const request_id bad = batch.add(d0, t0, prompts[0], greedy(60), {8});
  batch.add(d1, t1, prompts[1], greedy(60), {8});
  // Models already serving an active request are refused, and the request that holds them goes on.
  const request_id twice = batch.add(d1, t2, prompts[2], greedy(60), {8});
  // A bad request ends at once with its status.
  const request_id empty = batch.add(d2, t2, {}, greedy(60), {8});
  batch.run();
  auto finished = batch.take_finished();
  BOOST_TEST_REQUIRE(finished.size() == 4u);
  for (const auto& f : finished) {
    if (f.id == bad) {
      BOOST_TEST((f.result.error == status::non_finite_logits));
      BOOST_TEST(f.result.failed_stage == "accept");
      BOOST_TEST(f.result.stats.steps == 2);
      synthetic_target reference(world());
      const auto expected = greedy_reference(reference, prompts[0], 60);
      BOOST_TEST(std::equal(f.result.tokens.begin(), f.result.tokens.end(), expected.begin()));
    } else if (f.id == twice) {
      BOOST_TEST((f.result.error == status::invalid_argument));
      BOOST_TEST(f.result.failed_stage == "input");
    } else if (f.id == empty) {
      BOOST_TEST((f.result.error == status::empty_prompt));
    } else {
      BOOST_TEST((f.result.error == status::success));
      synthetic_target reference(world());
      BOOST_TEST(f.result.tokens == greedy_reference(reference, prompts[1], 60));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_failed_batch_call_fails_the_step_of_every_request) {
  struct failing_batch_target : batch_target {
    using batch_target::batch_target;
    static status score_batch(std::span<failing_batch_target* const>, std::span<const std::span<const token_id>>,
                              std::span<matrix_view<const float>>) {
      return status::model_error;
    }
  };
  static_assert(batch_scoring_verifier<failing_batch_target>);
  const auto prompts = synthetic_prompts(2, 97, 3, 8, 13);
  synthetic_drafter d0(world()), d1(world());
  failing_batch_target t0(world()), t1(world());
  batched_decoder<synthetic_drafter, failing_batch_target, runtime_block_size> batch;
  batch.add(d0, t0, prompts[0], greedy(20), {4});
  batch.add(d1, t1, prompts[1], greedy(20), {4});
  BOOST_TEST(batch.step() == 0u);
  const auto finished = batch.take_finished();
  BOOST_TEST(finished.size() == 2u);
  for (const auto& f : finished) {
    BOOST_TEST((f.result.error == status::model_error));
    BOOST_TEST(f.result.failed_stage == "verify");
    BOOST_TEST(f.result.tokens.size() == 1u);  // the first token, from the prefill
  }
}
