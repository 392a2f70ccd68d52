// Tests of models/early_exit_drafter.hpp on SmolLM2-135M (skipped when the GGUF is absent): the
// layers option of llama_verifier, full-depth drafts equal to the target's greedy continuation, the
// decode loop equal to plain greedy decoding, draft probabilities that are what sampling draws from,
// and clear errors for a bad L.
#define BOOST_TEST_MODULE early_exit
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/early_exit_drafter.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "support/check_error.hpp"
#include "support/smollm2.hpp"

namespace bp = blockpilot;
namespace bdata = boost::unit_test::data;
using blockpilot::testing::check_error;
using blockpilot::testing::smollm2_path;
using blockpilot::testing::smollm2_present;

namespace {

const bp::llama_model& model() { return blockpilot::testing::smollm2().model; }
std::vector<bp::token_id> chat(const char* message) { return blockpilot::testing::smollm2().tokenizer.encode_chat(message); }

const char* const messages[] = {"Write a short poem about the sea.",
                                "The man turned on the faucet. A: The toilet filled with water. B: Water flowed from the spout."};

bp::llama_verifier_options options(int layers = 0, int max_block = 64) {
  bp::llama_verifier_options o;
  o.max_positions = 1024;
  o.max_block = max_block;
  o.layers = layers;
  return o;
}

bp::early_exit_options drafter_options(int layers) {
  bp::early_exit_options o;
  o.layers = layers;
  o.max_positions = 1024;
  return o;
}

bp::token_id argmax(std::span<const float> row) {
  return static_cast<bp::token_id>(std::ranges::max_element(row) - row.begin());
}

/// Plain greedy decoding, one token per score call, ending after a stop token.
std::vector<bp::token_id> greedy_reference(bp::llama_verifier& v, std::span<const bp::token_id> prompt, int max_new,
                                           bp::token_id stop) {
  bp::matrix_view<const float> logits;
  BOOST_TEST_REQUIRE(v.prefill(prompt, logits) == bp::status::success);
  std::vector<bp::token_id> out = {argmax(logits.row(0))};
  while (static_cast<int>(out.size()) < max_new && out.back() != stop) {
    BOOST_TEST_REQUIRE(v.score(std::span(out).last(1), logits) == bp::status::success);
    BOOST_TEST_REQUIRE(v.commit(1) == bp::status::success);
    out.push_back(argmax(logits.row(0)));
  }
  return out;
}

/// softmax(row / T) in double.
std::vector<double> softmax(std::span<const float> row, double temperature) {
  const double top = *std::ranges::max_element(row);
  std::vector<double> p(row.size());
  double sum = 0;
  for (std::size_t i = 0; i < row.size(); ++i) sum += p[i] = std::exp((row[i] - top) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(smollm2, *boost::unit_test::precondition(smollm2_present))

BOOST_AUTO_TEST_CASE(bad_layers_are_clear_errors) {
  static_assert(bp::drafter_with_probabilities<bp::early_exit_drafter>);
  static_assert(!bp::drafter_with_context<bp::early_exit_drafter>);
  for (int layers : {0, -1, 31})
    check_error([&] { bp::early_exit_drafter d(model(), drafter_options(layers)); },
                {"early_exit_drafter", smollm2_path().string(), "option 'layers'", std::to_string(layers),
                 "[1, 30]"});
  check_error([&] { bp::llama_verifier v(model(), options(31)); }, {"option 'layers'", "31", "[0, 30]"});
  check_error([&] { bp::llama_verifier v(model(), options(-2)); }, {"option 'layers'", "-2"});
  auto o = options(4);
  o.feature_layers = {4};
  check_error([&] { bp::llama_verifier v(model(), o); }, {"option 'feature_layers'", "layer 4", "[0, 4)"});
  BOOST_TEST(bp::llama_verifier(model(), options(0)).options().layers == 30);
}

// The first L layers, the final norm and the head: the full model's residual stream after layer L-1,
// normed and projected, gives the early-exit logits.
BOOST_DATA_TEST_CASE(layers_option_is_the_exit_after_layer_l, bdata::make({1, 8, 29}), layers) {
  const auto prompt = chat(messages[0]);
  auto full_options = options();
  full_options.feature_layers = {layers - 1};
  bp::llama_verifier full(model(), full_options), early(model(), options(layers));
  bp::matrix_view<const float> logits;
  BOOST_TEST_REQUIRE(full.prefill(prompt, logits) == bp::status::success);
  const auto f = full.context_features();
  const auto& m = model();
  const int hidden = m.config().hidden;
  Eigen::RowVectorXf x = Eigen::Map<const Eigen::RowVectorXf>(f.row(f.rows - 1).data(), hidden);
  const float scale = 1.0f / std::sqrt(x.squaredNorm() / static_cast<float>(hidden) + m.config().rms_eps);
  const Eigen::RowVectorXf h = (x.array() * scale * m.output_norm().transpose().array()).matrix();
  BOOST_TEST_REQUIRE(early.prefill(prompt, logits) == bp::status::success);
  double worst = 0;
  Eigen::RowVectorXf w(hidden);
  for (std::int64_t i = 0; i < m.config().vocab; ++i) {
    m.output().row(i, w.data());  // the head row as fp32, whatever the storage
    const double head = h.dot(w);
    worst = std::max(worst, std::abs(double(logits.row(0)[static_cast<std::size_t>(i)]) - head) / std::max(1.0, std::abs(head)));
  }
  BOOST_TEST_MESSAGE("L = " << layers << ": max relative difference " << worst);
  BOOST_TEST(worst <= 1e-4);
}

// With every layer the draft model is the target: its greedy drafts are the target's greedy
// continuation, every draft is accepted (tau = b), and the decode equals plain greedy decoding.
BOOST_DATA_TEST_CASE(full_depth_drafts_are_the_greedy_continuation, bdata::make({2, 4, 8}), b) {
  const bp::token_id eos = blockpilot::testing::smollm2().tokenizer.eos_id();
  bp::llama_verifier target(model(), options()), reference(model(), options());
  bp::early_exit_drafter drafter(model(), drafter_options(30));
  bp::speculative_decoder<bp::early_exit_drafter, bp::llama_verifier, bp::runtime_block_size> decoder(
      drafter, target, bp::runtime_block_size{b});
  for (const char* message : messages) {
    BOOST_TEST_CONTEXT(message << ", b = " << b) {
      const auto prompt = chat(message);
      const auto greedy = greedy_reference(reference, prompt, 33, eos);
      BOOST_TEST_REQUIRE(drafter.begin(prompt) == bp::status::success);
      std::vector<bp::token_id> context = prompt;
      context.push_back(greedy[0]);
      std::vector<bp::token_id> drafts(static_cast<std::size_t>(b - 1));
      BOOST_TEST_REQUIRE(drafter.draft({context, b, 0.0f, {}}, drafts) == bp::status::success);
      const auto n = std::min(drafts.size(), greedy.size() - 1);
      BOOST_TEST(std::vector(drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(n)) ==
                     std::vector(greedy.begin() + 1, greedy.begin() + 1 + static_cast<std::ptrdiff_t>(n)),
                 boost::test_tools::per_element());

      bp::generation_config c;
      c.max_new_tokens = 33;
      c.stop_tokens = {eos};
      bp::generation_result r;
      BOOST_TEST_REQUIRE(decoder.generate(prompt, c, r) == bp::status::success);
      BOOST_TEST(r.tokens == greedy, boost::test_tools::per_element());
      BOOST_TEST(r.stats.accepted == r.stats.drafted);
      BOOST_TEST(r.stats.tau() == static_cast<double>(b));
    }
  }
}

// A shallow draft model disagrees often: rejections at every position crop its cache, and the output
// is still plain greedy decoding, token for token. The drafter serves several requests in a row.
BOOST_DATA_TEST_CASE(decode_equals_plain_greedy, bdata::make({2, 3, 5, 8}) ^ bdata::make({4, 12, 12, 4}), b, layers) {
  const bp::token_id eos = blockpilot::testing::smollm2().tokenizer.eos_id();
  bp::llama_verifier target(model(), options()), reference(model(), options());
  bp::early_exit_drafter drafter(model(), drafter_options(layers));
  bp::speculative_decoder<bp::early_exit_drafter, bp::llama_verifier, bp::runtime_block_size> decoder(
      drafter, target, bp::runtime_block_size{b});
  for (const char* message : messages) {
    BOOST_TEST_CONTEXT(message << ", b = " << b << ", L = " << layers) {
      const auto prompt = chat(message);
      bp::generation_config c;
      c.max_new_tokens = 24;
      c.stop_tokens = {eos};
      bp::generation_result r;
      BOOST_TEST_REQUIRE(decoder.generate(prompt, c, r) == bp::status::success);
      BOOST_TEST(r.tokens == greedy_reference(reference, prompt, 24, eos), boost::test_tools::per_element());
      BOOST_TEST_MESSAGE("L = " << layers << ", b = " << b << ": tau " << r.stats.tau());
      BOOST_TEST(r.stats.tau() >= 1.0);
      BOOST_TEST(drafter.cached() <= static_cast<std::int64_t>(prompt.size() + r.tokens.size()));
    }
  }
}

// One short request end to end (GGUF, tokenizer, forward passes, drafter, decoder, detokenizer),
// small enough to run under the sanitizers: CI runs the test cases labelled short_real instrumented.
BOOST_AUTO_TEST_CASE(short_request_end_to_end, *boost::unit_test::label("short_real")) {
  const auto& tokenizer = blockpilot::testing::smollm2().tokenizer;
  const bp::token_id eos = tokenizer.eos_id();
  const auto prompt = chat(messages[1]);
  BOOST_TEST(tokenizer.decode(prompt) == bp::bpe_tokenizer::apply_chat_template(messages[1]));
  bp::llama_verifier target(model(), options(0, 8)), reference(model(), options(0, 8));
  bp::early_exit_drafter drafter(model(), drafter_options(4));
  bp::speculative_decoder<bp::early_exit_drafter, bp::llama_verifier, bp::runtime_block_size> decoder(
      drafter, target, bp::runtime_block_size{3});
  bp::generation_config c;
  c.max_new_tokens = 6;
  c.stop_tokens = {eos};
  bp::generation_result r;
  BOOST_TEST_REQUIRE(decoder.generate(prompt, c, r) == bp::status::success);
  BOOST_TEST(r.tokens == greedy_reference(reference, prompt, 6, eos), boost::test_tools::per_element());
  BOOST_TEST(!tokenizer.decode(r.tokens).empty());
}

// q rows are distributions, equal to softmax(logits / T) of the draft model after the anchor and
// the previous drafts, and each draft is the inverse-CDF pick of its row at the step's Philox bits.
BOOST_AUTO_TEST_CASE(draft_probabilities_are_what_sampling_draws_from) {
  constexpr int layers = 6, b = 5;
  constexpr float temperature = 0.8f;
  const auto prompt = chat(messages[1]);
  const auto vocab = model().config().vocab;
  bp::early_exit_drafter drafter(model(), drafter_options(layers));
  bp::llama_verifier check(model(), options(layers));
  std::vector<bp::token_id> context = prompt;
  context.push_back(model().find_token("The"));
  std::vector<float> q(static_cast<std::size_t>((b - 1) * vocab));
  std::vector<bp::token_id> drafts(b - 1), again(b - 1);
  int distinct_first = 0;
  bp::token_id previous_first = -1;
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    const bp::philox_stream stream{seed, 3};
    BOOST_TEST_REQUIRE(drafter.begin(prompt) == bp::status::success);
    BOOST_TEST_REQUIRE(drafter.draft({context, b, temperature, stream}, drafts, {q.data(), b - 1, vocab}) ==
                       bp::status::success);
    BOOST_TEST_REQUIRE(drafter.commit(1) == bp::status::success);
    BOOST_TEST_REQUIRE(drafter.draft({context, b, temperature, stream}, again) == bp::status::success);
    BOOST_TEST(again == drafts, boost::test_tools::per_element());  // the same stream, the same drafts
    distinct_first += drafts[0] != previous_first;
    previous_first = drafts[0];

    // The same passes as the drafter's: the prompt, then the anchor and each draft one at a time.
    bp::matrix_view<const float> logits;
    BOOST_TEST_REQUIRE(check.prefill(prompt, logits) == bp::status::success);
    for (int j = 1; j < b; ++j) {
      const bp::token_id fed = j == 1 ? context.back() : drafts[static_cast<std::size_t>(j) - 2];
      BOOST_TEST_REQUIRE(check.score(std::span(&fed, 1), logits) == bp::status::success);
      BOOST_TEST_REQUIRE(check.commit(1) == bp::status::success);
      const std::span<const float> row(q.data() + (j - 1) * vocab, static_cast<std::size_t>(vocab));
      const auto p = softmax(logits.row(0), temperature);
      double sum = 0, worst = 0, below = 0;
      for (std::size_t v = 0; v < row.size(); ++v) {
        BOOST_TEST_REQUIRE(row[v] >= 0.0f);
        sum += row[v];
        worst = std::max(worst, std::abs(row[v] - p[v]));
        if (static_cast<bp::token_id>(v) < drafts[static_cast<std::size_t>(j) - 1]) below += row[v];
      }
      BOOST_TEST(std::abs(sum - 1.0) <= 1e-5);
      BOOST_TEST(worst <= 1e-5, "seed " << seed << " row " << j << ": max |q - softmax(l / T)| " << worst);
      const double qx = row[static_cast<std::size_t>(drafts[static_cast<std::size_t>(j) - 1])];
      BOOST_TEST(qx > 0.0);
      // The draft is the inverse-CDF pick at the stream's bits: its CDF interval holds u.
      const double u = static_cast<double>(stream.bits64(static_cast<std::uint32_t>(j), bp::random_domain::draft_sample)) *
                       0x1p-64;
      BOOST_TEST((u >= below - 1e-6 && u <= below + qx + 1e-6), "u " << u << " outside [" << below << ", " << below + qx << "]");
    }
  }
  BOOST_TEST(distinct_first >= 2);  // different seeds draw different tokens
}

// At T = 1 with rejection sampling (which reads q) and with sample-and-match, decoding runs, is
// reproducible from the seed, and commits at least one token per step.
BOOST_AUTO_TEST_CASE(sampled_decoding_is_reproducible) {
  const auto prompt = chat(messages[0]);
  bp::llama_verifier target(model(), options());
  bp::early_exit_drafter drafter(model(), drafter_options(8));
  bp::speculative_decoder<bp::early_exit_drafter, bp::llama_verifier, bp::runtime_block_size, bp::rejection_sampling>
      rejection(drafter, target, bp::runtime_block_size{4});
  bp::speculative_decoder<bp::early_exit_drafter, bp::llama_verifier, bp::runtime_block_size, bp::sample_and_match>
      match(drafter, target, bp::runtime_block_size{4});
  bp::generation_config c;
  c.max_new_tokens = 20;
  c.temperature = 1.0f;
  c.seed = 11;
  bp::generation_result first, second;
  BOOST_TEST_REQUIRE(rejection.generate(prompt, c, first) == bp::status::success);
  BOOST_TEST_REQUIRE(rejection.generate(prompt, c, second) == bp::status::success);
  BOOST_TEST(first.tokens == second.tokens, boost::test_tools::per_element());
  BOOST_TEST(first.stats.tau() >= 1.0);
  BOOST_TEST_MESSAGE("T = 1, L = 8, b = 4: rejection sampling tau " << first.stats.tau());
  BOOST_TEST_REQUIRE(match.generate(prompt, c, second) == bp::status::success);
  BOOST_TEST_MESSAGE("T = 1, L = 8, b = 4: sample-and-match tau " << second.stats.tau());
  BOOST_TEST(static_cast<int>(second.tokens.size()) == 20);
  BOOST_TEST(second.stats.tau() >= 1.0);
}

BOOST_AUTO_TEST_CASE(status_codes) {
  bp::early_exit_drafter drafter(model(), drafter_options(2));
  const auto prompt = chat(messages[0]);
  std::vector<bp::token_id> context = prompt, out(8);
  context.push_back(5);
  BOOST_TEST(drafter.commit(1) == bp::status::invalid_argument);  // nothing drafted
  BOOST_TEST_REQUIRE(drafter.begin(prompt) == bp::status::success);
  BOOST_TEST(drafter.cached() == static_cast<std::int64_t>(prompt.size()));
  BOOST_TEST(drafter.draft({context, 65, 0.0f, {}}, out) == bp::status::invalid_block_size);
  BOOST_TEST(drafter.draft({context, 10, 0.0f, {}}, out) == bp::status::invalid_block_size);  // out too short
  BOOST_TEST(drafter.draft({{}, 3, 0.0f, {}}, out) == bp::status::invalid_argument);
  std::vector<float> q(2 * 100);
  BOOST_TEST(drafter.draft({context, 3, 0.0f, {}}, out, {q.data(), 2, 100}) == bp::status::invalid_argument);
  BOOST_TEST_REQUIRE(drafter.draft({context, 4, 0.0f, {}}, out) == bp::status::success);
  BOOST_TEST(drafter.cached() == static_cast<std::int64_t>(context.size()) + 2);  // anchor and 2 drafts fed
  BOOST_TEST(drafter.commit(5) == bp::status::invalid_argument);
  BOOST_TEST(drafter.commit(2) == bp::status::success);
  BOOST_TEST(drafter.cached() == static_cast<std::int64_t>(context.size()) + 1);  // anchor and 1 draft kept
  BOOST_TEST(drafter.commit(1) == bp::status::invalid_argument);  // once per draft
}

BOOST_AUTO_TEST_SUITE_END()
