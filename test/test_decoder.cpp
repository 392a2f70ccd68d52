// The decode loop: exact equality with plain greedy decoding for every drafter, policy, block size,
// stop-token position and length (greedy match at any temperature); bad inputs, and bad rows, drafts or
// decisions from the models and rules, give a clear status and lose nothing.
#define BOOST_TEST_MODULE decoder
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <climits>
#include <fstream>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>

#if defined(__linux__)
#include <sys/resource.h>
#include <unistd.h>
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BLOCKPILOT_TEST_HAS_ASAN 1
#endif
#endif
#ifndef BLOCKPILOT_TEST_HAS_ASAN
#define BLOCKPILOT_TEST_HAS_ASAN 0
#endif

#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "support/check_error.hpp"
#include "support/test_models.hpp"

using namespace blockpilot;
using namespace blockpilot::testing;
namespace bdata = boost::unit_test::data;

namespace {

synthetic_params small_world_params() {
  synthetic_params p;
  p.vocab = 97;
  return p;
}
const synthetic_world& world() {
  static const synthetic_world w(small_world_params());
  return w;
}
std::vector<std::vector<token_id>> prompts() { return synthetic_prompts(6, 97, 1, 12, 7); }

/// Runs the decoder and checks its output against plain greedy decoding.
template <class Drafter, class Policy, class Rule = greedy_match>
void check_greedy_equal(Drafter& d, Policy policy, int max_new, std::vector<token_id> stop = {}) {
  synthetic_target target(world());
  synthetic_target reference(world());
  speculative_decoder<Drafter, synthetic_target, Policy, Rule> dec(d, target, policy);
  for (const auto& p : prompts()) {
    generation_config c;
    c.max_new_tokens = max_new;
    c.stop_tokens = std::vector<token_id>(stop);  // a copy moved in: copying into the empty vector draws a false null-pointer warning
    // The streamed pieces, in order, are exactly the output: one piece for the first token, then
    // at most one per step, none empty.
    std::vector<token_id> streamed;
    std::size_t pieces = 0;
    c.on_tokens = [&](std::span<const token_id> piece) {
      BOOST_TEST(!piece.empty());
      streamed.insert(streamed.end(), piece.begin(), piece.end());
      ++pieces;
    };
    generation_result r;
    BOOST_TEST_REQUIRE(dec.generate(p, c, r) == status::success);
    const auto expected = greedy_reference(reference, p, max_new, stop);
    BOOST_TEST(r.tokens == expected);
    BOOST_TEST(streamed == r.tokens);
    BOOST_TEST(pieces <= std::size_t(r.stats.steps) + 1);
    BOOST_TEST(r.stats.generated == static_cast<std::int64_t>(expected.size()));
    if (r.stats.steps > 0) BOOST_TEST(r.stats.tau() >= 1.0);
    BOOST_TEST(r.stats.tau() <= static_cast<double>(policy.max_block_size()));
  }
}

}  // namespace

const int block_sizes[] = {1, 2, 16, 32};

BOOST_DATA_TEST_CASE(greedy_equal_perfect_drafter, bdata::make(block_sizes) * bdata::make({1, 37, 64}), b, max_new) {
  perfect_drafter<synthetic_target> d{synthetic_target(world())};
  check_greedy_equal(d, runtime_block_size{b}, max_new);
}

BOOST_DATA_TEST_CASE(greedy_equal_always_wrong_drafter, bdata::make(block_sizes) * bdata::make({37, 64}), b, max_new) {
  always_wrong_drafter<perfect_drafter<synthetic_target>> d{perfect_drafter<synthetic_target>{synthetic_target(world())}};
  check_greedy_equal(d, runtime_block_size{b}, max_new);
}

BOOST_DATA_TEST_CASE(greedy_equal_random_drafter, bdata::make(block_sizes) * bdata::make({37, 64}), b, max_new) {
  random_drafter d(97, 5);
  check_greedy_equal(d, runtime_block_size{b}, max_new);
}

BOOST_DATA_TEST_CASE(greedy_equal_synthetic_drafter, bdata::make(block_sizes) * bdata::make({37, 100}), b, max_new) {
  synthetic_drafter d(world());
  check_greedy_equal(d, runtime_block_size{b}, max_new);
}

BOOST_AUTO_TEST_CASE(greedy_equal_compile_time_policies_and_rules) {
  synthetic_drafter d(world());
  check_greedy_equal(d, fixed_block_size<16>{}, 50);
  check_greedy_equal(d, fixed_block_size<1>{}, 50);
  // At T = 0 every rule is greedy.
  check_greedy_equal<synthetic_drafter, fixed_block_size<16>, sample_and_match>(d, {}, 50);
  check_greedy_equal<synthetic_drafter, fixed_block_size<16>, rejection_sampling>(d, {}, 50);
}

BOOST_AUTO_TEST_CASE(greedy_equal_per_step_policy) {
  synthetic_drafter d(world());
  check_greedy_equal(d, cycling_policy{}, 90);
}

BOOST_AUTO_TEST_CASE(greedy_match_is_greedy_at_any_temperature) {
  // greedy_match samples nothing: at T > 0 the first token, too, is the prefill row's argmax.
  synthetic_drafter d(world());
  synthetic_target target(world());
  synthetic_target reference(world());
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size> dec(d, target, {1});
  for (const int b : {1, 8})
    for (const float t : {0.5f, 1.0f, 2.0f})
      for (std::uint64_t seed = 0; seed < 3; ++seed)
        for (const auto& p : prompts()) {
          dec.policy().size = b;
          generation_config c;
          c.max_new_tokens = 24;
          c.temperature = t;
          c.seed = seed;
          generation_result r;
          BOOST_TEST_REQUIRE(dec.generate(p, c, r) == status::success);
          BOOST_TEST(r.tokens == greedy_reference(reference, p, 24), "b = " << b << ", T = " << t << ", seed " << seed);
        }
}

BOOST_AUTO_TEST_CASE(stop_tokens_inside_accepted_drafts_and_as_bonus) {
  synthetic_target reference(world());
  const auto p = prompts()[0];
  const auto full = greedy_reference(reference, p, 60);
  // A stop token taken from the middle of the greedy output: with the perfect drafter it is
  // an accepted draft, with the always-wrong drafter it is a bonus token.
  const std::vector<token_id> stop = {full[23]};
  perfect_drafter<synthetic_target> perfect{synthetic_target(world())};
  check_greedy_equal(perfect, runtime_block_size{16}, 60, stop);
  always_wrong_drafter<perfect_drafter<synthetic_target>> wrong{perfect_drafter<synthetic_target>{synthetic_target(world())}};
  check_greedy_equal(wrong, runtime_block_size{16}, 60, stop);
  // The first generated token as a stop token ends the request before any step.
  synthetic_target target(world());
  speculative_decoder<perfect_drafter<synthetic_target>, synthetic_target, runtime_block_size> dec(perfect, target, {16});
  generation_config c;
  c.stop_tokens = {full[0]};
  generation_result r;
  BOOST_TEST_REQUIRE(dec.generate(p, c, r) == status::success);
  BOOST_TEST(r.tokens == std::vector<token_id>{full[0]});
  BOOST_TEST(r.stats.steps == 0);
}

BOOST_AUTO_TEST_CASE(statistics_add_up) {
  synthetic_drafter d(world());
  synthetic_target target(world());
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> dec(d, target);
  generation_config c;
  c.max_new_tokens = 200;
  generation_result r;
  BOOST_TEST_REQUIRE(dec.generate(prompts()[1], c, r) == status::success);
  const auto& s = r.stats;
  std::int64_t steps = 0, committed = 0;
  for (std::size_t k = 0; k < s.steps_by_length.size(); ++k) {
    steps += s.steps_by_length[k];
    committed += static_cast<std::int64_t>(k) * s.steps_by_length[k];
  }
  BOOST_TEST(steps == s.steps);
  BOOST_TEST(committed == s.accepted + s.steps);
  BOOST_TEST(s.drafted == 15 * s.steps);
  BOOST_TEST(s.steps_by_block[16] == s.steps);
  BOOST_TEST(s.target_calls() == s.steps + 1);
  // 1 first token + every committed token, cut at max_new_tokens.
  BOOST_TEST(s.generated == 200);
  BOOST_TEST(1 + committed >= 200);
  BOOST_TEST(s.acceptance_rate(1) >= s.acceptance_rate(2));
  BOOST_TEST(s.acceptance_rate(1) <= 1.0);
  BOOST_TEST(s.seconds.total >= s.seconds.prefill + s.seconds.draft + s.seconds.verify);
  BOOST_TEST(s.seconds.bookkeeping() >= 0.0);
}

// --- bad input: a clear status, the tokens committed so far kept, the decoder usable after -------

namespace {
template <class Decoder>
void check_usable_after(Decoder& dec, const std::vector<token_id>& prompt) {
  synthetic_target reference(world());
  generation_config c;
  c.max_new_tokens = 30;
  generation_result r;
  BOOST_TEST_REQUIRE(dec.generate(prompt, c, r) == status::success);
  BOOST_TEST(r.tokens == greedy_reference(reference, prompt, 30));
}

/// A decoder at b = 4 on one prompt, and that prompt's 64 greedy tokens.
struct one_prompt_decoder {
  synthetic_drafter d{world()};
  synthetic_target target{world()}, reference{world()};
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size> dec{d, target, {4}};
  const std::vector<token_id> prompt = prompts()[2];
  const std::vector<token_id> full = greedy_reference(reference, prompt, 64);
};
}  // namespace

BOOST_FIXTURE_TEST_CASE(cancel_from_the_token_stream, one_prompt_decoder) {
  // decoder.cancel() inside config.on_tokens ends the request there, on the first token as on a later
  // step, keeping what was streamed; the time spent in on_tokens is its own stage, not bookkeeping.
  for (const std::size_t after : {std::size_t{1}, std::size_t{20}}) {
    generation_config c;
    c.max_new_tokens = 64;
    std::size_t seen = 0;
    int calls = 0;
    c.on_tokens = [&](std::span<const token_id> piece) {
      seen += piece.size();
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (seen >= after) BOOST_TEST((dec.cancel() == status::cancelled));
    };
    generation_result r;
    BOOST_TEST((dec.generate(prompt, c, r) == status::cancelled));
    BOOST_TEST(r.failed_stage == "cancel");
    BOOST_TEST(r.tokens.size() == seen);
    BOOST_TEST(r.stats.generated == static_cast<std::int64_t>(seen));
    BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), full.begin()));
    BOOST_TEST(seen < full.size());
    BOOST_TEST(dec.done());
    BOOST_TEST((dec.step() == status::cancelled));
    BOOST_TEST(r.stats.seconds.streaming >= 2e-3 * calls);
    BOOST_TEST(r.stats.seconds.total >= r.stats.seconds.streaming);
  }
  check_usable_after(dec, prompt);
}

BOOST_FIXTURE_TEST_CASE(the_chunk_that_completes_a_request_cannot_cancel_it, one_prompt_decoder) {
  // Requests that end on their first token (max_new_tokens 1), on a later step's chunk (the cap) or on a
  // stop token: the last chunk reaches on_tokens after the request has ended, so a cancel there changes
  // nothing, while every chunk before it is still cancellable.
  const token_id stop = full[30];
  const auto stop_at = static_cast<std::size_t>(std::find(full.begin(), full.end(), stop) - full.begin()) + 1;
  for (const int max_new : {1, 40, 64}) {
    generation_config c;
    c.max_new_tokens = max_new;
    if (max_new == 64) c.stop_tokens = {stop};
    const std::size_t expected = max_new == 64 ? stop_at : static_cast<std::size_t>(max_new);
    std::size_t seen = 0;
    std::vector<status> answers;
    c.on_tokens = [&](std::span<const token_id> piece) {
      seen += piece.size();
      answers.push_back(seen == expected ? dec.cancel() : status::success);
    };
    generation_result r;
    BOOST_TEST((dec.generate(prompt, c, r) == status::success));
    BOOST_TEST(r.tokens.size() == expected);
    BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), full.begin()));
    BOOST_TEST_REQUIRE(!answers.empty());
    BOOST_TEST((answers.back() == status::invalid_argument));
    // A callback that throws on that chunk: the exception reaches the caller, the request stays complete.
    c.on_tokens = [&](std::span<const token_id> piece) {
      if (piece.data() + piece.size() == r.tokens.data() + expected) throw std::runtime_error("the client left");
    };
    BOOST_CHECK_THROW(dec.generate(prompt, c, r), std::runtime_error);
    BOOST_TEST((r.error == status::success));
    BOOST_TEST(r.tokens.size() == expected);
  }
}

BOOST_FIXTURE_TEST_CASE(a_callback_that_throws_ends_its_request, one_prompt_decoder) {
  // An exception from on_tokens or process_logits reaches the caller; the request has ended with what it
  // committed (cancelled, or model_error), and the decoder decodes the next request as plain greedy does.
  for (const std::size_t after : {std::size_t{1}, std::size_t{20}}) {
    generation_config c;
    c.max_new_tokens = 64;
    std::size_t seen = 0;
    c.on_tokens = [&](std::span<const token_id> piece) {
      seen += piece.size();
      if (seen >= after) throw std::runtime_error("the client left");
    };
    generation_result r;
    BOOST_CHECK_THROW(dec.generate(prompt, c, r), std::runtime_error);
    BOOST_TEST((r.error == status::cancelled));
    BOOST_TEST(r.failed_stage == "cancel");
    BOOST_TEST(r.tokens.size() == seen);
    BOOST_TEST(r.stats.generated == static_cast<std::int64_t>(seen));
    BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), full.begin()));
    BOOST_TEST(dec.done());
    check_usable_after(dec, prompt);
  }
  // process_logits: the synthetic drafter calls it too, so it throws inside a draft or on the rule's rows,
  // as the count falls; either way the request has ended.
  for (const int throw_at : {1, 2, 9, 10, 11, 12}) {
    generation_config c;
    c.max_new_tokens = 64;
    int rows = 0;
    c.process_logits = [&](std::span<const token_id>, std::span<float>) {
      if (++rows == throw_at) throw std::runtime_error("a broken processor");
    };
    generation_result r;
    BOOST_CHECK_THROW(dec.generate(prompt, c, r), std::runtime_error);
    BOOST_TEST((r.error == status::model_error));
    BOOST_TEST((r.failed_stage == "accept" || r.failed_stage == "draft"));
    BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), full.begin()));
    BOOST_TEST(dec.done());
    check_usable_after(dec, prompt);
  }
}

namespace {
/// The synthetic target, throwing at the `at`-th call (from 0) of the method named by `fail_in`.
struct flaky_target : synthetic_target {
  using synthetic_target::synthetic_target;
  std::string fail_in;
  int at = 0, calls = 0;
  void maybe_throw(const char* method) {
    if (fail_in == method && calls++ == at) throw std::runtime_error(method);
  }
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
    maybe_throw("prefill");
    return synthetic_target::prefill(p, logits);
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    maybe_throw("score");
    return synthetic_target::score(block, logits);
  }
  status commit(int n) {
    maybe_throw("commit");
    return synthetic_target::commit(n);
  }
};
/// b = 4 at every step, throwing at the `at`-th call of choose or next, as `fail_in` says.
struct flaky_policy {
  std::string fail_in;
  int at = 0, calls = 0;
  void maybe_throw(const char* method) {
    if (fail_in == method && calls++ == at) throw std::runtime_error(method);
  }
  [[nodiscard]] int max_block_size() const { return 4; }
  block_size_choice choose(const request_features&) { return maybe_throw("choose"), block_size_choice{4, false}; }
  int next(const step_record&) { return maybe_throw("next"), 4; }
};
static_assert(per_step_block_size_policy<flaky_policy>);
}  // namespace

BOOST_AUTO_TEST_CASE(a_model_or_policy_that_throws_ends_its_request) {
  // Wherever the target or the policy throws, the request ends there (model_error, the stage of the call)
  // with the tokens committed before, the exception reaches the caller, and the decoder goes on.
  synthetic_drafter d(world());
  flaky_target target(world());
  synthetic_target reference(world());
  speculative_decoder<synthetic_drafter, flaky_target, flaky_policy> dec(d, target);
  const std::vector<token_id> prompt = prompts()[2];
  const std::vector<token_id> full = greedy_reference(reference, prompt, 64);
  const std::vector<std::tuple<std::string, int, std::string>> cases{
      {"prefill", 0, "prefill"}, {"score", 3, "verify"}, {"commit", 3, "commit"}, {"choose", 0, "policy"}, {"next", 3, "policy"}};
  for (const auto& [method, at, stage] : cases) {
    BOOST_TEST_CONTEXT(method) {
      std::string& fail_in = method == "choose" || method == "next" ? dec.policy().fail_in : target.fail_in;
      fail_in = method;
      target.calls = dec.policy().calls = 0;
      target.at = dec.policy().at = at;
      generation_config c;
      c.max_new_tokens = 64;
      generation_result r;
      BOOST_CHECK_THROW(dec.generate(prompt, c, r), std::runtime_error);
      BOOST_TEST((r.error == status::model_error));
      BOOST_TEST(r.failed_stage == stage);
      BOOST_TEST(r.tokens.size() < full.size());
      BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), full.begin()));
      BOOST_TEST(dec.done());
      fail_in.clear();
      check_usable_after(dec, prompt);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_request_that_ends_on_its_first_token_never_starts_the_drafter) {
  // max_new_tokens = 1: the prefill's token is the whole output, so a drafter that would fail to start
  // (a prompt longer than it takes, say) does not fail the request.
  struct unstartable_drafter : random_drafter {
    using random_drafter::random_drafter;
    status begin(std::span<const token_id>) { return status::invalid_argument; }
  };
  synthetic_target target(world()), reference(world());
  unstartable_drafter d(97);
  speculative_decoder<unstartable_drafter, synthetic_target, runtime_block_size> dec(d, target, {4});
  generation_config c;
  c.max_new_tokens = 1;
  generation_result r;
  BOOST_TEST((dec.generate(prompts()[0], c, r) == status::success));
  BOOST_TEST(r.tokens == greedy_reference(reference, prompts()[0], 1));
  c.max_new_tokens = 2;  // a step follows: the drafter's failure is the request's
  BOOST_TEST((dec.generate(prompts()[0], c, r) == status::invalid_argument));
  BOOST_TEST(r.failed_stage == "draft");
}

BOOST_AUTO_TEST_CASE(bad_block_sizes) {
  synthetic_drafter d(world(), 31);
  synthetic_target target(world());
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size> dec(d, target, {0});
  generation_result r;
  BOOST_TEST((dec.generate(prompts()[0], {}, r) == status::invalid_block_size));
  BOOST_TEST(r.failed_stage == "policy");
  BOOST_TEST(r.error == status::invalid_block_size);
  dec.policy().size = 33;  // above the drafter's 31 rows + 1
  BOOST_TEST((dec.generate(prompts()[0], {}, r) == status::invalid_block_size));
  dec.policy().size = 32;
  check_usable_after(dec, prompts()[0]);
  // Above block_size_limit: refused on every backend before the prefill.
  synthetic_drafter many_rows(world(), 300);
  speculative_decoder<synthetic_drafter, synthetic_target, runtime_block_size> large(many_rows, target, {block_size_limit + 1});
  BOOST_TEST((large.generate(prompts()[0], {}, r) == status::invalid_block_size));
  BOOST_TEST(r.failed_stage == "policy");
  large.policy().size = std::numeric_limits<int>::max();  // refused, not allocated for
  BOOST_TEST((large.generate(prompts()[0], {}, r) == status::invalid_block_size));
  BOOST_TEST(r.stats.steps_by_block.size() <= static_cast<std::size_t>(block_size_limit) + 1);
  large.policy().size = block_size_limit;
  check_usable_after(large, prompts()[0]);

  struct lying_policy {  // chooses above its own maximum
    int max_block_size() const { return 8; }
    block_size_choice choose(const request_features&) const { return {9, false}; }
  };
  speculative_decoder<synthetic_drafter, synthetic_target, lying_policy> liar(d, target);
  BOOST_TEST((liar.generate(prompts()[0], {}, r) == status::invalid_block_size));

  struct lying_per_step_policy {  // a valid first size, then one above its maximum after step 2
    int max_block_size() const { return 8; }
    block_size_choice choose(const request_features&) const { return {8, false}; }
    int next(const step_record& s) const { return s.step < 2 ? 8 : 9; }
  };
  speculative_decoder<synthetic_drafter, synthetic_target, lying_per_step_policy> late_liar(d, target);
  generation_config c;
  c.max_new_tokens = 200;
  BOOST_TEST((late_liar.generate(prompts()[0], c, r) == status::invalid_block_size));
  BOOST_TEST(r.failed_stage == "policy");
  BOOST_TEST(r.stats.steps == 3);  // the failing decision comes after its step: that step's tokens are kept
  synthetic_target reference(world());
  const auto expected = greedy_reference(reference, prompts()[0], static_cast<int>(r.tokens.size()));
  BOOST_TEST(r.tokens == expected);
  BOOST_TEST(r.tokens.size() > 3u);

  struct wide_per_step_policy {  // may move to 40, more than the drafter's 31 rows + 1
    int max_block_size() const { return 40; }
    block_size_choice choose(const request_features&) const { return {8, false}; }
    int next(const step_record&) const { return 8; }
  };
  speculative_decoder<synthetic_drafter, synthetic_target, wide_per_step_policy> wide(d, target);
  BOOST_TEST((wide.generate(prompts()[0], c, r) == status::invalid_block_size));
  BOOST_TEST(r.failed_stage == "policy");
  BOOST_TEST(r.stats.steps == 0);  // refused at the start, not when it first moves above 32
}

BOOST_AUTO_TEST_CASE(bad_requests) {
  synthetic_drafter d(world());
  synthetic_target target(world());
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> dec(d, target);
  generation_result r;
  BOOST_TEST((dec.generate({}, {}, r) == status::empty_prompt));
  BOOST_TEST(r.failed_stage == "input");
  BOOST_TEST(r.stats.target_calls() == 0);  // refused before the prefill
  generation_config c;
  c.temperature = -0.5f;
  BOOST_TEST((dec.generate(prompts()[0], c, r) == status::invalid_temperature));
  c.temperature = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST((dec.generate(prompts()[0], c, r) == status::invalid_temperature));
  const std::vector<token_id> out_of_vocab = {1, 2, 97};
  BOOST_TEST((dec.generate(out_of_vocab, {}, r) == status::invalid_token));
  c = {};
  c.max_new_tokens = -1;
  BOOST_TEST((dec.generate(prompts()[0], c, r) == status::invalid_argument));
  c.max_new_tokens = 0;  // nothing to generate: no prefill either
  BOOST_TEST((dec.generate(prompts()[0], c, r) == status::success));
  BOOST_TEST(r.tokens.empty());
  BOOST_TEST(r.stats.target_calls() == 0);
  check_usable_after(dec, prompts()[0]);

  synthetic_params other = small_world_params();
  other.vocab = 98;
  const synthetic_world other_world(other);
  synthetic_drafter mismatched(other_world);
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> bad(mismatched, target);
  BOOST_TEST((bad.generate(prompts()[0], {}, r) == status::vocab_mismatch));
  BOOST_TEST(to_string(status::vocab_mismatch).find("vocab_size") != std::string_view::npos);
}

BOOST_AUTO_TEST_CASE(non_finite_logits_keep_committed_tokens) {
  using poisoned = nan_injecting_verifier<synthetic_target>;
  synthetic_drafter d(world());
  poisoned target(synthetic_target(world()), 3);
  speculative_decoder<synthetic_drafter, poisoned, fixed_block_size<8>> dec(d, target);
  generation_config c;
  c.max_new_tokens = 100;
  generation_result r;
  BOOST_TEST((dec.generate(prompts()[2], c, r) == status::non_finite_logits));
  BOOST_TEST(r.failed_stage == "accept");
  synthetic_target reference(world());
  const auto expected = greedy_reference(reference, prompts()[2], 100);
  BOOST_TEST_REQUIRE(r.tokens.size() >= 4u);  // the first token and three steps
  BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), expected.begin()));
  BOOST_TEST(r.stats.steps == 3);
  // The next request on the same decoder and models is poisoned again at its 4th step only
  // when it gets that far: a short one succeeds.
  c.max_new_tokens = 3;
  BOOST_TEST((dec.generate(prompts()[2], c, r) == status::success));
  BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), expected.begin()));
}

// --- context features: the decoder wires the verifier's rows into the drafter ----------------------

namespace {
/// A verifier whose context feature of a position is the token at that position.
class featured_target : public synthetic_target {
 public:
  using synthetic_target::synthetic_target;
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
    features_.assign(p.begin(), p.end());
    return synthetic_target::prefill(p, logits);
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    features_.assign(block.begin(), block.end());
    return synthetic_target::score(block, logits);
  }
  matrix_view<const float> context_features() const {
    return {features_.data(), static_cast<std::int64_t>(features_.size()), 1};
  }

 private:
  std::vector<float> features_;
};

/// Checks that the context rows it receives are exactly the committed tokens but the anchor.
class context_checking_drafter : public synthetic_drafter {
 public:
  using synthetic_drafter::synthetic_drafter;
  status begin(std::span<const token_id> p) {
    seen_.clear();
    return synthetic_drafter::begin(p);
  }
  status append_context(matrix_view<const float> rows) {
    for (std::int64_t i = 0; i < rows.rows; ++i) seen_.push_back(static_cast<token_id>(rows.row(i)[0]));
    return status::success;
  }
  status draft(const draft_request& r, std::span<token_id> out) {
    const auto expected = r.context.first(r.context.size() - 1);
    if (!std::equal(expected.begin(), expected.end(), seen_.begin(), seen_.end())) ++mismatches;
    return synthetic_drafter::draft(r, out);
  }
  int mismatches = 0;

 private:
  std::vector<token_id> seen_;
};
}  // namespace

static_assert(verifier_with_context_features<featured_target>);
static_assert(drafter_with_context<context_checking_drafter>);

BOOST_AUTO_TEST_CASE(context_features_cover_exactly_the_committed_positions) {
  context_checking_drafter d(world());
  featured_target target(world());
  speculative_decoder<context_checking_drafter, featured_target, fixed_block_size<6>> dec(d, target);
  generation_config c;
  c.max_new_tokens = 80;
  generation_result r;
  for (const auto& p : prompts()) BOOST_TEST_REQUIRE(dec.generate(p, c, r) == status::success);
  BOOST_TEST(d.mismatches == 0);
}

// --- prompt lookup --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(lookup_drafter_proposes_the_continuation_of_the_longest_match) {
  static_assert(drafter_with_probabilities<lookup_drafter>);
  lookup_drafter d(100, 3, 1);
  const std::vector<token_id> ctx = {1, 2, 3, 4, 5, 9, 2, 3};
  std::vector<token_id> out(4);
  BOOST_TEST_REQUIRE((d.draft({ctx, 5, 0.0f, {}}, out) == status::success));
  BOOST_TEST(out == (std::vector<token_id>{4, 5, 9, 2}));  // "2 3" occurred before, followed by 4 5 9 2
  std::vector<float> q(4 * 100);
  BOOST_TEST_REQUIRE((d.draft({ctx, 5, 0.0f, {}}, out, {q.data(), 4, 100}) == status::success));
  BOOST_TEST(q[0 * 100 + 4] == 1.0f);
  BOOST_TEST(std::accumulate(q.begin(), q.end(), 0.0f) == 4.0f);
  const std::vector<token_id> single = {7};
  BOOST_TEST_REQUIRE((d.draft({single, 3, 0.0f, {}}, out) == status::success));  // no earlier occurrence
  BOOST_TEST(out[0] == 7);
}

BOOST_DATA_TEST_CASE(greedy_equal_lookup_drafter, bdata::make({2, 8, 16}), b) {
  lookup_drafter d(97);
  check_greedy_equal(d, runtime_block_size{b}, 90);
}

// --- what the decoder checks before it trusts a verifier's rows, a drafter's tokens or a rule's decision ---

namespace {
/// Passes the inner verifier's rows on with another row stride: on the prefill row and on every score call
/// from `from_call` (0-based) on. A stride >= cols gets padded copies (NaN padding, which no rule may read);
/// a smaller one views the same data with that stride.
template <class Inner>
class restriding_verifier {
 public:
  restriding_verifier(Inner inner, std::int64_t stride, bool prefill, int from_call)
      : inner_(std::move(inner)), stride_(stride), prefill_(prefill), from_(from_call) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
    calls_ = 0;
    const status s = inner_.prefill(p, logits);
    if (s == status::success && prefill_) logits = restride(logits);
    return s;
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    const status s = inner_.score(block, logits);
    if (s == status::success && calls_++ >= from_) logits = restride(logits);
    return s;
  }
  status commit(int n) { return inner_.commit(n); }

 private:
  matrix_view<const float> restride(const matrix_view<const float>& rows) {
    if (stride_ < rows.cols) return {rows.data, rows.rows, rows.cols, stride_};
    copy_.assign(static_cast<std::size_t>(rows.rows * stride_), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t j = 0; j < rows.rows; ++j)
      std::copy(rows.row(j).begin(), rows.row(j).end(), copy_.begin() + j * stride_);
    return {copy_.data(), rows.rows, rows.cols, stride_};
  }
  Inner inner_;
  std::int64_t stride_;
  bool prefill_;
  int from_;
  int calls_ = 0;
  std::vector<float> copy_;
};

/// Counts the blocks it is asked to score that hold a token outside the vocabulary.
class token_checking_target : public synthetic_target {
 public:
  using synthetic_target::synthetic_target;
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    for (const token_id t : block)
      if (t < 0 || t >= vocab_size()) {
        ++invalid_blocks;
        break;
      }
    return synthetic_target::score(block, logits);
  }
  int invalid_blocks = 0;
};

/// Wraps a drafter and replaces the last draft of its `at_call`-th block (0-based) by `token`.
template <class Inner>
class bad_token_drafter {
 public:
  bad_token_drafter(Inner inner, int at_call, token_id token) : inner_(std::move(inner)), at_(at_call), token_(token) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  int max_draft_rows() const { return inner_.max_draft_rows(); }
  status begin(std::span<const token_id> p) {
    calls_ = 0;
    return inner_.begin(p);
  }
  status commit(int n) { return inner_.commit(n); }
  status draft(const draft_request& r, std::span<token_id> out) {
    if (const status s = inner_.draft(r, out); s != status::success) return s;
    if (calls_++ == at_ && !out.empty()) out.back() = token_;
    return status::success;
  }

 private:
  Inner inner_;
  int at_;
  token_id token_;
  int calls_ = 0;
};

/// A user's rule (acceptance_op is specialised below): greedy match, then `edit` rewrites the decision on
/// the `at_call`-th block (0-based).
struct scripted_rule {
  static constexpr bool needs_draft_probabilities = false;
  static constexpr std::string_view name = "scripted";
  static inline int calls = 0, at_call = -1;
  static inline std::function<void(acceptance_result&, int b)> edit;
};

/// Chooses 4 of at most 8: a rule that claims a fifth accepted draft stays inside the decoder's buffers.
struct four_of_eight {
  int max_block_size() const { return 8; }
  block_size_choice choose(const request_features&) const { return {4, false}; }
};
}  // namespace

template <>
struct blockpilot::acceptance_op<scripted_rule, blockpilot::cpu_backend> {
  static constexpr std::size_t workspace_size(int, std::int64_t) { return 0; }
  [[nodiscard]] static status run(const acceptance_input& in, std::span<std::byte> workspace, acceptance_result& out) {
    if (const status s = acceptance_op<greedy_match, cpu_backend>::run(in, workspace, out); s != status::success) return s;
    if (scripted_rule::calls++ == scripted_rule::at_call) scripted_rule::edit(out, static_cast<int>(in.block.size()));
    return status::success;
  }
};
static_assert(acceptance_rule<scripted_rule>);

BOOST_AUTO_TEST_CASE(rows_with_a_row_stride_below_cols_are_refused) {
  using restrided = restriding_verifier<synthetic_target>;
  synthetic_drafter d(world());
  synthetic_target reference(world());
  const auto p = prompts()[4];
  const auto expected = greedy_reference(reference, p, 60);
  generation_config c;
  c.max_new_tokens = 60;
  generation_result r;
  {  // Padded rows (a stride above cols) are read as they are.
    restrided target(synthetic_target(world()), 97 + 5, true, 0);
    speculative_decoder<synthetic_drafter, restrided, fixed_block_size<8>> dec(d, target);
    BOOST_TEST_REQUIRE(dec.generate(p, c, r) == status::success);
    BOOST_TEST(r.tokens == expected);
  }
  for (const std::int64_t stride : {0, 96}) {
    BOOST_TEST_CONTEXT("row_stride " << stride) {
      // From the third score call: that step fails at "verify" and the tokens before it stay.
      restrided late(synthetic_target(world()), stride, false, 2);
      speculative_decoder<synthetic_drafter, restrided, fixed_block_size<8>> dec(d, late);
      BOOST_TEST((dec.generate(p, c, r) == status::model_error));
      BOOST_TEST(r.failed_stage == "verify");
      BOOST_TEST(r.stats.steps == 2);
      BOOST_TEST_REQUIRE(r.tokens.size() >= 3u);
      BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), expected.begin()));
      // On the prefill row: nothing is generated.
      restrided early(synthetic_target(world()), stride, true, INT_MAX);
      speculative_decoder<synthetic_drafter, restrided, fixed_block_size<8>> first(d, early);
      BOOST_TEST((first.generate(p, c, r) == status::model_error));
      BOOST_TEST(r.failed_stage == "prefill");
      BOOST_TEST(r.tokens.empty());
    }
  }
}

BOOST_AUTO_TEST_CASE(drafts_outside_the_vocabulary_never_reach_the_verifier) {
  synthetic_target reference(world());
  const auto p = prompts()[5];
  const auto expected = greedy_reference(reference, p, 80);
  for (const token_id bad : {97, -1, INT_MAX}) {
    BOOST_TEST_CONTEXT("draft " << bad) {
      bad_token_drafter<synthetic_drafter> d(synthetic_drafter(world()), 3, bad);
      token_checking_target target(world());
      speculative_decoder<bad_token_drafter<synthetic_drafter>, token_checking_target, fixed_block_size<8>> dec(d, target);
      generation_config c;
      c.max_new_tokens = 80;
      generation_result r;
      BOOST_TEST((dec.generate(p, c, r) == status::invalid_token));
      BOOST_TEST(r.failed_stage == "draft");
      BOOST_TEST(target.invalid_blocks == 0);
      BOOST_TEST(r.stats.steps == 3);
      BOOST_TEST_REQUIRE(r.tokens.size() >= 4u);
      BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), expected.begin()));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_rule_decision_out_of_range_ends_the_request) {
  synthetic_target reference(world());
  const auto p = prompts()[0];
  const auto expected = greedy_reference(reference, p, 60);
  struct bad_decision {
    const char* what;
    std::function<void(acceptance_result&, int)> edit;
    status error;
  };
  const std::vector<bad_decision> cases = {
      {"accepted = b", [](acceptance_result& a, int b) { a.accepted = b; }, status::invalid_argument},
      {"accepted = -1", [](acceptance_result& a, int) { a.accepted = -1; }, status::invalid_argument},
      {"bonus = vocab", [](acceptance_result& a, int) { a.bonus = 97; }, status::invalid_token},
      {"bonus = -1", [](acceptance_result& a, int) { a.bonus = -1; }, status::invalid_token},
  };
  for (const bad_decision& bad : cases) {
    BOOST_TEST_CONTEXT(bad.what) {
      synthetic_drafter d(world());
      synthetic_target target(world());
      speculative_decoder<synthetic_drafter, synthetic_target, four_of_eight, scripted_rule> dec(d, target);
      scripted_rule::calls = 0;
      scripted_rule::at_call = 2;
      scripted_rule::edit = bad.edit;
      generation_config c;
      c.max_new_tokens = 60;
      generation_result r;
      BOOST_TEST((dec.generate(p, c, r) == bad.error));
      BOOST_TEST(r.failed_stage == "accept");
      BOOST_TEST(r.stats.steps == 2);  // the failing step commits nothing
      BOOST_TEST_REQUIRE(r.tokens.size() >= 3u);
      BOOST_TEST(std::equal(r.tokens.begin(), r.tokens.end(), expected.begin()));
      scripted_rule::at_call = -1;
      check_usable_after(dec, p);
    }
  }
}

namespace {
/// Caps the address space this process may grow by to `headroom` bytes while it lives, so that an oversized
/// allocation throws std::bad_alloc whatever the machine's memory. Linux only; not under AddressSanitizer,
/// whose shadow memory is reserved up front.
class address_space_cap {
 public:
  explicit address_space_cap([[maybe_unused]] std::size_t headroom) {
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__) && !BLOCKPILOT_TEST_HAS_ASAN
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    if (!(statm >> pages) || getrlimit(RLIMIT_AS, &saved_) != 0) return;
    rlimit cap = saved_;
    cap.rlim_cur = static_cast<rlim_t>(pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) + headroom);
    if (saved_.rlim_cur != RLIM_INFINITY && cap.rlim_cur >= saved_.rlim_cur) return;
    active_ = setrlimit(RLIMIT_AS, &cap) == 0;
#endif
  }
  ~address_space_cap() {
#if defined(__linux__)
    if (active_) setrlimit(RLIMIT_AS, &saved_);
#endif
  }
  address_space_cap(const address_space_cap&) = delete;
  address_space_cap& operator=(const address_space_cap&) = delete;
  /// Whether the cap holds (else an oversized allocation would really be made).
  [[nodiscard]] bool active() const { return active_; }

 private:
#if defined(__linux__)
  rlimit saved_{};
#endif
  bool active_ = false;
};
}  // namespace

BOOST_AUTO_TEST_CASE(until_a_stop_token_with_no_length_cap) {
  // max_new_tokens = INT_MAX ("until a stop token") reserves no 8 GiB of tokens up front.
  synthetic_drafter d(world());
  synthetic_target target(world());
  synthetic_target reference(world());
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> dec(d, target);
  const auto p = prompts()[3];
  const auto full = greedy_reference(reference, p, 200);
  // The stop token: the one whose first occurrence comes last.
  std::size_t cut = 0;
  for (std::size_t i = 0; i < full.size(); ++i)
    if (std::find(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(i), full[i]) == full.begin() + static_cast<std::ptrdiff_t>(i))
      cut = i;
  BOOST_TEST_REQUIRE(cut > 10u);
  generation_config c;
  c.max_new_tokens = INT_MAX;
  c.stop_tokens = {full[cut]};
  generation_result r;
  {
    const address_space_cap cap(std::size_t{1} << 30);
    BOOST_TEST_REQUIRE(dec.generate(p, c, r) == status::success);
  }
  BOOST_TEST(r.tokens == std::vector<token_id>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut) + 1));
  // Longer outputs than the decoder reserves for grow its buffers as they go.
  check_greedy_equal(d, fixed_block_size<16>{}, 9000);
  check_greedy_equal(d, runtime_block_size{1}, 9000);
}

namespace {
/// A model that reports the vocabulary `*vocab` instead of its own.
template <class Inner>
struct reporting_vocab : Inner {
  const std::int64_t* vocab;
  reporting_vocab(Inner inner, const std::int64_t* v) : Inner(std::move(inner)), vocab(v) {}
  std::int64_t vocab_size() const { return *vocab; }
};

/// A verifier that counts its prefills.
template <class Inner>
struct counting_prefills : Inner {
  using Inner::Inner;
  int prefills = 0;
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) {
    ++prefills;
    return Inner::prefill(p, logits);
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(buffers_that_cannot_be_allocated_give_out_of_memory) {
  // A vocabulary whose buffers do not fit in what memory is left: the request ends before the prefill
  // with out_of_memory, and the decoder serves the next request.
  std::int64_t vocab = detail::max_sampling_vocab;  // 32 MiB of sampling weights alone
  reporting_vocab<synthetic_drafter> d(synthetic_drafter(world()), &vocab);
  reporting_vocab<synthetic_target> target(synthetic_target(world()), &vocab);
  speculative_decoder<reporting_vocab<synthetic_drafter>, reporting_vocab<synthetic_target>, fixed_block_size<16>> dec(d, target);
  generation_result r;
  {
    const address_space_cap cap(std::size_t{4} << 20);
    if (!cap.active()) {  // the allocation would be made: nothing to test here
      BOOST_TEST_MESSAGE("skipped: no address-space cap here (under a sanitizer, or the limit cannot be lowered)");
      return;
    }
    BOOST_TEST((dec.generate(prompts()[0], greedy(20), r) == status::out_of_memory));
  }
  BOOST_TEST(r.tokens.empty());
  BOOST_TEST(r.failed_stage == "accept");
  vocab = target.synthetic_target::vocab_size();
  check_usable_after(dec, prompts()[0]);
}

BOOST_AUTO_TEST_CASE(a_vocabulary_the_rules_cannot_take_fails_before_the_prefill) {
  // Wider than 2^22: refused when the buffers are sized, as the CUDA stage does, before the verifier runs.
  std::int64_t vocab = detail::max_sampling_vocab + 1;
  reporting_vocab<synthetic_drafter> d(synthetic_drafter(world()), &vocab);
  counting_prefills<reporting_vocab<synthetic_target>> target(synthetic_target(world()), &vocab);
  speculative_decoder<reporting_vocab<synthetic_drafter>, decltype(target), fixed_block_size<4>> dec(d, target);
  generation_result r;
  BOOST_TEST((dec.generate(prompts()[0], greedy(1), r) == status::invalid_argument));
  BOOST_TEST(r.failed_stage == "accept");
  BOOST_TEST(r.tokens.empty());
  BOOST_TEST(dec.verifier().prefills == 0);
  vocab = target.synthetic_target::vocab_size();
  check_usable_after(dec, prompts()[0]);
}

namespace {
/// A verifier whose rows after a block's first get `delta` added to token 0's logit (rows alone are
/// the inner verifier's), and that fails to score blocks of `failing_size`.
template <class Inner>
class block_dependent_verifier {
 public:
  block_dependent_verifier(Inner inner, float delta, int failing_size = 0)
      : inner_(std::move(inner)), delta_(delta), failing_(failing_size) {}
  std::int64_t vocab_size() const { return inner_.vocab_size(); }
  status prefill(std::span<const token_id> p, matrix_view<const float>& logits) { return inner_.prefill(p, logits); }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    if (static_cast<int>(block.size()) == failing_) return status::model_error;
    if (const status s = inner_.score(block, logits); s != status::success) return s;
    copy_.assign(logits.data, logits.data + logits.rows * logits.cols);
    for (std::int64_t i = 1; i < logits.rows; ++i) copy_[static_cast<std::size_t>(i * logits.cols)] += delta_;
    logits = {copy_.data(), logits.rows, logits.cols};
    return status::success;
  }
  status commit(int n) { return inner_.commit(n); }

 private:
  Inner inner_;
  float delta_;
  int failing_;
  std::vector<float> copy_;
};
}  // namespace

BOOST_AUTO_TEST_CASE(block_invariance_of_an_exact_verifier) {
  synthetic_target target(world());
  const auto p = prompts()[1];
  const auto continuation = greedy_reference(target, p, 40);
  BOOST_TEST_REQUIRE(continuation.size() == 40u);
  const int sizes[] = {1, 2, 3, 8, 64};
  const auto checked = check_block_invariance(target, p, continuation, sizes);
  BOOST_TEST_REQUIRE(checked.size() == 5u);
  for (std::size_t k = 0; k < checked.size(); ++k) {
    BOOST_TEST(checked[k].block_size == sizes[k]);
    BOOST_TEST(checked[k].rows == 39);
    BOOST_TEST(checked[k].exact());
    BOOST_TEST(checked[k].argmax_changes == 0);
  }
}

BOOST_AUTO_TEST_CASE(block_invariance_with_masked_tokens) {
  // Rows that mask a token (-inf) alike alone and in a block are the same rows.
  struct masking_verifier : synthetic_target {
    using synthetic_target::synthetic_target;
    std::vector<float> copy;
    status score(std::span<const token_id> block, matrix_view<const float>& logits) {
      if (const status s = synthetic_target::score(block, logits); s != status::success) return s;
      copy.assign(logits.data, logits.data + logits.rows * logits.cols);
      for (std::int64_t i = 0; i < logits.rows; ++i)
        copy[static_cast<std::size_t>(i * logits.cols)] = -std::numeric_limits<float>::infinity();
      logits = {copy.data(), logits.rows, logits.cols};
      return status::success;
    }
  };
  masking_verifier target(world());
  const auto p = prompts()[1];
  const auto continuation = greedy_reference(target, p, 20);
  const int sizes[] = {1, 4};
  for (const auto& checked : check_block_invariance(target, p, continuation, sizes)) {
    BOOST_TEST(checked.exact());
    BOOST_TEST(checked.max_abs_difference == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(block_invariance_finds_rows_that_depend_on_the_block) {
  synthetic_target reference(world());
  const auto p = prompts()[2];
  const auto continuation = greedy_reference(reference, p, 41);
  const int sizes[] = {1, 2, 4};
  // A small shift: measured, no argmax moves.
  block_dependent_verifier<synthetic_target> slightly(synthetic_target(world()), 1e-3f);
  const auto small = check_block_invariance(slightly, p, continuation, sizes);
  BOOST_TEST(small[0].exact());
  for (std::size_t k = 1; k < small.size(); ++k) {
    BOOST_TEST(!small[k].exact());
    BOOST_TEST(small[k].max_abs_difference == 1e-3, boost::test_tools::tolerance(1e-3));
    BOOST_TEST(small[k].argmax_changes == 0);
  }
  // A large one moves the argmax of every row after a block's first whose token is not already 0.
  block_dependent_verifier<synthetic_target> strongly(synthetic_target(world()), 1e6f);
  const auto large = check_block_invariance(strongly, p, continuation, sizes);
  for (std::size_t k = 0; k < large.size(); ++k) {
    int expected = 0;
    for (int j = 0; j < 40; ++j) expected += j % sizes[k] != 0 && continuation[static_cast<std::size_t>(j) + 1] != 0;
    BOOST_TEST(large[k].argmax_changes == expected);
    BOOST_TEST(large[k].rows == 40);
  }
  BOOST_TEST(large[2].argmax_changes > 0);
  block_invariance both = small[2];  // two sequences' comparisons at one size, taken together
  both.add(large[2]);
  BOOST_TEST(both.rows == small[2].rows + large[2].rows);
  BOOST_TEST(both.argmax_changes == large[2].argmax_changes);
  BOOST_TEST(both.max_abs_difference == large[2].max_abs_difference);
  // What the check predicts: the decoder follows the rows it is given, and leaves plain greedy decoding.
  perfect_drafter<synthetic_target> d{synthetic_target(world())};
  speculative_decoder<perfect_drafter<synthetic_target>, block_dependent_verifier<synthetic_target>, runtime_block_size> dec(
      d, strongly, runtime_block_size{4});
  generation_result r;
  BOOST_TEST_REQUIRE(dec.generate(p, greedy(41), r) == status::success);
  BOOST_TEST(r.tokens != continuation);
}

BOOST_AUTO_TEST_CASE(block_invariance_counts_a_row_the_decoder_cannot_read) {
  // A NaN in the second score call of each pass: the row alone at position 1, the block row at position 4
  // (the first of the second block of 4). The greedy decoder fails on such a row: both count as changed.
  const auto p = prompts()[2];
  synthetic_target reference(world());
  const auto continuation = greedy_reference(reference, p, 12);
  nan_injecting_verifier<synthetic_target> target(synthetic_target(world()), 1);
  const int sizes[] = {1, 4};
  const auto checked = check_block_invariance(target, p, continuation, sizes);
  BOOST_TEST(checked[0].argmax_changes == 0);  // alone and in blocks of 1: the same NaN row
  BOOST_TEST(checked[1].argmax_changes == 2);
  BOOST_TEST(checked[1].max_abs_difference == std::numeric_limits<double>::infinity());
}

BOOST_AUTO_TEST_CASE(block_invariance_bad_inputs) {
  synthetic_target target(world());
  const auto p = prompts()[0];
  const auto continuation = greedy_reference(target, p, 12);
  const int sizes[] = {2};
  check_error([&] { (void)check_block_invariance(target, std::span<const token_id>{}, continuation, sizes); }, {"needs a prompt"});
  check_error([&] { (void)check_block_invariance(target, p, std::span(continuation).first(1), sizes); }, {"two continuation tokens"});
  const int zero[] = {2, 0};
  check_error([&] { (void)check_block_invariance(target, p, continuation, zero); }, {"at least 1"});
  block_dependent_verifier<synthetic_target> failing(synthetic_target(world()), 0.0f, 3);
  const int three[] = {1, 3};
  check_error([&] { (void)check_block_invariance(failing, p, continuation, three); }, {"score a block of 3", "reported an error"});
  // Rows narrower than the vocabulary, alone or in a block: refused, never copied.
  struct narrow_rows : synthetic_target {
    int narrow_at;
    narrow_rows(int at) : synthetic_target(world()), narrow_at(at) {}
    status score(std::span<const token_id> block, matrix_view<const float>& logits) {
      const status s = synthetic_target::score(block, logits);
      if (static_cast<int>(block.size()) == narrow_at) logits.cols -= 1;
      return s;
    }
  };
  for (const int at : {1, 2}) {
    narrow_rows narrow(at);
    check_error([&] { (void)check_block_invariance(narrow, p, continuation, sizes); }, {"rows of another shape"});
  }
}
