// Tests of models/dflash_drafter.hpp: the reference's default target layers, loading a reference-layout
// checkpoint (test/data/dflash_tiny) and its errors, agreement of the draft logits with the reference
// PyTorch forward (test/data/dflash_reference.safetensors, written by make_dflash_reference.py), draft
// probabilities, and the decode loop with SmolLM2-135M as the target (skipped without it): greedy output
// equal to plain greedy decoding, rejection sampling at T = 1.
#define BOOST_TEST_MODULE dflash
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <functional>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/io/safetensors.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/dflash_drafter.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "support/source_paths.hpp"
#include "support/check_error.hpp"
#include "support/smollm2.hpp"
#include "support/temp_dir.hpp"

namespace bp = blockpilot;
namespace fs = std::filesystem;
using blockpilot::testing::check_error;
using blockpilot::testing::smollm2_path;
using blockpilot::testing::smollm2_present;
using blockpilot::testing::temp_dir;
using json = nlohmann::json;

namespace {

/// Largest |C++ logit - reference logit| the agreement test accepts. Both run fp32 on the same bf16
/// weights; the difference is summation order (Eigen's products against PyTorch's SDPA and GEMM).
constexpr double logit_tolerance = 5e-5;

fs::path data_dir() { return blockpilot::testing::test_data_dir(); }

const bp::dflash_model& tiny() {
  static const auto m = bp::dflash_model::load(data_dir() / "dflash_tiny");
  return m;
}

/// The reference file: stand-in target tables, and per call the context rows, anchor and logits.
struct reference_data {
  bp::io::safetensors_file file;
  bp::llama_weight embedding, head;
  json calls;

  [[nodiscard]] bp::llama_matrix matrix(const std::string& name) const {
    const auto* t = file.find(name);
    BOOST_TEST_REQUIRE(t != nullptr, name << " in " << file.source());
    BOOST_TEST_REQUIRE(t->shape.size() == 2u);
    const auto v = file.values<float>(*t);
    return Eigen::Map<const bp::llama_matrix>(v.data(), t->shape[0], t->shape[1]);
  }
};

const reference_data& reference() {
  static const auto r = [] {
    auto d = std::make_unique<reference_data>();
    d->file = bp::io::safetensors_file::read(data_dir() / "dflash_reference.safetensors");
    d->embedding.values = d->matrix("embedding");
    d->head.values = d->matrix("head");
    d->calls = json::parse(d->file.metadata().at("calls"));
    return d;
  }();
  return *r;
}

bp::dflash_options small_options() {
  bp::dflash_options o;
  o.max_positions = 256;
  o.max_draft_rows = 15;
  return o;
}

bp::matrix_view<const float> view(const bp::llama_matrix& m) { return {m.data(), m.rows(), m.cols()}; }

/// A context that ends with `anchor` after `rows` committed positions.
std::vector<bp::token_id> context_for(std::int64_t rows, bp::token_id anchor) {
  std::vector<bp::token_id> c(static_cast<std::size_t>(rows), 0);
  c.push_back(anchor);
  return c;
}

double max_abs_difference(bp::matrix_view<const float> a, const bp::llama_matrix& b) {
  BOOST_TEST_REQUIRE(a.rows == b.rows());
  BOOST_TEST_REQUIRE(a.cols == b.cols());
  double worst = 0;
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t j = 0; j < a.cols; ++j)
      worst = std::max(worst, std::abs(double(a.row(i)[static_cast<std::size_t>(j)]) - b(i, j)));
  return worst;
}

/// The drafter's confidences of its last draft of b are each row's top probability at T = 1, over the
/// whole vocabulary of its logits.
void check_confidence(bp::dflash_drafter& drafter, int b) {
  const auto confidence = drafter.draft_confidence();
  BOOST_TEST_REQUIRE(confidence.size() == static_cast<std::size_t>(b - 1));
  for (int j = 0; j + 1 < b; ++j) {
    const auto row = drafter.logits().row(j);
    const double top = *std::ranges::max_element(row);
    double sum = 0;
    for (float x : row) sum += std::exp(x - top);
    BOOST_TEST(std::abs(confidence[static_cast<std::size_t>(j)] - 1.0 / sum) <= 1e-6);
  }
}

/// The checkpoint folder copied to `dir` with `edit` applied to its config.json.
template <class Edit>
fs::path edited_checkpoint(const temp_dir& dir, Edit&& edit) {
  std::ifstream in(data_dir() / "dflash_tiny" / "config.json");
  json config = json::parse(in);
  edit(config);
  dir.write("config.json", config.dump(2));
  fs::copy_file(data_dir() / "dflash_tiny" / "model.safetensors", dir.path / "model.safetensors",
                fs::copy_options::overwrite_existing);
  return dir.path;
}

/// The tiny checkpoint declared for the reference's 256-token stand-in target (its config.json names
/// SmolLM2's 49,152 tokens, the target the real-model tests pair it with).
const bp::dflash_model& standin() {
  static const temp_dir dir;
  static const auto m = bp::dflash_model::load(edited_checkpoint(dir, [](json& c) { c["vocab_size"] = 256; }));
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(concepts) {
  static_assert(bp::drafter<bp::dflash_drafter>);
  static_assert(bp::drafter_with_probabilities<bp::dflash_drafter>);
  static_assert(bp::drafter_with_context<bp::dflash_drafter>);
  static_assert(bp::drafter_with_confidence<bp::dflash_drafter>);
}

// build_target_layer_ids of the reference, including Python's round-half-to-even.
BOOST_AUTO_TEST_CASE(default_target_layer_ids) {
  using v = std::vector<int>;
  BOOST_TEST(bp::dflash_target_layer_ids(64, 10) == (v{1, 8, 14, 21, 28, 34, 41, 48, 54, 61}), boost::test_tools::per_element());
  BOOST_TEST(bp::dflash_target_layer_ids(36, 5) == (v{1, 9, 17, 25, 33}), boost::test_tools::per_element());
  BOOST_TEST(bp::dflash_target_layer_ids(30, 1) == (v{15}), boost::test_tools::per_element());
  BOOST_TEST(bp::dflash_target_layer_ids(30, 2) == (v{1, 27}), boost::test_tools::per_element());
  BOOST_TEST(bp::dflash_target_layer_ids(7, 3) == (v{1, 2, 4}), boost::test_tools::per_element());  // round(2.5) = 2
  BOOST_TEST(bp::dflash_target_layer_ids(9, 3) == (v{1, 4, 6}), boost::test_tools::per_element());  // round(3.5) = 4
}

BOOST_AUTO_TEST_CASE(loads_the_reference_layout) {
  const auto& c = tiny().config();
  BOOST_TEST(c.hidden == 576);
  BOOST_TEST(c.layers == 2);
  BOOST_TEST(c.heads == 9);
  BOOST_TEST(c.kv_heads == 3);
  BOOST_TEST(c.head_dim == 64);
  BOOST_TEST(c.ffn == 512);
  BOOST_TEST(c.rms_eps == 1e-5f);
  BOOST_TEST(c.rope_theta == 100000.0);
  BOOST_TEST(c.block_size == 16);
  BOOST_TEST(!c.causal);
  BOOST_TEST(c.target_layers == 30);
  BOOST_TEST(c.mask_token == std::stoi(reference().file.metadata().at("mask_token_id")));
  // No target_layer_ids in the file: the formula gives what the reference model used.
  const auto ids = json::parse(reference().file.metadata().at("target_layer_ids")).get<std::vector<int>>();
  BOOST_TEST(c.target_layer_ids == ids, boost::test_tools::per_element());
  BOOST_TEST(tiny().fc().rows() == 576);
  BOOST_TEST(tiny().fc().cols() == 2 * 576);
  BOOST_TEST(tiny().layers().size() == 2u);

  // The config.json of transformers 4 (rope_theta and rope_scaling at the top level), with the target
  // layer ids given explicitly and the draft entries at the top level.
  temp_dir dir("blockpilot_dflash");
  const auto folder = edited_checkpoint(dir, [](json& c) {
    c.erase("rope_parameters");
    c["rope_theta"] = 100000.0;
    c["rope_scaling"] = nullptr;
    c.erase("dflash_config");
    c["mask_token_id"] = 16;
    c["target_layer_ids"] = {1, 27};
    c.erase("num_target_layers");
  });
  const auto older = bp::dflash_model::load(folder);
  BOOST_TEST(older.config().rope_theta == 100000.0);
  BOOST_TEST(older.config().mask_token == 16);
  BOOST_TEST(older.config().target_layer_ids == ids, boost::test_tools::per_element());
}

// The four drafter calls of the reference run (context rows, then a block of b at the next positions,
// the cache cropped to the committed length), through the drafter's own draft path.
BOOST_AUTO_TEST_CASE(logits_agree_with_the_reference_forward) {
  const auto& ref = reference();
  bp::dflash_drafter drafter(standin(), ref.embedding, ref.head, small_options());
  BOOST_TEST_REQUIRE(drafter.begin({}) == bp::status::success);
  double worst = 0, largest = 0;
  int greedy_checked = 0;
  for (std::size_t i = 0; i < ref.calls.size(); ++i) {
    const int b = ref.calls[i]["block_size"];
    const bp::token_id anchor = ref.calls[i]["anchor"];
    const auto context = ref.matrix("call" + std::to_string(i) + ".context");
    const auto expected = ref.matrix("call" + std::to_string(i) + ".logits");
    BOOST_TEST_REQUIRE(context.rows() == ref.calls[i]["context_rows"].get<int>());
    BOOST_TEST_REQUIRE(drafter.append_context(view(context)) == bp::status::success);
    std::vector<bp::token_id> drafts(static_cast<std::size_t>(b - 1));
    BOOST_TEST_REQUIRE(drafter.draft({context_for(drafter.context_rows(), anchor), b, 0.0f, {}}, drafts) ==
                       bp::status::success);
    const double err = max_abs_difference(drafter.logits(), expected);
    BOOST_TEST_MESSAGE("call " << i << " (b = " << b << "): max |logit - reference| " << err);
    worst = std::max(worst, err);
    largest = std::max(largest, double(expected.cwiseAbs().maxCoeff()));
    // Greedy drafts are the reference's argmax wherever its top two are further apart than the tolerance.
    for (int j = 0; j + 1 < b; ++j) {
      Eigen::RowVectorXf row = expected.row(j);
      Eigen::Index top;
      const float best = row.maxCoeff(&top);
      row(top) = -INFINITY;
      if (best - row.maxCoeff() > 2 * logit_tolerance) {
        BOOST_TEST(drafts[static_cast<std::size_t>(j)] == static_cast<bp::token_id>(top));
        ++greedy_checked;
      }
    }
  }
  BOOST_TEST_MESSAGE("DFlash agreement: max |logit - reference| " << worst << " over logits up to " << largest
                                                                  << " (tolerance " << logit_tolerance << ")");
  BOOST_TEST(worst <= logit_tolerance);
  BOOST_TEST(greedy_checked >= 20);
}

// The context cache does not depend on how rows arrive: all at once (chunked internally) or in pieces.
BOOST_AUTO_TEST_CASE(context_in_pieces_equals_context_at_once) {
  const auto& ref = reference();
  const int width = static_cast<int>(tiny().fc().cols());
  bp::llama_matrix rows(150, width);
  for (Eigen::Index i = 0; i < rows.rows(); ++i)
    for (Eigen::Index j = 0; j < width; ++j) rows(i, j) = static_cast<float>(std::sin(0.37 * i + 0.011 * j * (i % 7 + 1)));
  bp::dflash_drafter once(standin(), ref.embedding, ref.head, small_options()),
      pieces(standin(), ref.embedding, ref.head, small_options());
  BOOST_TEST_REQUIRE(once.begin({}) == bp::status::success);
  BOOST_TEST_REQUIRE(pieces.begin({}) == bp::status::success);
  BOOST_TEST_REQUIRE(once.append_context(view(rows)) == bp::status::success);
  for (std::int64_t at = 0, n = 1; at < rows.rows(); at += n, n = n % 5 + 1)
    BOOST_TEST_REQUIRE(pieces.append_context(view(rows).rows_slice(at, std::min(n, rows.rows() - at))) ==
                       bp::status::success);
  BOOST_TEST_REQUIRE(once.context_rows() == 150);
  BOOST_TEST_REQUIRE(pieces.context_rows() == 150);
  std::vector<bp::token_id> a(7), b(7);
  BOOST_TEST_REQUIRE(once.draft({context_for(150, 42), 8, 0.0f, {}}, a) == bp::status::success);
  BOOST_TEST_REQUIRE(pieces.draft({context_for(150, 42), 8, 0.0f, {}}, b) == bp::status::success);
  const bp::llama_matrix expected =
      Eigen::Map<const bp::llama_matrix>(once.logits().data, once.logits().rows, once.logits().cols);
  BOOST_TEST(max_abs_difference(pieces.logits(), expected) <= 1e-5);
  BOOST_TEST(a == b, boost::test_tools::per_element());
}

// At T > 0 each q row is softmax(logits / T) and each draft the inverse-CDF pick at the step's Philox
// bits; at T = 0 q is one-hot at the greedy draft.
BOOST_AUTO_TEST_CASE(draft_probabilities_are_what_sampling_draws_from) {
  const auto& ref = reference();
  constexpr int b = 9;
  constexpr float temperature = 0.7f;
  const std::int64_t vocab = ref.embedding.rows();
  bp::dflash_drafter drafter(standin(), ref.embedding, ref.head, small_options());
  BOOST_TEST_REQUIRE(drafter.begin({}) == bp::status::success);
  const auto context = ref.matrix("call0.context");
  BOOST_TEST_REQUIRE(drafter.append_context(view(context)) == bp::status::success);
  const auto tokens = context_for(context.rows(), 3);
  std::vector<float> q(static_cast<std::size_t>((b - 1) * vocab));
  std::vector<bp::token_id> drafts(b - 1), again(b - 1);
  std::set<bp::token_id> firsts;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    const bp::philox_stream stream{seed, 5};
    BOOST_TEST_REQUIRE(drafter.draft({tokens, b, temperature, stream}, drafts, {q.data(), b - 1, vocab}) ==
                       bp::status::success);
    BOOST_TEST_REQUIRE(drafter.draft({tokens, b, temperature, stream}, again) == bp::status::success);
    BOOST_TEST(again == drafts, boost::test_tools::per_element());
    firsts.insert(drafts[0]);
    const auto logits = drafter.logits();
    for (int j = 1; j < b; ++j) {
      const auto row = logits.row(j - 1);
      const double top = *std::ranges::max_element(row);
      double sum = 0, qsum = 0, below = 0, worst = 0;
      for (float x : row) sum += std::exp((x - top) / temperature);
      const bp::token_id d = drafts[static_cast<std::size_t>(j) - 1];
      for (std::int64_t v = 0; v < vocab; ++v) {
        const double qv = q[static_cast<std::size_t>((j - 1) * vocab + v)];
        worst = std::max(worst, std::abs(qv - std::exp((row[static_cast<std::size_t>(v)] - top) / temperature) / sum));
        qsum += qv;
        if (v < d) below += qv;
      }
      BOOST_TEST(worst <= 1e-6);
      BOOST_TEST(std::abs(qsum - 1.0) <= 1e-5);
      const double qd = q[static_cast<std::size_t>((j - 1) * vocab + d)];
      const double u = static_cast<double>(stream.bits64(static_cast<std::uint32_t>(j), bp::random_domain::draft_sample)) *
                       0x1p-64;
      BOOST_TEST(qd > 0.0);
      BOOST_TEST((u >= below - 1e-6 && u <= below + qd + 1e-6), "u " << u << " outside [" << below << ", " << below + qd << "]");
    }
  }
  BOOST_TEST(firsts.size() >= 2u);
  check_confidence(drafter, b);  // whatever was drawn
  BOOST_TEST_REQUIRE(drafter.draft({tokens, b, 0.0f, {}}, drafts, {q.data(), b - 1, vocab}) == bp::status::success);
  for (int j = 0; j + 1 < b; ++j)
    for (std::int64_t v = 0; v < vocab; ++v)
      BOOST_TEST_REQUIRE(q[static_cast<std::size_t>(j * vocab + v)] == (v == drafts[static_cast<std::size_t>(j)] ? 1.0f : 0.0f));
}

// A draft vocabulary gives its tokens the full head's logits, bit for bit (the same rows, the same
// kernels), every other token −infinity, greedy drafts the argmax over the vocabulary, q rows zero
// outside it; a token out of range or given twice is a clear error.
BOOST_AUTO_TEST_CASE(draft_vocabulary_restricts_the_head) {
  const auto& ref = reference();
  const std::int64_t vocab = ref.embedding.rows();
  auto o = small_options();
  for (bp::token_id t = vocab - 1; t >= 0; t -= 3) o.draft_vocab.push_back(t);  // not in id order
  bp::dflash_drafter full(standin(), ref.embedding, ref.head, small_options()), part(standin(), ref.embedding, ref.head, o);
  const std::set<bp::token_id> kept(o.draft_vocab.begin(), o.draft_vocab.end());
  const auto context = ref.matrix("call0.context");
  for (auto* d : {&full, &part}) {
    BOOST_TEST_REQUIRE(d->begin({}) == bp::status::success);
    BOOST_TEST_REQUIRE(d->append_context(view(context)) == bp::status::success);
  }
  constexpr int b = 9;
  const auto tokens = context_for(context.rows(), 3);
  std::vector<bp::token_id> a(b - 1), c(b - 1);
  BOOST_TEST_REQUIRE(full.draft({tokens, b, 0.0f, {}}, a) == bp::status::success);
  BOOST_TEST_REQUIRE(part.draft({tokens, b, 0.0f, {}}, c) == bp::status::success);
  int differing = 0;
  for (int j = 0; j + 1 < b; ++j) {
    const auto f = full.logits().row(j), p = part.logits().row(j);
    bp::token_id best = -1;
    for (std::int64_t v = 0; v < vocab; ++v) {
      const auto i = static_cast<std::size_t>(v);
      if (kept.contains(static_cast<bp::token_id>(v))) {
        BOOST_TEST_REQUIRE(p[i] == f[i]);
        if (best < 0 || f[i] > f[static_cast<std::size_t>(best)]) best = static_cast<bp::token_id>(v);
      } else {
        BOOST_TEST_REQUIRE(p[i] == -INFINITY);
      }
    }
    BOOST_TEST(c[static_cast<std::size_t>(j)] == best);
    differing += a[static_cast<std::size_t>(j)] != best;
  }
  BOOST_TEST_MESSAGE(differing << " of " << b - 1 << " greedy drafts moved into the vocabulary");
  std::vector<float> q(static_cast<std::size_t>((b - 1) * vocab));
  BOOST_TEST_REQUIRE(part.draft({tokens, b, 1.0f, bp::philox_stream{7, 1}}, c, {q.data(), b - 1, vocab}) == bp::status::success);
  for (int j = 0; j + 1 < b; ++j) {
    double inside = 0, outside = 0;
    for (std::int64_t v = 0; v < vocab; ++v)
      (kept.contains(static_cast<bp::token_id>(v)) ? inside : outside) += q[static_cast<std::size_t>(j * vocab + v)];
    BOOST_TEST(outside == 0.0);
    BOOST_TEST(std::abs(inside - 1.0) <= 1e-5);
    BOOST_TEST(kept.contains(c[static_cast<std::size_t>(j)]));
  }
  check_confidence(part, b);
  auto bad = small_options();
  bad.draft_vocab = {1, 2, static_cast<bp::token_id>(vocab)};
  check_error([&] { bp::dflash_drafter d(standin(), ref.embedding, ref.head, bad); }, {"option 'draft_vocab'", "outside"});
  bad.draft_vocab = {1, 2, 1};
  check_error([&] { bp::dflash_drafter d(standin(), ref.embedding, ref.head, bad); }, {"option 'draft_vocab'", "twice"});
}

// The drafter's own matrices held as Q8_0 (fp32 or int8 activations): logits within a tolerance of
// the fp32 forward, greedy drafts equal where the top two are further apart than it.
BOOST_AUTO_TEST_CASE(quantized_drafter_weights) {
  const auto& ref = reference();
  static const temp_dir dir;
  const auto folder = edited_checkpoint(dir, [](json& c) { c["vocab_size"] = 256; });
  bp::dflash_drafter exact(standin(), ref.embedding, ref.head, small_options());
  const auto context = ref.matrix("call0.context");
  BOOST_TEST_REQUIRE(exact.begin({}) == bp::status::success);
  BOOST_TEST_REQUIRE(exact.append_context(view(context)) == bp::status::success);
  constexpr int b = 16;
  const auto tokens = context_for(context.rows(), 3);
  std::vector<bp::token_id> expected(b - 1), drafts(b - 1);
  BOOST_TEST_REQUIRE(exact.draft({tokens, b, 0.0f, {}}, expected) == bp::status::success);
  const bp::llama_matrix reference_logits =
      Eigen::Map<const bp::llama_matrix>(exact.logits().data, exact.logits().rows, exact.logits().cols);
  for (const auto storage : {bp::llama_storage::quantized, bp::llama_storage::quantized_int8}) {
    BOOST_TEST_CONTEXT((storage == bp::llama_storage::quantized ? "quantized" : "quantized_int8")) {
      const auto m = bp::dflash_model::load(folder, storage);
      BOOST_TEST((m.storage() == storage));
      BOOST_TEST(m.layers()[0].gate_up.quantized());
      BOOST_TEST(m.fc().quantized());
      bp::dflash_drafter d(m, ref.embedding, ref.head, small_options());
      BOOST_TEST_REQUIRE(d.begin({}) == bp::status::success);
      BOOST_TEST_REQUIRE(d.append_context(view(context)) == bp::status::success);
      BOOST_TEST_REQUIRE(d.draft({tokens, b, 0.0f, {}}, drafts) == bp::status::success);
      const double worst = max_abs_difference(d.logits(), reference_logits);
      constexpr double q8_tolerance = 0.3;  // measured 0.07 (fp32 activations), 0.12 (int8), logits up to 5.9
      BOOST_TEST_MESSAGE("Q8_0 drafter weights: max |logit difference| " << worst << " over logits up to "
                                                                         << reference_logits.cwiseAbs().maxCoeff());
      BOOST_TEST(worst > 0.0);
      BOOST_TEST(worst <= q8_tolerance);
      for (int j = 0; j + 1 < b; ++j) {
        std::vector<float> row(reference_logits.row(j).data(), reference_logits.row(j).data() + reference_logits.cols());
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
        if (row[0] - row[1] > 2 * q8_tolerance) BOOST_TEST(drafts[static_cast<std::size_t>(j)] == expected[static_cast<std::size_t>(j)]);
      }
    }
  }
}

// select_rows copies rows in every storage: each selected row decodes to the original row.
BOOST_AUTO_TEST_CASE(weight_rows_selected_in_every_storage) {
  bp::llama_matrix m(40, 64);
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = static_cast<float>(std::sin(0.3 * i + 0.07 * j) * (1 + i % 5));
  const std::vector<std::int64_t> rows{5, 0, 39, 17, 16, 5};
  for (const auto storage : {bp::llama_storage::fp32, bp::llama_storage::quantized, bp::llama_storage::quantized_int8}) {
    BOOST_TEST_CONTEXT("storage " << static_cast<int>(storage)) {
      const auto w = bp::llama_weight::from_matrix(m, storage);
      BOOST_TEST(w.quantized() == (storage != bp::llama_storage::fp32));
      const auto s = w.select_rows(rows);
      BOOST_TEST(s.rows() == 6);
      BOOST_TEST(s.cols() == 64);
      BOOST_TEST((s.grouped.rows() > 0) == (storage == bp::llama_storage::quantized_int8));
      std::vector<float> a(64), b(64);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        w.row(rows[i], a.data());
        s.row(static_cast<std::int64_t>(i), b.data());
        BOOST_TEST(a == b, boost::test_tools::per_element());
        for (std::size_t j = 0; j < 64; ++j)
          BOOST_TEST_REQUIRE(std::abs(a[j] - m(rows[i], static_cast<Eigen::Index>(j))) <= (storage == bp::llama_storage::fp32 ? 0.0 : 0.03));
      }
      check_error([&] { (void)w.select_rows(std::vector<std::int64_t>{3, 40}); }, {"row 40", "40 rows"});
    }
  }
}

BOOST_AUTO_TEST_CASE(status_codes) {
  const auto& ref = reference();
  bp::dflash_drafter drafter(standin(), ref.embedding, ref.head, small_options());
  BOOST_TEST_REQUIRE(drafter.begin({}) == bp::status::success);
  const auto context = ref.matrix("call0.context");
  BOOST_TEST(drafter.append_context(view(context).rows_slice(0, 3)) == bp::status::success);
  const bp::matrix_view<const float> narrow(context.data(), 2, 576, context.cols());
  BOOST_TEST(drafter.append_context(narrow) == bp::status::invalid_argument);  // 576 wide, not 1152
  BOOST_TEST(drafter.context_rows() == 3);
  std::vector<bp::token_id> out(20);
  BOOST_TEST(drafter.draft({context_for(3, 1), 17, 0.0f, {}}, out) == bp::status::invalid_block_size);
  BOOST_TEST(drafter.draft({context_for(3, 1), 8, 0.0f, {}}, std::span(out).first(3)) == bp::status::invalid_block_size);
  BOOST_TEST(drafter.draft({context_for(4, 1), 4, 0.0f, {}}, out) == bp::status::invalid_argument);  // a row short
  BOOST_TEST(drafter.draft({{}, 4, 0.0f, {}}, out) == bp::status::invalid_argument);
  BOOST_TEST(drafter.draft({context_for(3, 256), 4, 0.0f, {}}, out) == bp::status::invalid_token);
  std::vector<float> q(3 * 100);
  BOOST_TEST(drafter.draft({context_for(3, 1), 4, 0.0f, {}}, out, {q.data(), 3, 100}) == bp::status::invalid_argument);
  BOOST_TEST(drafter.draft({context_for(3, 1), 1, 0.0f, {}}, out) == bp::status::success);
  BOOST_TEST(drafter.commit(0) == bp::status::invalid_argument);
  BOOST_TEST(drafter.commit(1) == bp::status::success);
  bp::llama_matrix many(254, context.cols());
  many.setZero();
  BOOST_TEST(drafter.append_context(view(many)) == bp::status::invalid_argument);  // 3 + 254 > max_positions
  BOOST_TEST(drafter.context_rows() == 3);
  BOOST_TEST_REQUIRE(drafter.begin({}) == bp::status::success);
  BOOST_TEST(drafter.context_rows() == 0);
}

// The kernels' variant is resolved as the target's is: best becomes this CPU's, one above it is refused.
BOOST_AUTO_TEST_CASE(instruction_set_variants) {
  const auto& ref = reference();
  for (auto isa : {bp::cpu_isa::best, bp::cpu_isa::generic, bp::cpu_isa::avx2, bp::cpu_isa::avx512, bp::cpu_isa::avx512_vnni}) {
    auto o = small_options();
    o.isa = isa;
    if (isa != bp::cpu_isa::best && bp::detected_cpu_isa() < isa) {
      BOOST_CHECK_EXCEPTION(bp::dflash_drafter(standin(), ref.embedding, ref.head, o), bp::error,
                            [](const bp::error& e) { return std::string(e.what()).find("option 'isa'") != std::string::npos; });
    } else {
      const bp::dflash_drafter drafter(standin(), ref.embedding, ref.head, o);
      BOOST_TEST((drafter.options().isa == bp::resolve_cpu_isa(isa)));
      BOOST_TEST((drafter.options().isa != bp::cpu_isa::best));
    }
  }
}

BOOST_AUTO_TEST_CASE(malformed_checkpoints_are_clear_errors) {
  const auto config_error = [](auto edit, std::initializer_list<std::string> fragments) {
    temp_dir dir("blockpilot_dflash");
    const auto folder = edited_checkpoint(dir, edit);
    std::vector<std::string> all(fragments);
    all.push_back((folder / "config.json").string());
    try {
      (void)bp::dflash_model::load(folder);
      BOOST_ERROR("expected blockpilot::error");
    } catch (const bp::error& e) {
      const std::string msg = e.what();
      BOOST_TEST_MESSAGE(msg);
      for (const auto& f : all) BOOST_TEST(msg.find(f) != std::string::npos, "\"" << f << "\" in: " << msg);
    }
  };
  config_error([](json& c) { c.erase("hidden_size"); }, {"field 'hidden_size'", "missing"});
  config_error([](json& c) { c["dflash_config"].erase("mask_token_id"); }, {"field 'mask_token_id'", "missing"});
  config_error([](json& c) { c["num_key_value_heads"] = 4; }, {"field 'num_key_value_heads'", "does not divide"});
  config_error([](json& c) { c["layer_types"][1] = "sliding_attention"; }, {"field 'layer_types'", "layer 1"});
  config_error([](json& c) { c["rope_parameters"]["rope_type"] = "yarn"; }, {"field 'rope_parameters.rope_type'", "yarn"});
  config_error([](json& c) { c["hidden_act"] = "gelu"; }, {"field 'hidden_act'"});
  config_error([](json& c) { c["architectures"] = {"DFlash2DraftModel"}; }, {"field 'architectures'"});
  config_error([](json& c) { c["dflash_config"]["target_layer_ids"] = {1, 30}; }, {"field 'target_layer_ids'", "30"});
  config_error([](json& c) { c.erase("num_target_layers"); }, {"field 'num_target_layers'", "missing"});
  config_error([](json& c) { c["head_dim"] = "64"; }, {"field 'head_dim'", "not an integer"});

  // Tensor errors name model.safetensors and the tensor.
  temp_dir dir("blockpilot_dflash");
  const auto folder = edited_checkpoint(dir, [](json& c) { c["intermediate_size"] = 256; });
  check_error([&] { (void)bp::dflash_model::load(folder); },
              {(folder / "model.safetensors").string(), "layers.0.mlp.gate_proj.weight", "field 'shape'", "[512, 576]",
               "[256, 576]"});
  edited_checkpoint(dir, [](json& c) { c["dflash_config"]["target_layer_ids"] = {1, 14, 27}; });
  check_error([&] { (void)bp::dflash_model::load(folder); }, {"tensor 'fc.weight'", "[576, 1152]", "[576, 1728]"});
  {
    edited_checkpoint(dir, [](json&) {});
    const auto file = bp::io::safetensors_file::read(folder / "model.safetensors");
    bp::io::safetensors_writer w;
    for (const auto& t : file.tensors()) w.add(t.name, t.type, t.shape, file.bytes(t));
    const std::vector<float> extra(4, 0.0f);
    w.add<float>("layers.0.attention_conv.base_kernel", {4}, extra);
    w.write(folder / "model.safetensors");
    check_error([&] { (void)bp::dflash_model::load(folder); }, {"layers.0.attention_conv.base_kernel", "not part of"});
  }

  // The drafter checks the target's tables against the checkpoint.
  const auto& ref = reference();
  bp::llama_weight narrow;
  narrow.values = bp::llama_matrix::Zero(256, 512);
  check_error([&] { bp::dflash_drafter d(tiny(), narrow, narrow); }, {"dflash_drafter", "field 'hidden_size'", "576"});
  bp::llama_weight few;
  few.values = ref.embedding.values.topRows(16);
  check_error([&] { bp::dflash_drafter d(tiny(), few, few); }, {"field 'vocab_size'", "49152", "16 tokens"});
  {  // a checkpoint whose vocab_size is not the target's
    const temp_dir dir;
    const auto other = bp::dflash_model::load(edited_checkpoint(dir, [](json& c) { c["vocab_size"] = 32000; }));
    check_error([&] { bp::dflash_drafter d(other, ref.embedding, ref.head); }, {"field 'vocab_size'", "32000", "256 tokens"});
    const auto unstated = bp::dflash_model::load(edited_checkpoint(dir, [](json& c) { c.erase("vocab_size"); }));
    check_error([&] { bp::dflash_drafter d(unstated, few, few); }, {"field 'mask_token_id'", "16"});
  }
  auto o = small_options();
  o.max_draft_rows = -1;
  check_error([&] { bp::dflash_drafter d(standin(), ref.embedding, ref.head, o); }, {"option 'max_draft_rows'"});
}

// --- with the real target -----------------------------------------------------------------------

namespace {

const bp::llama_model& model() { return blockpilot::testing::smollm2().model; }
std::vector<bp::token_id> chat(const char* message) { return blockpilot::testing::smollm2().tokenizer.encode_chat(message); }

bp::llama_verifier_options target_options(std::vector<int> feature_layers = {}) {
  bp::llama_verifier_options o;
  o.max_positions = 1024;
  o.max_block = 64;
  o.feature_layers = std::move(feature_layers);
  return o;
}

bp::dflash_options drafter_options() {
  bp::dflash_options o;
  o.max_positions = 1024;
  o.max_draft_rows = 31;
  return o;
}

/// Plain greedy decoding, one token per score call, ending after a stop token.
std::vector<bp::token_id> greedy_reference(bp::llama_verifier& v, std::span<const bp::token_id> prompt, int max_new,
                                           bp::token_id stop) {
  bp::matrix_view<const float> logits;
  BOOST_TEST_REQUIRE(v.prefill(prompt, logits) == bp::status::success);
  bp::token_id t;
  BOOST_TEST_REQUIRE(bp::cpu_detail::argmax_row(logits.row(0), t) == bp::status::success);
  std::vector<bp::token_id> out = {t};
  while (static_cast<int>(out.size()) < max_new && out.back() != stop) {
    BOOST_TEST_REQUIRE(v.score(std::span(out).last(1), logits) == bp::status::success);
    BOOST_TEST_REQUIRE(v.commit(1) == bp::status::success);
    BOOST_TEST_REQUIRE(bp::cpu_detail::argmax_row(logits.row(0), t) == bp::status::success);
    out.push_back(t);
  }
  return out;
}

const char* const messages[] = {"Write a short poem about the sea.", "What is the capital of France?"};

}  // namespace

BOOST_AUTO_TEST_SUITE(smollm2_target, *boost::unit_test::precondition(smollm2_present))

// Losslessness: whatever the (random) drafter proposes, greedy speculative decoding is the target's
// plain greedy decoding, token for token, up to and including the stop token; the decoder wires the
// verifier's features of the target layer ids into the drafter.
BOOST_AUTO_TEST_CASE(greedy_decode_equals_plain_greedy) {
  constexpr int b = 4;
  const bp::token_id eos = blockpilot::testing::smollm2().tokenizer.eos_id();
  bp::llama_verifier target(model(), target_options(tiny().config().target_layer_ids)), plain(model(), target_options());
  bp::dflash_drafter drafter(tiny(), model(), drafter_options());
  bp::speculative_decoder<bp::dflash_drafter, bp::llama_verifier, bp::runtime_block_size> decoder(
      drafter, target, bp::runtime_block_size{b});
  for (const char* message : messages) {
    BOOST_TEST_CONTEXT(message) {
      const auto prompt = chat(message);
      bp::generation_config c;
      c.max_new_tokens = 40;
      c.stop_tokens = {eos};
      bp::generation_result r;
      BOOST_TEST_REQUIRE(decoder.generate(prompt, c, r) == bp::status::success);
      BOOST_TEST(r.tokens == greedy_reference(plain, prompt, 40, eos), boost::test_tools::per_element());
      BOOST_TEST_MESSAGE("random DFlash drafter, b = " << b << ": tau " << r.stats.tau());
      BOOST_TEST(r.stats.tau() >= 1.0);
      // The draft cache holds the prompt and every committed token but the last anchor (up to a block
      // more when the length cap cut the last step's tokens).
      BOOST_TEST(drafter.context_rows() >= static_cast<std::int64_t>(prompt.size() + r.tokens.size()) - 1);
      BOOST_TEST(drafter.context_rows() <= static_cast<std::int64_t>(prompt.size() + r.tokens.size()) + b);
    }
  }
}

// The whole C++ decode loop with the DFlash drafter at T = 0 and b = 16 reproduces transformers' greedy
// continuations of the target (test/data/llama_reference.json, made by make_llama_reference.py).
BOOST_AUTO_TEST_CASE(greedy_decode_reproduces_transformers) {
  const auto path = data_dir() / "llama_reference.json";
  BOOST_TEST_REQUIRE(fs::is_regular_file(path), path.string() << " is absent (run test/data/make_llama_reference.py)");
  const auto reference = json::parse(std::ifstream(path));
  auto o = target_options(tiny().config().target_layer_ids);
  o.max_positions = 2048;
  bp::llama_verifier target(model(), o);
  auto d = drafter_options();
  d.max_positions = 2048;
  bp::dflash_drafter drafter(tiny(), model(), d);
  bp::speculative_decoder<bp::dflash_drafter, bp::llama_verifier, bp::fixed_block_size<16>> decoder(drafter, target);
  for (const auto& c : reference.at("cases")) {
    const auto prompt = c.at("prompt").get<std::vector<bp::token_id>>();
    const auto greedy = c.at("greedy").get<std::vector<bp::token_id>>();
    BOOST_TEST_CONTEXT(c.at("source").get<std::string>() << " line " << c.at("line").get<int>()) {
      bp::generation_config config;
      config.max_new_tokens = static_cast<int>(greedy.size());
      bp::generation_result r;
      BOOST_TEST_REQUIRE(decoder.generate(prompt, config, r) == bp::status::success);
      BOOST_TEST(r.tokens == greedy, boost::test_tools::per_element());
      BOOST_TEST_MESSAGE("random DFlash drafter, b = 16: tau " << r.stats.tau());
    }
  }
}

// At T = 1 rejection sampling (which reads q) and sample-and-match run, reproducibly from the seed.
BOOST_AUTO_TEST_CASE(sampled_decoding_runs) {
  const auto prompt = chat(messages[0]);
  bp::llama_verifier target(model(), target_options(tiny().config().target_layer_ids));
  bp::dflash_drafter drafter(tiny(), model(), drafter_options());
  bp::speculative_decoder<bp::dflash_drafter, bp::llama_verifier, bp::fixed_block_size<8>, bp::rejection_sampling>
      rejection(drafter, target);
  bp::speculative_decoder<bp::dflash_drafter, bp::llama_verifier, bp::fixed_block_size<8>, bp::sample_and_match>
      match(drafter, target);
  bp::generation_config c;
  c.max_new_tokens = 24;
  c.temperature = 1.0f;
  c.seed = 7;
  bp::generation_result first, second;
  BOOST_TEST_REQUIRE(rejection.generate(prompt, c, first) == bp::status::success);
  BOOST_TEST_REQUIRE(rejection.generate(prompt, c, second) == bp::status::success);
  BOOST_TEST(first.tokens.size() == 24u);
  BOOST_TEST(first.tokens == second.tokens, boost::test_tools::per_element());
  BOOST_TEST_MESSAGE("T = 1, b = 8: rejection sampling tau " << first.stats.tau());
  BOOST_TEST_REQUIRE(match.generate(prompt, c, second) == bp::status::success);
  BOOST_TEST(second.tokens.size() == 24u);
  BOOST_TEST_MESSAGE("T = 1, b = 8: sample-and-match tau " << second.stats.tau());
}

// The target's tables in either quantised storage: the embedding decoded row by row (from the file's
// blocks or the regrouped ones) and the head run with the target's kernels for the storage give the
// logits of the fp32 tables (fp32 activations: within float rounding; int8 activations: within the
// rounding of the head's input to int8, and the fp32 tables' draft wherever their top-2 margin is wider
// than twice that).
BOOST_AUTO_TEST_CASE(quantized_target_tables) {
  bp::llama_verifier target(model(), target_options(tiny().config().target_layer_ids));
  const auto prompt = chat(messages[1]);
  bp::matrix_view<const float> logits;
  BOOST_TEST_REQUIRE(target.prefill(prompt, logits) == bp::status::success);
  for (const auto storage : {bp::llama_storage::quantized, bp::llama_storage::quantized_int8}) {
    BOOST_TEST_CONTEXT((storage == bp::llama_storage::quantized ? "quantized" : "quantized_int8")) {
      const auto quantized = bp::llama_model::load(smollm2_path(), storage);
      BOOST_TEST_REQUIRE(quantized.output().quantized());
      bp::dflash_drafter a(tiny(), model(), drafter_options()), b(tiny(), quantized, drafter_options());
      std::vector<bp::token_id> da(15), db(15);
      const auto context = context_for(static_cast<std::int64_t>(prompt.size()), 504);
      for (auto* d : {&a, &b}) {
        BOOST_TEST_REQUIRE(d->begin(prompt) == bp::status::success);
        BOOST_TEST_REQUIRE(d->append_context(target.context_features()) == bp::status::success);
      }
      BOOST_TEST_REQUIRE(a.draft({context, 16, 0.0f, {}}, da) == bp::status::success);
      BOOST_TEST_REQUIRE(b.draft({context, 16, 0.0f, {}}, db) == bp::status::success);
      const bp::llama_matrix expected = Eigen::Map<const bp::llama_matrix>(a.logits().data, a.logits().rows, a.logits().cols);
      const double worst = max_abs_difference(b.logits(), expected);
      // The quantised head sums in another order than the fp32 one (and than itself on another CPU's
      // kernels); the int8 head also rounds its activations (measured 0.12, logits span about 30).
      const bool int8 = storage == bp::llama_storage::quantized_int8;
      const double tolerance = int8 ? 0.5 : 1e-4;
      BOOST_TEST_MESSAGE("max |logit difference| " << worst);
      if (int8) BOOST_TEST(worst > 0.0);  // the int8 path ran
      BOOST_TEST(worst <= tolerance);
      for (Eigen::Index j = 0; j < expected.rows(); ++j) {  // the same draft wherever the top-2 margin allows
        std::vector<float> row(expected.row(j).data(), expected.row(j).data() + expected.cols());
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
        if (row[0] - row[1] > 2 * tolerance) BOOST_TEST(da[static_cast<std::size_t>(j)] == db[static_cast<std::size_t>(j)]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(target_layer_ids_beyond_the_target) {
  temp_dir dir("blockpilot_dflash");
  const auto folder = edited_checkpoint(dir, [](json& c) {
    c.erase("num_target_layers");
    c["dflash_config"]["target_layer_ids"] = {1, 31};
  });
  const auto draft = bp::dflash_model::load(folder);
  check_error([&] { bp::dflash_drafter d(draft, model()); },
              {"dflash_drafter", "field 'target_layer_ids'", "layer 31", "30 decoder layers", smollm2_path().string()});
}

BOOST_AUTO_TEST_SUITE_END()
