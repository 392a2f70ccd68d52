// Tests of models/llama.hpp on SmolLM2-135M (skipped when the GGUF is absent): batched scoring equals
// one-at-a-time scoring, commit crops the cache, chunked prefill, context features, and greedy decoding
// against an independent float64 numpy forward (test/data/llama_reference.json).
#define BOOST_TEST_MODULE llama
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "support/smollm2.hpp"
#include "blockpilot/models/llama.hpp"

namespace bp = blockpilot;
namespace fs = std::filesystem;

namespace {
using blockpilot::testing::smollm2_path;
using blockpilot::testing::smollm2_present;


/// Loaded once for all test cases.
const bp::llama_model& model() {
  static const auto m = [] {
    auto loaded = std::make_unique<bp::llama_model>(bp::llama_model::load(smollm2_path()));
    BOOST_TEST_MESSAGE("loaded " << loaded->parameter_count() << " parameters in " << loaded->load_seconds() << " s");
    return loaded;
  }();
  return *m;
}

/// The reference next to this source file (or found from the working directory).
fs::path reference_path() {
  if (const char* p = std::getenv("BLOCKPILOT_LLAMA_REFERENCE")) return p;
  for (const fs::path& candidate :
       {fs::absolute(__FILE__).parent_path() / "data", fs::path("test") / "data", fs::path("..") / "test" / "data",
        fs::path("..") / ".." / "test" / "data"})
    if (fs::is_regular_file(candidate / "llama_reference.json")) return candidate / "llama_reference.json";
  return fs::absolute(__FILE__).parent_path() / "data" / "llama_reference.json";
}

/// A ChatML prompt with the default system message, built from token strings of the vocabulary.
std::vector<bp::token_id> some_prompt() {
  const auto& m = model();
  std::vector<bp::token_id> p;
  for (const char* t : {"<|im_start|>", "user", "Ċ", "The", "Ġcapital", "Ġof", "ĠFrance", "Ġis", "<|im_end|>", "Ċ",
                        "<|im_start|>", "ass", "istant", "Ċ"}) {
    const auto id = m.find_token(t);
    BOOST_TEST_REQUIRE(id >= 0, "token " << t);
    p.push_back(id);
  }
  return p;
}

std::vector<float> copy_rows(const bp::matrix_view<const float>& v) {
  std::vector<float> out;
  for (std::int64_t r = 0; r < v.rows; ++r) out.insert(out.end(), v.row(r).begin(), v.row(r).end());
  return out;
}

/// max |a - b| / max(1, |b|) over all elements.
double max_relative(std::span<const float> a, std::span<const float> b) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

/// max |a - b| / max(1, max |b|): hidden states carry a few large-magnitude channels, so their
/// rounding is measured against the row's scale.
double max_scaled(std::span<const float> a, std::span<const float> b) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / scale;
}

bp::token_id argmax(std::span<const float> row) {
  return static_cast<bp::token_id>(std::ranges::max_element(row) - row.begin());
}

/// Options without designated initialisers (GCC's -Wmissing-field-initializers flags those).
bp::llama_verifier_options opts(int max_block, std::vector<int> layers = {}, std::int64_t max_positions = 2048,
                                int threads = 2) {
  bp::llama_verifier_options o;
  o.max_block = max_block;
  o.feature_layers = std::move(layers);
  o.max_positions = max_positions;
  o.threads = threads;
  return o;
}

constexpr double tolerance = 1e-4;  // relative, max(1, |x|) in the denominator

}  // namespace

BOOST_AUTO_TEST_SUITE(smollm2)

BOOST_AUTO_TEST_CASE(configuration, *boost::unit_test::precondition(smollm2_present)) {
  const auto& c = model().config();
  BOOST_TEST(c.layers == 30);
  BOOST_TEST(c.hidden == 576);
  BOOST_TEST(c.heads == 9);
  BOOST_TEST(c.kv_heads == 3);
  BOOST_TEST(c.head_dim == 64);
  BOOST_TEST(c.ffn == 1536);
  BOOST_TEST(c.vocab == 49152);
  BOOST_TEST(c.rope_base == 100000.0);
  BOOST_TEST(model().tied_embeddings());
  BOOST_TEST(model().parameter_count() > 134'000'000);
  BOOST_TEST(model().parameter_count() < 136'000'000);
  BOOST_TEST_MESSAGE("load time " << model().load_seconds() << " s");
  static_assert(bp::verifier_with_context_features<bp::llama_verifier>);

  BOOST_CHECK_THROW(bp::llama_verifier(model(), opts(64, {30})), bp::error);
  BOOST_CHECK_THROW(bp::llama_verifier(model(), opts(0)), bp::error);
  BOOST_CHECK_THROW(bp::llama_verifier(model(), opts(64, {}, 2048, 0)), bp::error);
}

BOOST_AUTO_TEST_CASE(status_codes, *boost::unit_test::precondition(smollm2_present)) {
  bp::llama_verifier v(model(), opts(8, {}, 32));
  bp::matrix_view<const float> logits;
  const std::vector<bp::token_id> none, bad = {1, 49152}, nine(9, 5), prompt(30, 7);
  BOOST_TEST(v.prefill(none, logits) == bp::status::empty_prompt);
  BOOST_TEST(v.prefill(bad, logits) == bp::status::invalid_token);
  BOOST_TEST(v.prefill(std::vector<bp::token_id>(33, 7), logits) == bp::status::invalid_argument);
  BOOST_TEST(v.prefill(prompt, logits) == bp::status::success);
  BOOST_TEST(v.score(none, logits) == bp::status::invalid_block_size);
  BOOST_TEST(v.score(nine, logits) == bp::status::invalid_block_size);
  BOOST_TEST(v.score(std::vector<bp::token_id>(3, 5), logits) == bp::status::invalid_argument);  // 30 + 3 > 32
  BOOST_TEST(v.score(std::vector<bp::token_id>(2, -1), logits) == bp::status::invalid_token);
  BOOST_TEST(v.commit(1) == bp::status::invalid_argument);  // nothing scored
  BOOST_TEST(v.score(std::vector<bp::token_id>(2, 5), logits) == bp::status::success);
  BOOST_TEST(v.commit(3) == bp::status::invalid_argument);
  BOOST_TEST(v.commit(2) == bp::status::success);
  BOOST_TEST(v.committed() == 32);
}

// (a) one batched score of b tokens equals b single-token scores, logits and context features.
BOOST_AUTO_TEST_CASE(block_equals_one_at_a_time, *boost::unit_test::precondition(smollm2_present)) {
  const auto prompt = some_prompt();
  const std::vector<bp::token_id> block = {504, 3575, 282, 4649, 314, 7042, 30, 378, 1069, 16};
  const auto options = opts(16, {2, 15, 29});
  bp::llama_verifier batched(model(), options), single(model(), options);
  bp::matrix_view<const float> logits;
  BOOST_TEST_REQUIRE(batched.prefill(prompt, logits) == bp::status::success);
  BOOST_TEST(batched.context_features().rows == static_cast<std::int64_t>(prompt.size()));
  BOOST_TEST(batched.context_features().cols == 3 * 576);
  BOOST_TEST_REQUIRE(batched.score(block, logits) == bp::status::success);
  BOOST_TEST(logits.rows == static_cast<std::int64_t>(block.size()));
  const auto all = copy_rows(logits);
  const auto features = copy_rows(batched.context_features());
  BOOST_TEST(batched.context_features().rows == static_cast<std::int64_t>(block.size()));

  BOOST_TEST_REQUIRE(single.prefill(prompt, logits) == bp::status::success);
  double worst_logits = 0, worst_features = 0;
  for (std::size_t j = 0; j < block.size(); ++j) {
    BOOST_TEST_REQUIRE(single.score(std::span(block).subspan(j, 1), logits) == bp::status::success);
    const std::size_t v = 49152, f = 3 * 576;
    worst_logits = std::max(worst_logits, max_relative(logits.row(0), std::span(all).subspan(j * v, v)));
    worst_features = std::max(worst_features, max_scaled(single.context_features().row(0),
                                                           std::span(features).subspan(j * f, f)));
    BOOST_TEST_REQUIRE(single.commit(1) == bp::status::success);
  }
  BOOST_TEST_MESSAGE("batched vs single: max relative difference " << worst_logits << " (logits), "
                                                                   << worst_features << " (features, scaled by the row's max |x|)");
  BOOST_TEST(worst_logits <= tolerance);
  BOOST_TEST(worst_features <= tolerance);
}

// (b) after commit(n), scoring continues as if only the n tokens had been scored; the rejected rows
// leave no trace.
BOOST_AUTO_TEST_CASE(commit_crops_the_cache, *boost::unit_test::precondition(smollm2_present)) {
  const auto prompt = some_prompt();
  const std::vector<bp::token_id> accepted = {504, 3575, 282}, next = {4649, 314, 7042, 30};
  bp::llama_verifier a(model(), opts(16)), b(model(), opts(16));
  bp::matrix_view<const float> logits;
  for (const std::vector<bp::token_id>& junk : {std::vector<bp::token_id>{9, 99, 999}, std::vector<bp::token_id>{1}}) {
    std::vector<bp::token_id> first = accepted;
    first.insert(first.end(), junk.begin(), junk.end());
    BOOST_TEST_REQUIRE(a.prefill(prompt, logits) == bp::status::success);
    BOOST_TEST_REQUIRE(a.score(first, logits) == bp::status::success);
    BOOST_TEST_REQUIRE(a.commit(3) == bp::status::success);
    BOOST_TEST_REQUIRE(a.score(next, logits) == bp::status::success);
    const auto cropped = copy_rows(logits);

    BOOST_TEST_REQUIRE(b.prefill(prompt, logits) == bp::status::success);
    BOOST_TEST_REQUIRE(b.score(accepted, logits) == bp::status::success);
    BOOST_TEST_REQUIRE(b.commit(3) == bp::status::success);
    BOOST_TEST_REQUIRE(b.score(next, logits) == bp::status::success);
    const double worst = max_relative(cropped, copy_rows(logits));
    BOOST_TEST_MESSAGE("commit(3) after " << first.size() << " scored: max relative difference " << worst);
    BOOST_TEST(worst <= tolerance);
    BOOST_TEST(a.committed() == b.committed());
  }
  // commit(0) keeps nothing: a re-score of the same block gives the same rows.
  BOOST_TEST_REQUIRE(a.score(next, logits) == bp::status::success);
  const auto once = copy_rows(logits);
  BOOST_TEST_REQUIRE(a.commit(0) == bp::status::success);
  BOOST_TEST_REQUIRE(a.score(next, logits) == bp::status::success);
  BOOST_TEST(max_relative(once, copy_rows(logits)) == 0.0);
}

// (c) prefill of p + q tokens (in chunks of max_block) ends with the same row as prefill(p) + score(q).
BOOST_AUTO_TEST_CASE(prefill_equals_prefill_then_score, *boost::unit_test::precondition(smollm2_present)) {
  auto prompt = some_prompt();
  const std::vector<bp::token_id> tail = {504, 3575, 282, 4649, 314};
  const auto p = prompt.size();
  prompt.insert(prompt.end(), tail.begin(), tail.end());
  bp::matrix_view<const float> logits;
  for (int max_block : {5, 64}) {
    bp::llama_verifier whole(model(), opts(max_block, {29}));
    bp::llama_verifier split(model(), opts(max_block, {29}));
    BOOST_TEST_REQUIRE(whole.prefill(prompt, logits) == bp::status::success);
    BOOST_TEST(logits.rows == 1);
    const auto last = copy_rows(logits);
    const auto features = whole.context_features();
    BOOST_TEST(features.rows == static_cast<std::int64_t>(prompt.size()));
    const std::vector<float> last_features(features.row(features.rows - 1).begin(),
                                           features.row(features.rows - 1).end());
    BOOST_TEST_REQUIRE(split.prefill(std::span(prompt).first(p), logits) == bp::status::success);
    BOOST_TEST_REQUIRE(split.score(tail, logits) == bp::status::success);
    const double worst = max_relative(last, logits.row(logits.rows - 1));
    BOOST_TEST_MESSAGE("max_block " << max_block << ": prefill(p+q) vs prefill(p)+score(q): " << worst);
    BOOST_TEST(worst <= tolerance);
    const auto f = split.context_features();
    const double worst_features = max_scaled(last_features, f.row(f.rows - 1));
    BOOST_TEST_MESSAGE("  features of layer 29: " << worst_features << " (scaled by the row's max |x|)");
    BOOST_TEST(worst_features <= tolerance);
    // The last layer's feature row, final-normed and projected by the head, gives the logits row.
    const auto& m = model();
    Eigen::RowVectorXf x = Eigen::Map<const Eigen::RowVectorXf>(last_features.data(), 576);
    const float scale = 1.0f / std::sqrt(x.squaredNorm() / 576.0f + m.config().rms_eps);
    const Eigen::RowVectorXf h = (x.array() * scale * m.output_norm().transpose().array()).matrix();
    const Eigen::RowVectorXf head = h * m.output().transpose();
    BOOST_TEST(max_relative(std::span(head.data(), 49152), last) <= tolerance);
  }
}

// (d) greedy decoding against an independent float64 numpy forward of the same GGUF.
BOOST_AUTO_TEST_CASE(greedy_matches_numpy_reference, *boost::unit_test::precondition(smollm2_present)) {
  const auto path = reference_path();
  BOOST_TEST_REQUIRE(fs::is_regular_file(path), path.string() << " is absent (run test/data/make_llama_reference.py)");
  const auto reference = nlohmann::json::parse(std::ifstream(path));
  constexpr double logit_tolerance = 2e-3;  // absolute, fp32 here vs float64 there
  bp::llama_verifier v(model(), opts(32));
  bp::matrix_view<const float> logits;
  for (const auto& c : reference.at("cases")) {
    const auto prompt = c.at("prompt").get<std::vector<bp::token_id>>();
    const auto greedy = c.at("greedy").get<std::vector<bp::token_id>>();
    BOOST_TEST_CONTEXT(c.at("user").get<std::string>()) {
      BOOST_TEST(prompt.front() == model().find_token("<|im_start|>"));
      BOOST_TEST_REQUIRE(v.prefill(prompt, logits) == bp::status::success);
      const auto head = c.at("logits_head").get<std::vector<float>>();
      double worst = 0;
      for (std::size_t i = 0; i < head.size(); ++i) worst = std::max(worst, std::abs(double(logits.row(0)[i]) - head[i]));
      double top = -INFINITY, sum = 0;
      for (float x : logits.row(0)) top = std::max(top, double(x));
      for (float x : logits.row(0)) sum += std::exp(double(x) - top);
      const double lse = top + std::log(sum);
      BOOST_TEST_MESSAGE("prompt of " << prompt.size() << " tokens: max |logit - reference| over the first "
                                      << head.size() << " = " << worst << ", logsumexp "
                                      << lse << " vs " << c.at("logsumexp").get<double>());
      BOOST_TEST(worst <= logit_tolerance);
      BOOST_TEST(std::abs(lse - c.at("logsumexp").get<double>()) <= logit_tolerance);
      BOOST_TEST(argmax(logits.row(0)) == c.at("argmax").get<bp::token_id>());

      // Autoregressive greedy decoding, one token per score call.
      std::vector<bp::token_id> out = {argmax(logits.row(0))};
      while (out.size() < greedy.size()) {
        BOOST_TEST_REQUIRE(v.score(std::span(out).last(1), logits) == bp::status::success);
        BOOST_TEST_REQUIRE(v.commit(1) == bp::status::success);
        out.push_back(argmax(logits.row(0)));
      }
      BOOST_TEST(out == greedy, boost::test_tools::per_element());

      // Verification as in speculative decoding: the whole reference continuation scored in one block
      // predicts each of its own next tokens.
      BOOST_TEST_REQUIRE(v.prefill(prompt, logits) == bp::status::success);
      BOOST_TEST_REQUIRE(v.score(greedy, logits) == bp::status::success);
      for (std::size_t j = 0; j + 1 < greedy.size(); ++j) BOOST_TEST(argmax(logits.row(std::int64_t(j))) == greedy[j + 1]);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
