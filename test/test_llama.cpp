// Tests of models/llama.hpp on SmolLM2-135M (skipped when the GGUF is absent): batched scoring equals
// one-at-a-time scoring, commit crops the cache, chunked prefill, context features, quantised storage
// against fp32 storage, and both against Hugging Face transformers on the same file
// (test/data/llama_reference.json: greedy continuations and last-row logits). The quantised blocks
// themselves are tested on synthetic data (no model needed).
#define BOOST_TEST_MODULE llama
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "support/gguf_writer.hpp"
#include "support/smollm2.hpp"
#include "support/source_paths.hpp"
#include "support/temp_dir.hpp"
#include "blockpilot_workbench/models/kernels/attention.hpp"
#include "blockpilot_workbench/models/kernels/huge_pages.hpp"
#include "blockpilot_workbench/models/kernels/int8_products.hpp"
#include "blockpilot_workbench/models/kernels/panel_products.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"
#include "blockpilot_workbench/models/quantized_matrix.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "blockpilot/blockpilot.hpp"

namespace bp = blockpilot;
namespace fs = std::filesystem;

namespace {
using blockpilot::testing::smollm2_path;
using blockpilot::testing::smollm2_present;


/// Loaded once for all test cases, in each storage.
const bp::llama_model& model(bp::llama_storage storage = bp::llama_storage::fp32) {
  const auto load = [](bp::llama_storage s) {
    auto loaded = std::make_unique<bp::llama_model>(bp::llama_model::load(smollm2_path(), s));
    BOOST_TEST_MESSAGE("loaded " << loaded->parameter_count() << " parameters (" << loaded->weight_bytes()
                                 << " bytes) in " << loaded->load_seconds() << " s");
    return loaded;
  };
  static std::unique_ptr<bp::llama_model> loaded[3];
  auto& m = loaded[static_cast<int>(storage)];
  if (!m) m = load(storage);
  return *m;
}

/// The reference next to this source file (or found from the working directory).
fs::path reference_path() {
  if (const char* p = std::getenv("BLOCKPILOT_LLAMA_REFERENCE")) return p;
  return blockpilot::testing::test_data_dir() / "llama_reference.json";
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

/// The instruction-set variants this CPU runs (generic first); the log names those it cannot.
std::vector<bp::cpu_isa> runnable_isas() {
  std::vector<bp::cpu_isa> out;
  for (auto isa : {bp::cpu_isa::generic, bp::cpu_isa::avx2, bp::cpu_isa::avx512, bp::cpu_isa::avx512_vnni})
    if (isa <= bp::detected_cpu_isa())
      out.push_back(isa);
    else
      BOOST_TEST_MESSAGE("not compared here: the " << bp::to_string(isa) << " kernels (this CPU lacks them)");
  return out;
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
/// Quantised vs fp32 storage, relative as above (measured: at most 4.2e-5).
constexpr double quantized_tolerance = 2e-4;
/// Absolute, on logits of magnitude ~30: this forward (either storage) against transformers' float32
/// forward, each with its own float32 rounding (measured: at most 6.8e-5 over the reference prompts;
/// transformers' float32 itself is up to 4.5e-5 from its float64 forward).
constexpr double logit_tolerance = 5e-4;

/// Greedy continuations (exactly equal) and last-row logits (within logit_tolerance) of every case of
/// the transformers reference, with the model in `storage`.
void check_against_transformers(bp::llama_storage storage) {
  const auto path = reference_path();
  BOOST_TEST_REQUIRE(fs::is_regular_file(path), path.string() << " is absent (run test/data/make_llama_reference.py)");
  const auto reference = nlohmann::json::parse(std::ifstream(path));
  const auto& m = model(storage);
  const char* name = storage == bp::llama_storage::fp32 ? "fp32" : "quantised";
  bp::llama_verifier v(m, opts(32));
  bp::matrix_view<const float> logits;
  double worst_logit = 0;
  std::size_t matched = 0, cases = 0;
  for (const auto& c : reference.at("cases")) {
    const auto prompt = c.at("prompt").get<std::vector<bp::token_id>>();
    const auto greedy = c.at("greedy").get<std::vector<bp::token_id>>();
    BOOST_TEST_CONTEXT(name << " storage, " << c.at("source").get<std::string>() << " line " << c.at("line").get<int>()
                            << " (" << prompt.size() << " tokens)") {
      ++cases;
      BOOST_TEST(prompt.front() == m.find_token("<|im_start|>"));
      BOOST_TEST_REQUIRE(v.prefill(prompt, logits) == bp::status::success);
      const auto row = logits.row(0);
      // Last-row logits: the top 50 of the reference, a strided sample of the row, and logsumexp.
      double worst = 0;
      const auto ids = c.at("top_ids").get<std::vector<std::int64_t>>();
      const auto top = c.at("top_values").get<std::vector<double>>();
      for (std::size_t i = 0; i < ids.size(); ++i) worst = std::max(worst, std::abs(row[ids[i]] - top[i]));
      const auto stride = c.at("stride").get<std::size_t>();
      const auto strided = c.at("strided_values").get<std::vector<double>>();
      for (std::size_t i = 0; i < strided.size(); ++i) worst = std::max(worst, std::abs(row[i * stride] - strided[i]));
      double peak = -INFINITY, sum = 0;
      for (float x : row) peak = std::max(peak, double(x));
      for (float x : row) sum += std::exp(double(x) - peak);
      const double lse = peak + std::log(sum);
      BOOST_TEST_MESSAGE(name << ": prompt of " << prompt.size() << " tokens: max |logit - transformers| = " << worst
                              << " (transformers float32 vs float64: " << c.at("float32_vs_float64_max_abs").get<double>()
                              << "), |logsumexp - transformers| = " << std::abs(lse - c.at("logsumexp").get<double>()));
      BOOST_TEST(worst <= logit_tolerance);
      BOOST_TEST(std::abs(lse - c.at("logsumexp").get<double>()) <= logit_tolerance);
      worst_logit = std::max(worst_logit, worst);
      const auto first = argmax(row);
      BOOST_TEST(first == c.at("argmax").get<bp::token_id>());

      // Verification as in speculative decoding: the whole reference continuation scored in one block
      // predicts each of its own next tokens.
      BOOST_TEST_REQUIRE(v.score(greedy, logits) == bp::status::success);
      for (std::size_t j = 0; j + 1 < greedy.size(); ++j) BOOST_TEST(argmax(logits.row(std::int64_t(j))) == greedy[j + 1]);
      BOOST_TEST_REQUIRE(v.commit(0) == bp::status::success);

      // Autoregressive greedy decoding, one token per score call.
      std::vector<bp::token_id> out = {first};
      while (out.size() < greedy.size()) {
        BOOST_TEST_REQUIRE(v.score(std::span(out).last(1), logits) == bp::status::success);
        BOOST_TEST_REQUIRE(v.commit(1) == bp::status::success);
        out.push_back(argmax(logits.row(0)));
      }
      BOOST_TEST(out == greedy, boost::test_tools::per_element());
      matched += out == greedy;
    }
  }
  BOOST_TEST_MESSAGE(name << " storage: " << matched << " of " << cases << " greedy continuations of "
                          << reference.at("greedy_tokens").get<int>() << " tokens equal to transformers; max |logit difference| "
                          << worst_logit << " (tolerance " << logit_tolerance << ")");
  BOOST_TEST(cases >= 5u);
}

}  // namespace

// Quantised blocks on synthetic data: decoding equals the GGUF reader's dequantisation bit for bit; the
// dot product on the blocks equals a float64 dot product of the decoded row up to float rounding.
BOOST_AUTO_TEST_SUITE(quantized_blocks)

/// `rows` rows of `cols` elements of type t: random quants, scales and offsets of moderate size.
std::vector<std::byte> random_blocks(bp::io::ggml_type t, std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::vector<std::byte> bytes(static_cast<std::size_t>(rows * cols / 32 * bp::io::block_bytes(t)));
  std::uint32_t state = seed;
  const auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (auto& b : bytes) b = static_cast<std::byte>(next() >> 24);
  const auto half = [&](std::byte* at) {  // sign, exponent 9..14 (2^-6 .. 2^-1), random mantissa
    const auto r = next();
    const auto bits = static_cast<std::uint16_t>((r >> 31) << 15 | (9 + (r >> 8) % 6) << 10 | (r & 0x3ffu));
    at[0] = static_cast<std::byte>(bits & 0xff);
    at[1] = static_cast<std::byte>(bits >> 8);
  };
  const std::size_t block = bp::io::block_bytes(t);
  for (std::size_t at = 0; at < bytes.size(); at += block) {
    half(&bytes[at]);
    if (t == bp::io::ggml_type::q4_1) half(&bytes[at + 2]);
  }
  return bytes;
}

/// max over y [b][rows] (row i at y + i ldy) of |y - exact| / Σ |products|, with exact the float64 product
/// of x [b][cols] and the weights w [rows][cols].
template <class X>
double worst_relative_error(std::span<const float> w, const std::vector<X>& x, int b, std::int64_t rows, std::int64_t cols,
                            const std::vector<float>& y, std::ptrdiff_t ldy) {
  double worst = 0;
  for (int i = 0; i < b; ++i)
    for (std::int64_t o = 0; o < rows; ++o) {
      double exact = 0, magnitude = 0;
      for (std::int64_t j = 0; j < cols; ++j) {
        const double p = double(w[static_cast<std::size_t>(o * cols + j)]) * double(x[static_cast<std::size_t>(i * cols + j)]);
        exact += p;
        magnitude += std::abs(p);
      }
      worst = std::max(worst, std::abs(y[static_cast<std::size_t>(i * ldy + o)] - exact) / (magnitude + 1e-30));
    }
  return worst;
}

/// `m` [rows][cols] (decoded to `w`) times x [b][cols] with every runnable variant, every b in 1..19
/// (one to three row groups, every remainder), against float64 products of the decoded rows: within
/// float rounding of the sum of |products|; a sub-range of output columns, accumulating, touches
/// only its columns.
template <class Weights>  // cpu_kernels::weight_rows_view or f32_panels
void check_products(const Weights& m, std::span<const float> w, std::int64_t rows, std::int64_t cols) {
  for (int b = 1; b <= 19; ++b) {
    std::vector<float> x(static_cast<std::size_t>(b * cols));
    for (std::size_t j = 0; j < x.size(); ++j) x[j] = std::sin(0.37f * static_cast<float>(j) + 0.11f * b) * 3.0f;
    for (const auto isa : runnable_isas()) {
      BOOST_TEST_CONTEXT(bp::to_string(isa) << ", b = " << b) {
        const std::ptrdiff_t ldy = rows + 3;  // padded rows of y
        std::vector<float> y(static_cast<std::size_t>(b * ldy), -7.0f);
        bp::cpu_kernels::multiply_rows(isa, m, x.data(), cols, b, 0, rows, y.data(), ldy, false);
        BOOST_TEST(worst_relative_error(w, x, b, rows, cols, y, ldy) <= 1e-6);
        for (int i = 0; i < b; ++i) BOOST_TEST(y[static_cast<std::size_t>(i * ldy + rows)] == -7.0f);
        for (int i = 0; i < b; ++i) {  // a row's products are the same bits alone as among b rows
          std::vector<float> alone(static_cast<std::size_t>(rows));
          bp::cpu_kernels::multiply_rows(isa, m, x.data() + i * cols, cols, 1, 0, rows, alone.data(), rows, false);
          BOOST_TEST(std::ranges::equal(alone, std::span(y).subspan(static_cast<std::size_t>(i * ldy), alone.size())),
                     "row " << i << " of " << b);
        }
        auto acc = y;  // columns [2, 5) accumulated a second time
        bp::cpu_kernels::multiply_rows(isa, m, x.data(), cols, b, 2, 3, acc.data(), ldy, true);
        for (int i = 0; i < b; ++i)
          for (std::int64_t o = 0; o < rows; ++o) {
            const auto at = static_cast<std::size_t>(i * ldy + o);
            BOOST_TEST(acc[at] == (o >= 2 && o < 5 ? y[at] + y[at] : y[at]));
          }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(decode_and_products) {
  for (const auto t : {bp::io::ggml_type::q4_0, bp::io::ggml_type::q4_1, bp::io::ggml_type::q8_0})
    for (const std::int64_t cols : {32, 576, 96, 48}) {
      if (!bp::cpu_detail::quantized_matrix::supports(t, cols)) {
        BOOST_TEST(cols % 32 != 0);
        BOOST_CHECK_THROW(bp::cpu_detail::quantized_matrix(t, cols), bp::error);
        continue;
      }
      BOOST_TEST_CONTEXT(bp::io::to_string(t) << ", " << cols << " columns") {
        const std::int64_t rows = 7;
        const auto bytes = random_blocks(t, rows, cols, static_cast<std::uint32_t>(cols) * 31u + static_cast<std::uint32_t>(t));
        bp::cpu_detail::quantized_matrix m(t, cols);
        const std::size_t split = static_cast<std::size_t>(3 * cols / 32 * bp::io::block_bytes(t));
        m.append(std::span(bytes).first(split), 3);  // appended in two parts, as q/k/v are stacked
        m.append(std::span(bytes).subspan(split), rows - 3);
        BOOST_TEST(m.rows() == rows);
        BOOST_TEST(m.bytes() == bytes.size());
        std::vector<float> expected(static_cast<std::size_t>(rows * cols)), decoded(expected.size());
        bp::io::dequantize(t, bytes, expected);
        m.decode(0, rows, decoded.data());
        BOOST_TEST(decoded == expected, boost::test_tools::per_element());
        check_products(m.view(), expected, rows, cols);
      }
    }
  BOOST_CHECK_THROW(bp::cpu_detail::quantized_matrix(bp::io::ggml_type::q6_k, 256), bp::error);
  bp::cpu_detail::quantized_matrix m(bp::io::ggml_type::q8_0, 64);
  BOOST_CHECK_THROW(m.append(std::vector<std::byte>(67), 1), bp::error);
}

// int8 activations: the regrouped blocks decode to the file's values; each activation element lies
// within half a step of its value; the VNNI kernel equals the portable one bit for bit; both equal
// float64 products of the decoded weights and the decoded activations within float rounding, for every
// b in 1..19, rows that fill one group and part of another, and column ranges that cut groups.
BOOST_AUTO_TEST_CASE(int8_products) {
  namespace k = bp::cpu_kernels;
  BOOST_TEST(!k::interleaved_blocks::supports(bp::io::ggml_type::q4_1, 48));
  BOOST_TEST(!k::interleaved_blocks::supports(bp::io::ggml_type::f32, 64));
  BOOST_CHECK_THROW(k::interleaved_blocks(bp::cpu_kernels::weight_rows_view{bp::io::ggml_type::f32, nullptr, 0, 64}, 1),
                    bp::error);
  for (const auto t : {bp::io::ggml_type::q4_0, bp::io::ggml_type::q4_1, bp::io::ggml_type::q8_0})
    for (const std::int64_t cols : {32, 576, 96})
      for (const std::int64_t rows : {21, 37}) {  // groups of 16: a pair, and a pair and one alone
        const auto bytes = random_blocks(t, rows, cols, static_cast<std::uint32_t>(cols) * 7u + static_cast<std::uint32_t>(t));
        bp::cpu_detail::quantized_matrix m(t, cols);
        m.append(bytes, rows);
        const k::interleaved_blocks g(m.view(), rows);
        BOOST_TEST(g.bytes() == static_cast<std::size_t>((rows + 15) / 16 * 16 * cols / 32) * bp::io::block_bytes(t));
        std::vector<float> w(static_cast<std::size_t>(rows * cols)), row(static_cast<std::size_t>(cols));
        m.decode(0, rows, w.data());
        for (std::int64_t r = 0; r < rows; ++r) {
          g.decode(r, row.data());
          BOOST_TEST(std::equal(row.begin(), row.end(), w.begin() + r * cols), "row " << r << " decodes to the file's values");
        }
        for (int b = 1; b <= 19; ++b) {
          BOOST_TEST_CONTEXT(bp::io::to_string(t) << ", " << rows << " x " << cols << ", b = " << b) {
            const std::ptrdiff_t ldx = cols + 5;
            std::vector<float> x(static_cast<std::size_t>(b * ldx));
            for (std::size_t j = 0; j < x.size(); ++j)
              x[j] = std::sin(0.37f * static_cast<float>(j) + 0.11f * b) * (j % 97 == 0 ? 40.0f : 3.0f);  // with outliers
            if (b == 2) std::fill_n(x.begin() + ldx, 32, 0.0f);  // a block of zeros: scale 0
            k::int8_activations a;
            k::quantize_activations(bp::cpu_isa::generic, t, x.data(), ldx, b, cols, a);
            for (const auto isa : runnable_isas()) {  // every variant quantises alike
              k::int8_activations other;
              k::quantize_activations(isa, t, x.data(), ldx, b, cols, other);
              BOOST_TEST((other.values == a.values && other.scales == a.scales && other.zero_offsets == a.zero_offsets &&
                          other.scaled_sums == a.scaled_sums), bp::to_string(isa));
            }
            std::vector<double> xd(static_cast<std::size_t>(b * cols));
            double worst_step = 0;
            for (int i = 0; i < b; ++i)
              for (std::int64_t j = 0; j < cols; ++j) {
                const auto at = static_cast<std::size_t>(i * cols + j);
                const double d = a.scales[a.at(i, j / 32)];
                const int q = a.value(i, j);
                BOOST_TEST(std::abs(q) <= 127);
                xd[at] = q * d;
                worst_step = std::max(worst_step, std::abs(xd[at] - x[static_cast<std::size_t>(i * ldx + j)]) / (d > 0 ? d : 1.0));
              }
            BOOST_TEST(worst_step <= 0.5 + 1e-5);
            std::vector<float> reference_y;
            for (const auto isa : runnable_isas()) {
              const std::ptrdiff_t ldy = rows + 1;
              std::vector<float> y(static_cast<std::size_t>(b * ldy), -7.0f);
              k::multiply_rows_int8(isa, g, a, 0, rows, y.data(), ldy, false);
              const double worst = worst_relative_error(w, xd, b, rows, cols, y, ldy);
              BOOST_TEST(worst <= 1e-5, bp::to_string(isa) << ": " << worst);
              for (int i = 0; i < b; ++i) BOOST_TEST(y[static_cast<std::size_t>(i * ldy + rows)] == -7.0f);
              if (reference_y.empty())
                reference_y = y;
              else
                BOOST_TEST(y == reference_y, boost::test_tools::per_element());  // every variant, bit for bit
              auto acc = y;
              k::multiply_rows_int8(isa, g, a, 3, 15, acc.data(), ldy, true);  // rows 3..17: across the groups
              for (int i = 0; i < b; ++i)
                for (std::int64_t o = 0; o < rows; ++o) {
                  const auto at = static_cast<std::size_t>(i * ldy + o);
                  BOOST_TEST(acc[at] == (o >= 3 && o < 18 ? y[at] + y[at] : y[at]));
                }
            }
          }
        }
      }
}

// A block of activations holding a NaN or an infinity (at either end of a vector's lanes) is stored as
// q = 0 with a NaN scale by every variant, so that every product of its row is NaN, as in float
// arithmetic; the other rows' products stay finite and every variant stores the same bytes, also for a
// block so small that its reciprocal scale overflows.
BOOST_AUTO_TEST_CASE(int8_products_of_non_finite_activations) {
  namespace k = bp::cpu_kernels;
  const std::int64_t rows = 21, cols = 96;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (const auto t : {bp::io::ggml_type::q4_0, bp::io::ggml_type::q4_1, bp::io::ggml_type::q8_0})
    for (const int lane : {0, 7, 15, 16, 31}) {
      BOOST_TEST_CONTEXT(bp::io::to_string(t) << ", lane " << lane) {
        bp::cpu_detail::quantized_matrix m(t, cols);
        m.append(random_blocks(t, rows, cols, 11u + static_cast<std::uint32_t>(t)), rows);
        const k::interleaved_blocks g(m.view(), rows);
        const int b = 4;
        std::vector<float> x(static_cast<std::size_t>(b * cols));
        for (std::size_t j = 0; j < x.size(); ++j) x[j] = std::cos(0.29f * static_cast<float>(j)) * 2.0f;
        x[static_cast<std::size_t>(0 * cols + 32 + lane)] = nan;
        x[static_cast<std::size_t>(1 * cols + 64 + lane)] = inf;
        x[static_cast<std::size_t>(2 * cols + lane)] = -inf;
        for (int j = 0; j < 32; ++j) x[static_cast<std::size_t>(3 * cols + 64 + j)] = 1e-38f * static_cast<float>(j % 5) - 2e-38f;
        k::int8_activations a;
        k::quantize_activations(bp::cpu_isa::generic, t, x.data(), cols, b, cols, a);
        const std::pair<int, std::int64_t> non_finite[] = {{0, 1}, {1, 2}, {2, 0}};
        for (const auto& [i, block] : non_finite) {
          BOOST_TEST(std::isnan(a.scales[a.at(i, block)]));
          BOOST_TEST(std::isnan(a.scaled_sums[a.at(i, block)]));
          for (int j = 0; j < 32; ++j) BOOST_TEST(a.value(i, 32 * block + j) == 0);
        }
        BOOST_TEST(std::isfinite(a.scales[a.at(0, 0)]));
        BOOST_TEST(std::isfinite(a.scales[a.at(3, 2)]));
        std::vector<float> reference_y;
        for (const auto isa : runnable_isas()) {
          BOOST_TEST_CONTEXT(bp::to_string(isa)) {
            k::int8_activations other;
            k::quantize_activations(isa, t, x.data(), cols, b, cols, other);
            BOOST_TEST((other.values == a.values && other.zero_offsets == a.zero_offsets));
            BOOST_TEST(same_bits(other.scales, a.scales));
            BOOST_TEST(same_bits(other.scaled_sums, a.scaled_sums));
            std::vector<float> y(static_cast<std::size_t>(b * rows));
            k::multiply_rows_int8(isa, g, other, 0, rows, y.data(), rows, false);
            for (int i = 0; i < b; ++i)
              for (std::int64_t o = 0; o < rows; ++o)
                BOOST_TEST((i < 3 ? std::isnan(y[static_cast<std::size_t>(i * rows + o)]) : std::isfinite(y[static_cast<std::size_t>(i * rows + o)])),
                           "row " << i << ", output " << o);
            if (reference_y.empty()) reference_y = y;
            BOOST_TEST(std::equal(y.begin() + 3 * rows, y.end(), reference_y.begin() + 3 * rows));
          }
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(fp32_products) {
  const std::int64_t rows = 9, cols = 160;
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  for (std::size_t j = 0; j < w.size(); ++j) w[j] = std::cos(0.21f * static_cast<float>(j)) * 0.5f;
  check_products(bp::cpu_kernels::weight_rows_view{bp::io::ggml_type::f32, reinterpret_cast<const std::byte*>(w.data()), cols * sizeof(float), cols}, w, rows, cols);
  // the same rows in panels of 16: one panel and a remainder; 40 rows: panels taken in pairs and alone
  check_products(bp::cpu_kernels::f32_panels(w.data(), cols, rows, cols), w, rows, cols);
  std::vector<float> more(static_cast<std::size_t>(40 * cols));
  for (std::size_t j = 0; j < more.size(); ++j) more[j] = std::sin(0.13f * static_cast<float>(j)) * 0.5f;
  const bp::cpu_kernels::f32_panels panels(more.data(), cols, 40, cols);
  check_products(panels, more, 40, cols);
  std::vector<float> row(static_cast<std::size_t>(cols));
  panels.decode(37, row.data());
  BOOST_TEST(std::ranges::equal(row, std::span(more).subspan(static_cast<std::size_t>(37 * cols), row.size())));
  BOOST_TEST(!bp::cpu_kernels::supports(bp::io::ggml_type::f32, 48));
  BOOST_TEST(!bp::cpu_kernels::supports(bp::io::ggml_type::q6_k, 256));
}

// The weights' pool: pieces 64-byte aligned and apart, small ones sharing a chunk, large ones in their
// own, every chunk back when its last piece is.
BOOST_AUTO_TEST_CASE(huge_page_pool_pieces) {
  auto& pool = bp::cpu_kernels::huge_page_pool::instance();
  const auto before = pool.chunks();
  std::vector<std::pair<std::byte*, std::size_t>> pieces;
  for (const std::size_t bytes : {1, 100, 4096, 300000, 1 << 20, 9 << 20, 40 << 20, 700000})
    pieces.emplace_back(static_cast<std::byte*>(pool.allocate(bytes)), bytes);
  BOOST_TEST(pool.chunks() - before <= 4u);  // the small pieces in one or two chunks, 9 and 40 MiB alone
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(pieces[i].first) % 64 == 0u);
    std::memset(pieces[i].first, static_cast<int>(i + 1), pieces[i].second);
  }
  for (std::size_t i = 0; i < pieces.size(); ++i)  // nothing overwrote another piece
    BOOST_TEST((pieces[i].first[0] == std::byte(i + 1) && pieces[i].first[pieces[i].second - 1] == std::byte(i + 1)));
  for (auto [p, bytes] : pieces) pool.deallocate(p);
  BOOST_TEST(pool.chunks() == before);
}

// The attention kernels on synthetic keys and values, for every runnable variant: scores and outputs
// against float64 sums within float rounding, for 1..9 queries (every tile remainder) of one head or of
// three gathered (the positions they see rising, or rising and starting again) at positions that start,
// cross and end key blocks (and end in each vector of a pass), heads of 16, 64 and 80 dimensions (80: the
// outputs' narrow passes); each query's scores and outputs are the same bits computed alone; the positions
// a query does not see are never read; heads that are not a multiple of 16 are refused.
BOOST_AUTO_TEST_CASE(attention_kernels) {
  namespace k = bp::cpu_kernels;
  for (const int d : {16, 64, 80})
    for (const std::int64_t start : {0, 1, 20, 40, 62, 63, 64, 130}) {
      const int most = 9;
      const auto columns = k::attention_columns(start + most);
      const std::ptrdiff_t ldb = 2 * d * k::attention_block;  // a second head's blocks between this one's
      std::vector<float> keys(static_cast<std::size_t>(columns / k::attention_block * ldb), std::nanf(""));
      std::vector<float> values(static_cast<std::size_t>(columns * 2 * d), std::nanf(""));
      const auto key = [&](std::int64_t t, int j) -> float& {
        return keys[static_cast<std::size_t>(t / k::attention_block * ldb + j * k::attention_block + t % k::attention_block)];
      };
      for (std::int64_t t = 0; t < columns; ++t)
        for (int j = 0; j < d; ++j) key(t, j) = t < start + most ? std::sin(0.3f * static_cast<float>(t * d + j)) : 0.0f;
      for (std::int64_t t = 0; t < start + most; ++t)  // (positions beyond stay NaN: never read)
        for (int j = 0; j < d; ++j) values[static_cast<std::size_t>(t * 2 * d + j)] = std::cos(0.7f * static_cast<float>(t + 3 * j));
      for (const int heads : {1, 3})
      for (int queries = 1; queries <= most; ++queries) {
        std::vector<float> q(static_cast<std::size_t>(queries * d));
        for (std::size_t j = 0; j < q.size(); ++j) q[j] = std::cos(0.11f * static_cast<float>(j) + 0.5f * queries);
        // the verifier gathers the rows of the heads that share a KV head: the positions seen rise within
        // each head's rows and start again with the next head's (the rest of queries / heads: one more head)
        std::vector<std::int64_t> visible(static_cast<std::size_t>(queries));
        const int head_rows = std::max(1, queries / heads);
        for (int i = 0; i < queries; ++i) visible[static_cast<std::size_t>(i)] = start + i % head_rows + 1;
        const auto total = start + head_rows;
        const std::ptrdiff_t lds = columns;
        for (const auto isa : runnable_isas())
          BOOST_TEST_CONTEXT(bp::to_string(isa) << ", d = " << d << ", start = " << start << ", " << queries << " queries of " << heads << " heads") {
            std::vector<float> s(static_cast<std::size_t>(queries * lds)), o(static_cast<std::size_t>(queries * d));
            k::attention_scores(isa, {q.data(), d, queries, d, keys.data(), ldb, total, 0.125f, s.data(), lds});
            for (int i = 0; i < queries; ++i)  // the probabilities: any non-negative weights will do
              for (std::int64_t t = 0; t < total; ++t)
                s[static_cast<std::size_t>(i * lds + t)] = std::abs(s[static_cast<std::size_t>(i * lds + t)]);
            k::attention_output(isa, {s.data(), lds, visible.data(), queries, d, values.data(), 2 * d, o.data(), d});
            double worst_score = 0, worst_output = 0;
            for (int i = 0; i < queries; ++i) {
              for (std::int64_t t = 0; t < total; ++t) {
                double exact = 0, magnitude = 0;
                for (int j = 0; j < d; ++j) {
                  const double p = double(q[static_cast<std::size_t>(i * d + j)]) * key(t, j);
                  exact += p;
                  magnitude += std::abs(p);
                }
                worst_score = std::max(worst_score, std::abs(s[static_cast<std::size_t>(i * lds + t)] - 0.125 * std::abs(exact)) / magnitude);
              }
              for (int j = 0; j < d; ++j) {
                double exact = 0, magnitude = 0;
                for (std::int64_t t = 0; t < visible[static_cast<std::size_t>(i)]; ++t) {
                  const double p = double(s[static_cast<std::size_t>(i * lds + t)]) * values[static_cast<std::size_t>(t * 2 * d + j)];
                  exact += p;
                  magnitude += std::abs(p);
                }
                worst_output = std::max(worst_output, std::abs(o[static_cast<std::size_t>(i * d + j)] - exact) / magnitude);
              }
              std::vector<float> alone_s(static_cast<std::size_t>(lds)), alone_o(static_cast<std::size_t>(d));
              k::attention_scores(isa, {q.data() + i * d, d, 1, d, keys.data(), ldb, total, 0.125f, alone_s.data(), lds});
              for (std::int64_t t = 0; t < total; ++t) alone_s[static_cast<std::size_t>(t)] = std::abs(alone_s[static_cast<std::size_t>(t)]);
              BOOST_TEST(std::ranges::equal(std::span(alone_s).first(static_cast<std::size_t>(total)),
                                            std::span(s).subspan(static_cast<std::size_t>(i * lds), static_cast<std::size_t>(total))),
                         "scores of query " << i);
              k::attention_output(isa, {alone_s.data(), lds, &visible[static_cast<std::size_t>(i)], 1, d, values.data(), 2 * d, alone_o.data(), d});
              BOOST_TEST(std::ranges::equal(alone_o, std::span(o).subspan(static_cast<std::size_t>(i * d), alone_o.size())),
                         "output of query " << i);
            }
            BOOST_TEST(worst_score <= 1e-6);
            BOOST_TEST(worst_output <= 1e-6);
          }
      }
    }
  std::vector<float> x(4096);
  for (const int d : {8, 24, 0})
    BOOST_CHECK_THROW(k::attention_scores(bp::cpu_isa::generic, {x.data(), d, 1, d, x.data(), 64 * d, 1, 1.0f, x.data(), 64}), bp::error);
}

// Variants are asked for by name; one above this CPU's is refused with the reason.
BOOST_AUTO_TEST_CASE(instruction_set_variants) {
  BOOST_TEST_MESSAGE("this CPU runs the " << bp::to_string(bp::detected_cpu_isa()) << " kernels");
  for (auto isa : {bp::cpu_isa::generic, bp::cpu_isa::avx2, bp::cpu_isa::avx512, bp::cpu_isa::avx512_vnni, bp::cpu_isa::best})
    BOOST_TEST((bp::parse_cpu_isa(bp::to_string(isa)) == isa));
  BOOST_CHECK_THROW((void)bp::parse_cpu_isa("sse9"), bp::error);
  BOOST_TEST((bp::resolve_cpu_isa(bp::cpu_isa::best) == bp::detected_cpu_isa()));
  BOOST_TEST((bp::resolve_cpu_isa(bp::cpu_isa::generic) == bp::cpu_isa::generic));
  for (auto isa : {bp::cpu_isa::avx2, bp::cpu_isa::avx512, bp::cpu_isa::avx512_vnni})
    if (bp::detected_cpu_isa() < isa) BOOST_CHECK_THROW((void)bp::resolve_cpu_isa(isa), bp::error);
}

BOOST_AUTO_TEST_SUITE_END()

/// A tiny llama model in a GGUF file of fp32 tensors with random weights, of widths that are no multiple
/// of any vector width (hidden 40, ffn 36; two heads of 16 sharing one KV head), and the file's path.
fs::path write_tiny_llama(const bp::testing::temp_dir& dir) {
  constexpr int layers = 2, hidden = 40, heads = 2, kv_heads = 1, head_dim = 16, ffn = 36, vocab = 300;
  bp::testing::gguf_writer w;
  w.kv_string("general.architecture", "llama");
  w.kv("llama.block_count", bp::io::gguf_value_type::u32, std::uint32_t{layers});
  w.kv("llama.embedding_length", bp::io::gguf_value_type::u32, std::uint32_t{hidden});
  w.kv("llama.attention.head_count", bp::io::gguf_value_type::u32, std::uint32_t{heads});
  w.kv("llama.attention.head_count_kv", bp::io::gguf_value_type::u32, std::uint32_t{kv_heads});
  w.kv("llama.attention.key_length", bp::io::gguf_value_type::u32, std::uint32_t{head_dim});
  w.kv("llama.rope.dimension_count", bp::io::gguf_value_type::u32, std::uint32_t{head_dim});
  w.kv("llama.feed_forward_length", bp::io::gguf_value_type::u32, std::uint32_t{ffn});
  w.kv("llama.attention.layer_norm_rms_epsilon", bp::io::gguf_value_type::f32, 1e-5f);
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const auto tensor = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows, float offset = 0.0f) {
    bp::testing::bytes data;
    for (std::uint64_t i = 0; i < cols * rows; ++i) bp::testing::gguf_writer::put(data, offset + normal(gen));
    w.tensor(name, rows == 1 ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{cols, rows},
             bp::io::ggml_type::f32, std::move(data));
  };
  tensor("token_embd.weight", hidden, vocab);
  tensor("output_norm.weight", hidden, 1, 1.0f);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tensor(p + "attn_norm.weight", hidden, 1, 1.0f);
    tensor(p + "ffn_norm.weight", hidden, 1, 1.0f);
    tensor(p + "attn_q.weight", hidden, heads * head_dim);
    tensor(p + "attn_k.weight", hidden, kv_heads * head_dim);
    tensor(p + "attn_v.weight", hidden, kv_heads * head_dim);
    tensor(p + "attn_output.weight", heads * head_dim, hidden);
    tensor(p + "ffn_gate.weight", hidden, ffn);
    tensor(p + "ffn_up.weight", hidden, ffn);
    tensor(p + "ffn_down.weight", ffn, hidden);
  }
  const auto bytes = w.serialize();
  const fs::path path = dir.path / "tiny-llama.gguf";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

BOOST_AUTO_TEST_SUITE(tiny_model)

// (a') On a model whose rows are no multiple of the vector width, a scored block's rows and features are
// still the bits of its tokens scored one at a time, alone and in a batch; thread counts out of range
// are refused. Needs no model file: this runs wherever the tests run.
BOOST_AUTO_TEST_CASE(tiny_model_block_equals_one_at_a_time, *boost::unit_test::label("short_real")) {
  const bp::testing::temp_dir dir;
  const auto tiny = bp::llama_model::load(write_tiny_llama(dir));
  BOOST_TEST(tiny.config().hidden == 40);
  const std::vector<bp::token_id> prompt = {5, 77, 123, 9, 250}, block = {17, 299, 3, 3, 42, 180, 61};
  bp::matrix_view<const float> logits;
  for (const int threads : {1, 2}) BOOST_TEST_CONTEXT("threads " << threads) {
    bp::llama_verifier batched(tiny, opts(8, {0, 1}, 64, threads)), single(tiny, opts(8, {0, 1}, 64, threads)),
        other(tiny, opts(8, {0, 1}, 64, threads));
    BOOST_TEST_REQUIRE(batched.prefill(prompt, logits) == bp::status::success);
    BOOST_TEST_REQUIRE(batched.score(block, logits) == bp::status::success);
    const auto all = copy_rows(logits), features = copy_rows(batched.context_features());
    BOOST_TEST_REQUIRE(single.prefill(prompt, logits) == bp::status::success);
    for (std::size_t j = 0; j < block.size(); ++j) {
      BOOST_TEST_REQUIRE(single.score(std::span(block).subspan(j, 1), logits) == bp::status::success);
      const auto row = copy_rows(logits), feature = copy_rows(single.context_features());
      BOOST_TEST(max_relative(row, std::span(all).subspan(j * row.size(), row.size())) == 0.0, "row " << j);
      BOOST_TEST(max_relative(feature, std::span(features).subspan(j * feature.size(), feature.size())) == 0.0, "features " << j);
      BOOST_TEST_REQUIRE(single.commit(1) == bp::status::success);
    }
    // The same block beside another request's, in one batch.
    BOOST_TEST_REQUIRE(batched.truncate(static_cast<std::int64_t>(prompt.size())) == bp::status::success);
    BOOST_TEST_REQUIRE(other.prefill(block, logits) == bp::status::success);
    std::vector<bp::matrix_view<const float>> rows(2);
    const std::vector<bp::llama_verifier*> pair = {&other, &batched};
    const std::vector<std::span<const bp::token_id>> blocks = {std::span(prompt).first(3), block};
    BOOST_TEST_REQUIRE(bp::llama_verifier::score_batch(pair, blocks, rows) == bp::status::success);
    BOOST_TEST(max_relative(all, copy_rows(rows[1])) == 0.0);
  }
  auto many = opts(8);
  many.threads = 100000;
  BOOST_CHECK_THROW(bp::llama_verifier(tiny, many), bp::error);
}

BOOST_AUTO_TEST_SUITE_END()

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

BOOST_AUTO_TEST_CASE(status_codes, *boost::unit_test::precondition(smollm2_present) *
                                   boost::unit_test::label("short_real")) {
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
  // The same bits, not merely close: each row of a scored block is what scoring its token alone after the
  // rows before it gives, so that speculative decoding reproduces plain decoding exactly. For every
  // storage and every kernel variant this CPU runs; 17 rows cross the kernels' row groups and passes.
  const auto prompt = some_prompt();
  const std::vector<bp::token_id> block = {504, 3575, 282, 4649, 314, 7042, 30, 378, 1069, 16, 28, 1812, 4599, 30, 216, 45, 2};
  for (const auto storage : {bp::llama_storage::fp32, bp::llama_storage::quantized, bp::llama_storage::quantized_int8})
    for (const auto isa : runnable_isas()) {
      BOOST_TEST_CONTEXT("storage " << static_cast<int>(storage) << ", " << bp::to_string(isa)) {
        auto options = opts(32, {2, 15, 29});
        options.isa = isa;
        bp::llama_verifier batched(model(storage), options), single(model(storage), options);
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
        for (std::size_t j = 0; j < block.size(); ++j) {
          BOOST_TEST_REQUIRE(single.score(std::span(block).subspan(j, 1), logits) == bp::status::success);
          const std::size_t v = 49152, f = 3 * 576;
          const auto alone = logits.row(0), in_block = std::span(all).subspan(j * v, v);
          const auto features_alone = single.context_features().row(0);
          BOOST_TEST(std::ranges::equal(alone, in_block), "row " << j << " logits: max relative difference "
                                                                  << max_relative(alone, in_block));
          BOOST_TEST(std::ranges::equal(features_alone, std::span(features).subspan(j * f, f)), "row " << j << " features");
          BOOST_TEST_REQUIRE(single.commit(1) == bp::status::success);
        }
      }
    }
}

// Several requests' blocks scored in one pass (score_batch) are the same bits as each scored alone, logits
// and context features, over two steps with different commits in between.
BOOST_AUTO_TEST_CASE(batch_equals_each_alone, *boost::unit_test::precondition(smollm2_present)) {
  auto prompts = std::vector<std::vector<bp::token_id>>(3, some_prompt());
  prompts[1].insert(prompts[1].end(), {504, 3575, 282, 4649, 314});  // three cache lengths
  prompts[2].resize(9);
  const std::vector<std::vector<std::vector<bp::token_id>>> steps = {
      {{504, 3575, 282, 4649, 314}, {7042}, {30, 378, 1069, 16}}, {{28, 1812, 4599}, {30, 216, 45, 2, 11, 9}, {45, 2}}};
  const std::vector<std::vector<int>> commits = {{2, 1, 4}, {3, 0, 1}};
  for (const auto storage : {bp::llama_storage::fp32, bp::llama_storage::quantized_int8}) {
    BOOST_TEST_CONTEXT("storage " << static_cast<int>(storage)) {
      std::vector<std::unique_ptr<bp::llama_verifier>> together, alone;
      std::vector<bp::llama_verifier*> batch;
      bp::matrix_view<const float> logits;
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        for (auto* set : {&together, &alone}) {
          set->push_back(std::make_unique<bp::llama_verifier>(model(storage), opts(8, {3, 20})));
          BOOST_TEST_REQUIRE(set->back()->prefill(prompts[i], logits) == bp::status::success);
        }
        batch.push_back(together.back().get());
      }
      for (std::size_t step = 0; step < steps.size(); ++step) {
        std::vector<std::span<const bp::token_id>> blocks(steps[step].begin(), steps[step].end());
        std::vector<bp::matrix_view<const float>> rows(blocks.size());
        BOOST_TEST_REQUIRE(bp::llama_verifier::score_batch(batch, blocks, rows) == bp::status::success);
        for (std::size_t i = 0; i < blocks.size(); ++i) {
          BOOST_TEST_CONTEXT("step " << step << ", request " << i) {
            const auto in_batch = copy_rows(rows[i]), features = copy_rows(together[i]->context_features());
            BOOST_TEST(rows[i].rows == static_cast<std::int64_t>(blocks[i].size()));
            BOOST_TEST_REQUIRE(alone[i]->score(blocks[i], logits) == bp::status::success);
            const auto by_itself = copy_rows(logits);
            BOOST_TEST(std::ranges::equal(in_batch, by_itself), "max relative difference " << max_relative(in_batch, by_itself));
            BOOST_TEST(std::ranges::equal(features, copy_rows(alone[i]->context_features())));
            for (auto* set : {&together, &alone}) BOOST_TEST_REQUIRE((*set)[i]->commit(commits[step][i]) == bp::status::success);
            BOOST_TEST(together[i]->committed() == alone[i]->committed());
          }
        }
      }
    }
  }
}

// Requests served together by batched_decoder, their blocks scored in one pass, decode exactly what
// plain greedy decoding of each alone gives.
BOOST_AUTO_TEST_CASE(batched_requests_equal_greedy_decoding, *boost::unit_test::precondition(smollm2_present)) {
  const auto& m = model(bp::llama_storage::quantized_int8);
  auto prompts = std::vector<std::vector<bp::token_id>>(3, some_prompt());
  prompts[1].insert(prompts[1].begin() + 3, {504, 3575, 282, 504, 3575, 282});
  prompts[2].insert(prompts[2].begin() + 3, {4649, 314, 7042, 30});
  bp::generation_config config;
  config.max_new_tokens = 40;
  std::vector<bp::lookup_drafter> drafters(prompts.size(), bp::lookup_drafter(m.config().vocab, 3, 1, 7));
  std::vector<std::unique_ptr<bp::llama_verifier>> verifiers;
  bp::batched_decoder<bp::lookup_drafter, bp::llama_verifier, bp::fixed_block_size<4>> batch;
  std::map<bp::request_id, std::size_t> index;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    verifiers.push_back(std::make_unique<bp::llama_verifier>(m, opts(8)));
    index[batch.add(drafters[i], *verifiers[i], prompts[i], config)] = i;
  }
  batch.run();
  const auto finished = batch.take_finished();
  BOOST_TEST(finished.size() == prompts.size());
  int drafted_steps = 0;
  for (const auto& f : finished) {
    const auto i = index.at(f.id);
    BOOST_TEST_CONTEXT("request " << i) {
      BOOST_TEST_REQUIRE(f.result.error == bp::status::success);
      bp::lookup_drafter plain_drafter(m.config().vocab, 3, 1, 7);
      bp::llama_verifier plain_verifier(m, opts(8));
      bp::speculative_decoder<bp::lookup_drafter, bp::llama_verifier, bp::fixed_block_size<1>> plain(plain_drafter, plain_verifier);
      bp::generation_result alone;
      plain.generate(prompts[i], config, alone);
      BOOST_TEST(f.result.tokens == alone.tokens, boost::test_tools::per_element());
      drafted_steps += f.result.stats.steps < static_cast<std::int64_t>(f.result.tokens.size()) - 1;
    }
  }
  BOOST_TEST(drafted_steps > 0);  // some drafts were accepted: the blocks were scored, not only plain rows
}

// A batch that score would refuse in any block fails whole, before anything runs.
BOOST_AUTO_TEST_CASE(batch_status_codes, *boost::unit_test::precondition(smollm2_present) *
                                         boost::unit_test::label("short_real")) {
  auto early = opts(8);
  early.layers = 12;
  bp::llama_verifier a(model(), opts(8, {}, 64)), b(model(), opts(8, {}, 64)), other(model(), early);
  bp::matrix_view<const float> logits;
  const auto prompt = some_prompt();
  for (auto* v : {&a, &b, &other}) BOOST_TEST_REQUIRE(v->prefill(prompt, logits) == bp::status::success);
  const std::vector<bp::token_id> good = {504, 3575}, bad = {504, 49152}, nine(9, 5);
  std::vector<bp::matrix_view<const float>> rows(2);
  const auto batch = [&](std::vector<bp::llama_verifier*> vs, std::vector<std::span<const bp::token_id>> blocks) {
    return bp::llama_verifier::score_batch(vs, blocks, std::span(rows).first(vs.size()));
  };
  BOOST_TEST(batch({}, {}) == bp::status::success);
  BOOST_TEST(batch({&a, &b}, {good}) == bp::status::invalid_argument);          // a block short
  BOOST_TEST(batch({&a, &a}, {good, good}) == bp::status::invalid_argument);    // one verifier twice
  BOOST_TEST(batch({&a, &other}, {good, good}) == bp::status::invalid_argument);  // other layers
  BOOST_TEST(batch({&a, &b}, {good, bad}) == bp::status::invalid_token);
  BOOST_TEST(batch({&a, &b}, {good, nine}) == bp::status::invalid_block_size);
  BOOST_TEST(a.commit(1) == bp::status::invalid_argument);  // nothing was scored
  BOOST_TEST(batch({&a, &b}, {good, good}) == bp::status::success);
  BOOST_TEST(a.commit(2) == bp::status::success);
  BOOST_TEST(b.commit(1) == bp::status::success);
  BOOST_TEST(a.committed() == 16);
  BOOST_TEST(b.committed() == 15);
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

// (b') a cache that starts small and grows while a request runs gives the same rows, bit for bit, as
// one allocated for the whole request; growth is geometric and bounded by max_positions.
BOOST_AUTO_TEST_CASE(cache_growth_changes_nothing, *boost::unit_test::precondition(smollm2_present) *
                                   boost::unit_test::label("short_real")) {
  const auto prompt = some_prompt();  // 14 tokens
  const std::vector<bp::token_id> block = {504, 3575, 282, 4649, 314, 7042, 30, 378, 1069, 16};
  auto small = opts(16, {2, 29}, 64);
  small.initial_positions = 2;
  auto whole = opts(16, {2, 29}, 64);
  whole.initial_positions = 64;
  bp::llama_verifier growing(model(), small), fixed(model(), whole);
  BOOST_TEST(growing.capacity() == 2);
  BOOST_TEST(fixed.capacity() == 64);
  bp::matrix_view<const float> logits;
  const auto step = [&](bp::llama_verifier& v, bool first, std::span<const bp::token_id> tokens, int keep) {
    BOOST_TEST_REQUIRE((first ? v.prefill(tokens, logits) : v.score(tokens, logits)) == bp::status::success);
    auto rows = copy_rows(logits);
    const auto features = copy_rows(v.context_features());
    rows.insert(rows.end(), features.begin(), features.end());
    if (!first) BOOST_TEST_REQUIRE(v.commit(keep) == bp::status::success);
    return rows;
  };
  const std::vector<std::int64_t> capacities = {14, 28, 56, 56};
  for (std::size_t i = 0; i < capacities.size(); ++i) {
    const bool first = i == 0;
    const std::span<const bp::token_id> tokens = first ? std::span<const bp::token_id>(prompt) : std::span(block);
    const auto a = step(growing, first, tokens, 7), b = step(fixed, first, tokens, 7);
    BOOST_TEST(growing.capacity() == capacities[i]);
    BOOST_TEST(max_relative(a, b) == 0.0);
  }
  BOOST_TEST(growing.committed() == 14 + 3 * 7);
  BOOST_TEST(growing.reserve(65) == bp::status::invalid_argument);
  BOOST_TEST(growing.reserve(64) == bp::status::success);
  BOOST_TEST(growing.capacity() == 64);
  BOOST_TEST(growing.reserve(10) == bp::status::success);  // never shrinks
  BOOST_TEST(growing.capacity() == 64);
  auto negative = opts(16);
  negative.initial_positions = -1;
  BOOST_CHECK_THROW(bp::llama_verifier(model(), negative), bp::error);
}

// (b'') growth between a score and its commit keeps the scored rows and the features: after reserve(),
// or after a batch that grew the cache and then failed on another request's block, commit() keeps what
// was scored, as with a cache that never grew.
BOOST_AUTO_TEST_CASE(growth_keeps_an_uncommitted_score, *boost::unit_test::precondition(smollm2_present) *
                                        boost::unit_test::label("short_real")) {
  const auto prompt = some_prompt();  // 14 tokens
  const std::vector<bp::token_id> block = {504, 3575, 282, 4649}, next = {314, 7042, 30, 378}, bad = {1, 49152};
  const std::vector<bp::token_id> wide = {9, 99, 999, 9, 99, 999, 9, 99};
  auto small = opts(8, {2}, 64);
  small.initial_positions = 20;  // the prompt and `block` fit, `wide` does not
  auto whole = small;
  whole.initial_positions = 64;
  bp::matrix_view<const float> logits;
  const auto score_next = [&](bp::llama_verifier& v) {
    BOOST_TEST_REQUIRE(v.commit(4) == bp::status::success);
    BOOST_TEST_REQUIRE(v.score(next, logits) == bp::status::success);
    auto rows = copy_rows(logits);
    const auto features = copy_rows(v.context_features());
    rows.insert(rows.end(), features.begin(), features.end());
    return rows;
  };
  bp::llama_verifier fixed(model(), whole), reserved(model(), small), batched(model(), small), other(model(), small);
  for (auto* v : {&fixed, &reserved, &batched, &other}) {
    BOOST_TEST_REQUIRE(v->prefill(prompt, logits) == bp::status::success);
    BOOST_TEST_REQUIRE(v->score(block, logits) == bp::status::success);
  }
  const auto features = copy_rows(reserved.context_features());
  BOOST_TEST_REQUIRE(reserved.reserve(64) == bp::status::success);
  BOOST_TEST(reserved.capacity() == 64);
  BOOST_TEST(max_relative(features, copy_rows(reserved.context_features())) == 0.0);
  std::vector<bp::matrix_view<const float>> rows(2);
  const std::vector<bp::llama_verifier*> pair = {&batched, &other};
  const std::vector<std::span<const bp::token_id>> blocks = {wide, bad};
  BOOST_TEST_REQUIRE(bp::llama_verifier::score_batch(pair, blocks, rows) == bp::status::invalid_token);
  BOOST_TEST(batched.capacity() > 20);  // it grew before the other block failed
  const auto want = score_next(fixed);
  BOOST_TEST(max_relative(want, score_next(reserved)) == 0.0);
  BOOST_TEST(max_relative(want, score_next(batched)) == 0.0);
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
    bp::llama_matrix output(m.output().rows(), m.output().cols());
    m.output().decode(0, output.rows(), output.data());
    const Eigen::RowVectorXf head = h * output.transpose();
    BOOST_TEST(max_relative(std::span(head.data(), 49152), last) <= tolerance);
  }
}

// (d) quantised storage against fp32 storage: the same file values, other summation orders. Every
// path of the products: the weight-product kernels (one and several groups of rows) and, for fp32
// above 8 rows, GEMM; with 1 and 2 threads, and with every instruction-set variant this CPU runs.
BOOST_AUTO_TEST_CASE(quantized_storage_equals_fp32, *boost::unit_test::precondition(smollm2_present)) {
  const auto& q = model(bp::llama_storage::quantized);
  BOOST_TEST((q.storage() == bp::llama_storage::quantized));
  BOOST_TEST(q.parameter_count() == model().parameter_count());
  BOOST_TEST(q.layers()[0].qkv.quantized());
  BOOST_TEST(q.embedding().quantized());
  BOOST_TEST(!model().any_quantized());
  BOOST_TEST_MESSAGE("weights: fp32 " << model().weight_bytes() << " bytes, quantised " << q.weight_bytes() << " bytes");
  BOOST_TEST(q.weight_bytes() * 5 < model().weight_bytes());
  // Embedding rows decode to the fp32 storage's values exactly.
  std::vector<float> a(576), b(576);
  for (bp::token_id t : {0, 1, 504, 49151}) {
    q.embedding().row(t, a.data());
    model().embedding().row(t, b.data());
    BOOST_TEST(a == b, boost::test_tools::per_element());
  }
  const auto prompt = some_prompt();
  const std::vector<bp::token_id> block = {504, 3575, 282, 4649, 314, 7042, 30, 378, 1069, 16,
                                           28,  2683, 359, 253,  11,  198,  1270, 88, 2049, 30};
  double worst = 0;
  std::vector<std::pair<bp::cpu_isa, int>> runs = {{bp::cpu_isa::best, 1}, {bp::cpu_isa::best, 2}};
  for (auto isa : runnable_isas())
    if (isa != bp::detected_cpu_isa()) runs.emplace_back(isa, 2);
  for (const auto& [isa, threads] : runs) {
    auto o = opts(24, {}, 2048, threads);
    o.isa = isa;
    bp::llama_verifier vq(q, o), vf(model(), o);
    BOOST_TEST((vq.options().isa == bp::resolve_cpu_isa(isa)));
    bp::matrix_view<const float> logits;
    BOOST_TEST_REQUIRE(vq.prefill(prompt, logits) == bp::status::success);
    const auto first = copy_rows(logits);
    BOOST_TEST_REQUIRE(vf.prefill(prompt, logits) == bp::status::success);
    worst = std::max(worst, max_relative(first, copy_rows(logits)));
    for (std::size_t b : {std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{14}, std::size_t{20}}) {
      const auto part = std::span(block).first(b);
      BOOST_TEST_REQUIRE(vq.score(part, logits) == bp::status::success);
      const auto scored = copy_rows(logits);
      BOOST_TEST_REQUIRE(vf.score(part, logits) == bp::status::success);
      const double d = max_relative(scored, copy_rows(logits));
      BOOST_TEST_MESSAGE(bp::to_string(vq.options().isa) << " kernels, " << threads << " threads, b = " << b
                                                      << ": quantised vs fp32 max relative difference " << d);
      worst = std::max(worst, d);
      BOOST_TEST_REQUIRE(vq.commit(1) == bp::status::success);
      BOOST_TEST_REQUIRE(vf.commit(1) == bp::status::success);
    }
  }
  BOOST_TEST(worst <= quantized_tolerance);
}

/// Largest minus second-largest value of a row.
double top2_margin(std::span<const float> row) {
  float first = -INFINITY, second = -INFINITY;
  for (float v : row) {
    if (v > first) {
      second = first;
      first = v;
    } else if (v > second) {
      second = v;
    }
  }
  return double(first) - second;
}

/// Documented bound on |int8 - fp32 activations| for a logit of SmolLM2 (logits span about 30; measured
/// 1.61 over the reference prompts on AVX-512 VNNI, the largest of 12 million differences: a tail of the
/// int8 rounding noise, which float rounding of the fp32 parts on other CPUs reshuffles, hence the room).
/// Rounding to int8 amplifies float rounding: a block scored at once and row by row (fp32 sums in other
/// orders) differ by as much (measured 1.34).
constexpr double int8_logit_tolerance = 2.5;
/// Documented bound on the fp32 top-2 margin of a row whose argmax the int8 activations change (measured
/// 0.28 on AVX-512 VNNI, in 11 of 256 rows).
constexpr double int8_flip_margin = 0.5;

// (f) int8 activations against fp32 activations (quantised storage) on the transformers reference
// prompts: every logit of the last prompt row and of the scored greedy continuation within
// int8_logit_tolerance; the argmax differs only in rows whose fp32 top-2 margin is below int8_flip_margin
// and in at most 10 % of the rows; a block scored at once and row by row agree within the same tolerance.
BOOST_AUTO_TEST_CASE(int8_activations_track_fp32, *boost::unit_test::precondition(smollm2_present)) {
  const auto reference = nlohmann::json::parse(std::ifstream(reference_path()));
  const auto& q = model(bp::llama_storage::quantized);
  const auto& q8 = model(bp::llama_storage::quantized_int8);
  BOOST_TEST(q8.weight_bytes() == q.weight_bytes());
  const auto o = opts(32);
  bp::llama_verifier vf(q, o), vi(q8, o), single(q8, o);
  bp::matrix_view<const float> logits;
  double worst = 0, worst_block = 0;
  double widest_flip = 0;  // the largest fp32 top-2 margin of a row whose argmax changed
  int rows = 0, flips = 0;
  for (const auto& c : reference.at("cases")) {
    const auto prompt = c.at("prompt").get<std::vector<bp::token_id>>();
    const auto greedy = c.at("greedy").get<std::vector<bp::token_id>>();
    BOOST_TEST_REQUIRE(vf.prefill(prompt, logits) == bp::status::success);
    const auto f = copy_rows(logits);
    BOOST_TEST_REQUIRE(vi.prefill(prompt, logits) == bp::status::success);
    const auto i8 = copy_rows(logits);
    for (std::size_t j = 0; j < f.size(); ++j) worst = std::max(worst, std::abs(double(f[j]) - i8[j]));
    BOOST_TEST_REQUIRE(vf.score(greedy, logits) == bp::status::success);
    const auto fb = copy_rows(logits);
    BOOST_TEST_REQUIRE(vi.score(greedy, logits) == bp::status::success);
    const auto ib = copy_rows(logits);
    const std::size_t v = 49152;
    for (std::size_t r = 0; r < greedy.size(); ++r, ++rows) {
      const auto fr = std::span(fb).subspan(r * v, v), ir = std::span(ib).subspan(r * v, v);
      double d = 0;
      for (std::size_t j = 0; j < v; ++j) d = std::max(d, std::abs(double(fr[j]) - ir[j]));
      worst = std::max(worst, d);
      if (argmax(fr) != argmax(ir)) {
        ++flips;
        widest_flip = std::max(widest_flip, top2_margin(fr));
      }
    }
    // The same block one row at a time (int8 activations are quantised per row).
    BOOST_TEST_REQUIRE(single.prefill(prompt, logits) == bp::status::success);
    for (std::size_t r = 0; r < greedy.size(); ++r) {
      BOOST_TEST_REQUIRE(single.score(std::span(greedy).subspan(r, 1), logits) == bp::status::success);
      for (std::size_t j = 0; j < v; ++j) worst_block = std::max(worst_block, std::abs(double(logits.row(0)[j]) - ib[r * v + j]));
      BOOST_TEST_REQUIRE(single.commit(1) == bp::status::success);
    }
    BOOST_TEST_REQUIRE(vf.commit(0) == bp::status::success);
    BOOST_TEST_REQUIRE(vi.commit(0) == bp::status::success);
  }
  BOOST_TEST_MESSAGE("int8 vs fp32 activations: max |logit difference| " << worst << " over " << rows
                     << " scored rows and the prompts' last rows; argmax differs in " << flips << " rows (fp32 top-2 margin up to "
                     << widest_flip << "); block vs one row at a time: " << worst_block);
  BOOST_TEST(worst > 0.0);  // the int8 path ran
  BOOST_TEST(worst <= int8_logit_tolerance);
  BOOST_TEST(widest_flip <= int8_flip_margin);
  BOOST_TEST(flips * 10 <= rows);
  BOOST_TEST(worst_block <= int8_logit_tolerance);
}

// (e) both storages against Hugging Face transformers (float32) on the same GGUF file.
BOOST_AUTO_TEST_CASE(fp32_matches_transformers, *boost::unit_test::precondition(smollm2_present)) {
  check_against_transformers(bp::llama_storage::fp32);
}

BOOST_AUTO_TEST_CASE(quantized_matches_transformers, *boost::unit_test::precondition(smollm2_present)) {
  check_against_transformers(bp::llama_storage::quantized);
}

BOOST_AUTO_TEST_SUITE_END()
