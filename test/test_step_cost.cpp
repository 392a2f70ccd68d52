// The speed objective: the step-cost fit recovers known costs from timing, the speedup transform,
// and the timing tensors of a policy dataset (round trip, merge, errors).
#define BOOST_TEST_MODULE step_cost
#include <boost/test/unit_test.hpp>

#include "support/check_error.hpp"
#include "support/temp_dir.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "blockpilot_workbench/eval/policy_eval.hpp"
#include "blockpilot_workbench/eval/step_cost.hpp"
#include "blockpilot_workbench/io/policy_dataset.hpp"
#include "blockpilot_workbench/io/safetensors.hpp"

namespace bp = blockpilot;
namespace tt = boost::test_tools;
using bp::testing::check_error;
using bp::testing::temp_dir;

namespace {

const std::vector<double> true_cost{1.0, 1.3, 1.6, 1.85, 2.2};  // a step at b over a step at b = 1

/// Prompts whose timing follows the model: seconds = prefill + tokens / tau * step * cost(b), the
/// prefill and the step seconds growing with the prompt's length; `noise` scales each request's time.
bp::policy_dataset timed_dataset(int prompts, std::uint64_t seed, double noise = 0.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> length(0.1, 4.0), gain(0.0, 0.4), jitter(-noise, noise);
  bp::policy_dataset d;
  d.sizes = {1, 2, 3, 4, 5};
  d.vocab = 2;
  for (int i = 0; i < prompts; ++i) {
    const double l = length(rng), p = 0.5 * l, step = 0.03 * (1.0 + 0.5 * l), g = gain(rng);
    std::vector<double> tau, seconds;
    std::vector<std::int64_t> tokens;
    for (std::size_t k = 0; k < d.sizes.size(); ++k) {
      tau.push_back(1.0 + g * static_cast<double>(k) * (1.0 - 0.1 * static_cast<double>(k)));
      tokens.push_back(i % 7 == 0 ? 40 : 64);  // some requests stop early
      seconds.push_back((p + static_cast<double>(tokens.back()) / tau.back() * step * true_cost[k]) * (1.0 + jitter(rng)));
    }
    d.add("p" + std::to_string(i), std::vector<float>{0.0f, 1.0f}, tau, seconds, tokens);
  }
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fit_recovers_the_costs_and_each_prompts_seconds) {
  const auto d = timed_dataset(40, 1);
  const auto fit = bp::fit_step_cost(d);
  BOOST_TEST(fit.cost == true_cost, tt::tolerance(1e-4) << tt::per_element());
  BOOST_TEST(fit.relative_rms < 1e-4);
  std::mt19937_64 rng(1);  // the generator's draws again: the first prompt's length
  const double l = std::uniform_real_distribution<double>(0.1, 4.0)(rng);
  BOOST_TEST(fit.prompt_seconds[0] == 0.5 * l, tt::tolerance(1e-3));
  BOOST_TEST(fit.step_seconds[0] == 0.03 * (1.0 + 0.5 * l), tt::tolerance(1e-3));

  // 5 % timing noise (a shared machine): the costs stay within a few percent.
  const auto noisy = bp::fit_step_cost(timed_dataset(200, 2, 0.05));
  BOOST_TEST(noisy.cost == true_cost, tt::tolerance(0.04) << tt::per_element());
  BOOST_TEST(noisy.relative_rms > 0.01);
}

BOOST_AUTO_TEST_CASE(speed_objective_divides_tau_by_the_step_cost) {
  const auto d = timed_dataset(10, 3);
  const std::vector<double> cost{1.0, 2.0, 3.0, 4.0, 5.0};
  const auto s = bp::speed_objective(d, cost);
  for (std::size_t i = 0; i < d.size(); ++i)
    for (std::size_t k = 0; k < cost.size(); ++k) BOOST_TEST(s.taus(i)[k] == d.taus(i)[k] / cost[k]);
  BOOST_TEST(s.metadata.at("objective") == "speed");
  BOOST_TEST(s.metadata.at("step_cost") == "[1.0,2.0,3.0,4.0,5.0]");
  // Tau grows with b, but a step costs more: the speed oracle picks smaller sizes than the tau oracle.
  const auto by_tau = bp::oracle_choices(d, 1, 5), by_speed = bp::oracle_choices(s, 1, 5);
  for (std::size_t i = 0; i < d.size(); ++i) BOOST_TEST(by_speed[i] <= by_tau[i]);
  BOOST_TEST(by_speed != by_tau);

  // The fitted variant: every size's estimated speedup is tau(b) / cost(b).
  const auto fitted = bp::speed_objective(d);
  BOOST_TEST(fitted.taus(0)[2] == d.taus(0)[2] / true_cost[2], tt::tolerance(1e-4));

  check_error([&] { (void)bp::speed_objective(d, {1.0, 2.0}); }, {"one finite positive step cost per block size"});
  check_error([&] { (void)bp::speed_objective(d, {1.0, 2.0, 0.0, 4.0, 5.0}); }, {"positive"});
  check_error([&] { (void)bp::speed_objective(d, {1.0, 2.0, std::numeric_limits<double>::infinity(), 4.0, 5.0}); }, {"finite"});
  bp::policy_dataset untimed;
  untimed.sizes = {1, 2};
  untimed.vocab = 2;
  untimed.add("a", std::vector<float>{0.0f, 1.0f}, std::vector<double>{1.0, 1.5});
  check_error([&] { (void)bp::fit_step_cost(untimed); }, {"no timing"});
}

BOOST_AUTO_TEST_CASE(timing_round_trip_merge_and_errors) {
  const auto d = timed_dataset(6, 4);
  const temp_dir dir;
  bp::write_policy_dataset(d, dir.path / "timed");
  const auto back = bp::read_policy_dataset(dir.path / "timed");
  BOOST_TEST(back.seconds == d.seconds);
  BOOST_TEST(back.tokens == d.tokens);

  // Merging keeps the timing, and refuses a part without it.
  auto a = d, b = timed_dataset(6, 5);
  for (auto& key : b.prompts) key += "b";
  const auto merged = bp::merge_policy_datasets({a, b});
  BOOST_TEST(merged.size() == 12u);
  BOOST_TEST(std::vector<double>(merged.seconds_of(7).begin(), merged.seconds_of(7).end()) ==
             std::vector<double>(b.seconds_of(1).begin(), b.seconds_of(1).end()));
  bp::policy_dataset untimed;
  untimed.sizes = d.sizes;
  untimed.vocab = d.vocab;
  untimed.add("u", d.row(0), d.taus(0));
  check_error([&] { (void)bp::merge_policy_datasets({a, untimed}); }, {"part 1", "'seconds'"});

  // Timing for some prompts only, or of the wrong length, is refused when adding.
  check_error([&] { untimed.add("v", d.row(0), d.taus(0), d.seconds_of(0), d.tokens_of(0)); }, {"'v'", "every prompt or for none"});
  check_error([&] { a.add("w", d.row(0), d.taus(0)); }, {"'w'"});
  check_error([&] { a.add("x", d.row(0), d.taus(0), d.seconds_of(0).first(2), d.tokens_of(0).first(2)); }, {"'x'"});

  // A file with seconds but no tokens names the missing tensor.
  const auto file = bp::io::safetensors_file::read(dir.path / "timed" / bp::policy_dataset_file);
  bp::io::safetensors_writer w;
  for (const char* name : {"prefill_logits", "tau", "block_sizes", "seconds"}) {
    const auto* t = file.find(name);
    w.add(name, t->type, t->shape, file.bytes(*t));
  }
  for (const auto& [k, v] : file.metadata()) w.set_metadata(k, v);
  std::filesystem::create_directories(dir.path / "bad");
  w.write(dir.path / "bad" / bp::policy_dataset_file);
  check_error([&] { (void)bp::read_policy_dataset(dir.path / "bad"); }, {"dataset.safetensors", "'tokens'", "missing"});

  // Timings that are not a duration or counts that are not counts are errors naming the tensor.
  for (const auto& [field, value] : {std::pair{"seconds", std::nan("")}, std::pair{"seconds", -1.0}, std::pair{"tokens", -1.0}}) {
    auto broken = d;
    if (std::string(field) == "seconds") broken.seconds[3] = value;
    else broken.tokens[3] = static_cast<std::int64_t>(value);
    bp::write_policy_dataset(broken, dir.path / "broken");
    check_error([&] { (void)bp::read_policy_dataset(dir.path / "broken"); }, {"dataset.safetensors", std::string("'") + field + "'"});
  }
}
