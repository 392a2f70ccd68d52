// The decode loop: exact equality with plain greedy decoding for every drafter, policy, block size,
// stop-token position and length; bad inputs give a clear status and lose nothing.
#define BOOST_TEST_MODULE decoder
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "blockpilot_workbench/models/lookup_drafter.hpp"
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
    c.stop_tokens = stop;
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
}  // namespace

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
}

BOOST_AUTO_TEST_CASE(bad_requests) {
  synthetic_drafter d(world());
  synthetic_target target(world());
  speculative_decoder<synthetic_drafter, synthetic_target, fixed_block_size<16>> dec(d, target);
  generation_result r;
  BOOST_TEST((dec.generate({}, {}, r) == status::empty_prompt));
  BOOST_TEST(r.failed_stage == "input");
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
