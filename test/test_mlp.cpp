// Tests of nn/mlp.hpp: a hand-computed forward, batch against row-by-row, bf16 against fp32,
// initialisation statistics, status codes, and that forward never allocates.
#define EIGEN_RUNTIME_NO_MALLOC
#define BOOST_TEST_MODULE mlp
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "blockpilot/nn/mlp.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"

namespace bp = blockpilot;
namespace nn = blockpilot::nn;
using bf16 = Eigen::bfloat16;

namespace {

template <class T>
void set(nn::mlp<T>& m, std::size_t l, std::vector<float> w, std::vector<float> b) {
  auto wv = m.weight(l);
  for (std::size_t i = 0; i < w.size(); ++i) wv.data[i] = nn::from_float<T>(w[i]);
  for (std::size_t i = 0; i < b.size(); ++i) m.bias(l)[i] = nn::from_float<T>(b[i]);
}

/// 3 → 2 → 2 → 2 with values exact in bf16:
///   x = [1, 2, 3]
///   W0 = [[1, 0, -1], [0.5, 0.5, 0.5]], b0 = [0.5, -1]: z0 = [1 - 3 + 0.5, 0.5 + 1 + 1.5 - 1] = [-1.5, 2],
///     a1 = ReLU(z0) = [0, 2]
///   W1 = [[1, 1], [-1, 2]], b1 = [0, -5]: z1 = [2, 4 - 5] = [2, -1], ReLU = [2, 0],
///     residual (2 == 2): a2 = a1 + [2, 0] = [2, 2]
///   Wo = [[1, -1], [0.5, 0.25]], bo = [0.125, 0.25]: logits = [0 + 0.125, 1 + 0.5 + 0.25] = [0.125, 1.75]
/// With mean [1, 1, 1] and std [1, 1, 2], x' = [0, 1, 1]: z0 = [-0.5, 0], a1 = [0, 0], z1 = [0, -5],
///   a2 = [0, 0], logits = bo = [0.125, 0.25].
template <class T>
nn::mlp<T> tiny() {
  nn::mlp<T> m(nn::mlp_shape{3, {2, 2}, 2});
  set(m, 0, {1, 0, -1, 0.5f, 0.5f, 0.5f}, {0.5f, -1});
  set(m, 1, {1, 1, -1, 2}, {0, -5});
  set(m, 2, {1, -1, 0.5f, 0.25f}, {0.125f, 0.25f});
  return m;
}

template <class T>
std::vector<float> run(const nn::mlp<T>& m, const std::vector<float>& x, std::int64_t batch) {
  std::vector<float> out(static_cast<std::size_t>(batch * m.shape().classes));
  std::vector<float> ws(static_cast<std::size_t>(m.workspace_size(batch)));
  Eigen::internal::set_is_malloc_allowed(false);
  const auto s = m.forward(bp::matrix_view<const float>(x.data(), batch, m.shape().input),
                           bp::matrix_view<float>(out.data(), batch, m.shape().classes), ws);
  Eigen::internal::set_is_malloc_allowed(true);
  BOOST_REQUIRE(s == bp::status::success);
  return out;
}

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  return v;
}

/// 300 → 70 → 70 → 40 → 5: crosses in_tile (256), out_tile (64), has a residual and a non-residual layer.
nn::mlp<float> medium() {
  nn::mlp<float> m(nn::mlp_shape{300, {70, 70, 40}, 5});
  blockpilot::nn::initialize(m, 7);
  auto b = random_vector(static_cast<std::size_t>(m.shape().parameter_count()), 8, 0.05f);
  for (std::size_t l = 0; l < m.shape().linear_count(); ++l)
    for (std::size_t i = 0; i < m.bias(l).size(); ++i) m.bias(l)[i] = b[i];
  m.set_standardization(random_vector(300, 9, 0.5f), std::vector<float>(300, 1.5f));
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(hand_computed_forward) {
  const std::vector<float> x = {1, 2, 3};
  for (const auto& out : {run(tiny<float>(), x, 1), run(tiny<bf16>(), x, 1)}) {
    BOOST_TEST(out[0] == 0.125f);
    BOOST_TEST(out[1] == 1.75f);
    BOOST_TEST(nn::argmax(out) == 1);
  }
  auto m = tiny<float>();
  const std::vector<float> mean = {1, 1, 1}, sd = {1, 1, 2};
  m.set_standardization(mean, sd);
  const auto out = run(m, x, 1);
  BOOST_TEST(out[0] == 0.125f);
  BOOST_TEST(out[1] == 0.25f);
}

BOOST_AUTO_TEST_CASE(single_row_overload) {
  const auto m = tiny<float>();
  const std::vector<float> x = {1, 2, 3};
  std::vector<float> out(2), ws(static_cast<std::size_t>(m.workspace_size(1)));
  BOOST_TEST((m.forward(std::span<const float>(x), out, ws) == bp::status::success));
  BOOST_TEST(out[1] == 1.75f);
}

BOOST_AUTO_TEST_CASE(batch_equals_row_by_row) {
  const auto m = medium();
  const std::int64_t batch = 130;
  const auto x = random_vector(static_cast<std::size_t>(batch * 300), 10, 3.0f);
  const auto all = run(m, x, batch);
  float scale = 0;
  for (float v : all) scale = std::max(scale, std::abs(v));
  for (std::int64_t r = 0; r < batch; ++r) {
    const std::vector<float> row(x.begin() + r * 300, x.begin() + (r + 1) * 300);
    const auto one = run(m, row, 1);
    for (std::size_t c = 0; c < 5; ++c) BOOST_TEST(std::abs(one[c] - all[std::size_t(r * 5) + c]) <= 1e-5f * scale);
  }
}

BOOST_AUTO_TEST_CASE(forward_does_not_depend_on_buffer_addresses) {
  // Input, logits and workspace at every float offset within a 64-byte line, one row and a batch:
  // bit-identical logits (a decision must not depend on where the engine's buffers sit).
  const auto m = medium();
  for (const std::int64_t batch : {1, 7}) {
    const auto x = random_vector(static_cast<std::size_t>(batch * 300), 12, 3.0f);
    const auto ws_size = static_cast<std::size_t>(m.workspace_size(batch));
    alignas(64) static float x_at[7 * 300 + 16], out_at[7 * 5 + 16];
    std::vector<float> ws_at(ws_size + 16), first;
    for (std::size_t offset = 0; offset < 16; ++offset) {
      std::ranges::copy(x, x_at + offset);
      BOOST_REQUIRE(m.forward(bp::matrix_view<const float>(x_at + offset, batch, 300),
                              bp::matrix_view<float>(out_at + offset, batch, 5),
                              std::span<float>(ws_at.data() + offset, ws_size)) == bp::status::success);
      const std::vector<float> out(out_at + offset, out_at + offset + batch * 5);
      if (offset == 0) first = out;
      BOOST_TEST_CONTEXT("batch " << batch << ", offset " << offset << " floats") {
        BOOST_TEST(std::ranges::equal(out, first));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(bf16_close_to_fp32) {
  const auto m = medium();
  const nn::mlp<bf16> h(m);
  const nn::mlp<float> back(h);                  // the bf16 weights, exactly, in fp32
  for (const std::int64_t batch : {1, 3, 70}) {  // the one-row path, a small tile, a full tile + rest
    const auto x = random_vector(static_cast<std::size_t>(batch * 300), 11, 3.0f);
    const auto ref = run(m, x, batch), low = run(h, x, batch), widened = run(back, x, batch);
    double max_ref = 0, err = 0, err_widened = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(double(ref[i])));
      err = std::max(err, std::abs(double(ref[i]) - low[i]));
      err_widened = std::max(err_widened, std::abs(double(widened[i]) - low[i]));
    }
    BOOST_TEST(err < 2e-2 * max_ref);          // bf16 weight rounding
    BOOST_TEST(err_widened < 1e-5 * max_ref);  // same weights, only the summation order differs
  }
}

BOOST_AUTO_TEST_CASE(bf16_round_to_nearest_even) {
  BOOST_TEST(nn::to_float(nn::from_float<bf16>(1.0f + 0x1.0p-8f)) == 1.0f);                  // tie → even (down)
  BOOST_TEST(nn::to_float(nn::from_float<bf16>(1.0f + 3 * 0x1.0p-8f)) == 1.0f + 0x1.0p-6f);  // tie → even (up)
  BOOST_TEST(nn::to_float(nn::from_float<bf16>(1.0f + 0x1.8p-8f)) == 1.0f + 0x1.0p-7f);      // above tie → up
  BOOST_TEST(std::isnan(nn::to_float(nn::from_float<bf16>(std::numeric_limits<float>::quiet_NaN()))));
}

BOOST_AUTO_TEST_CASE(initialization_statistics) {
  nn::mlp<float> m(nn::mlp_shape{1000, {500, 500}, 5});
  blockpilot::nn::initialize(m, 42);
  for (std::size_t l = 0; l < 3; ++l) {
    const auto w = m.weight(l);
    const double fan_in = double(w.cols), fan_out = double(w.rows);
    const double bound = l < 2 ? std::sqrt(6.0 / fan_in) : std::sqrt(6.0 / (fan_in + fan_out));
    double sum = 0, sq = 0, mx = 0;
    const auto n = w.rows * w.cols;
    for (std::int64_t i = 0; i < n; ++i) {
      sum += w.data[i];
      sq += double(w.data[i]) * w.data[i];
      mx = std::max(mx, std::abs(double(w.data[i])));
    }
    const double var = sq / double(n), expected = bound * bound / 3.0;
    BOOST_TEST(mx <= bound);
    BOOST_TEST(mx > 0.99 * bound);
    BOOST_TEST(std::abs(sum / double(n)) < 5 * std::sqrt(expected / double(n)));
    BOOST_TEST(std::abs(var - expected) < (l < 2 ? 0.01 : 0.05) * expected);
    for (float b : m.bias(l)) BOOST_TEST(b == 0.0f);
  }
  nn::mlp<float> same(m.shape()), other(m.shape());
  blockpilot::nn::initialize(same, 42);
  blockpilot::nn::initialize(other, 43);
  BOOST_TEST(std::ranges::equal(same.parameters(), m.parameters()));
  BOOST_TEST(!std::ranges::equal(other.parameters(), m.parameters()));
}

BOOST_AUTO_TEST_CASE(argmax_ties_and_nan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(nn::argmax(std::vector<float>{1, 3, 3, 2}) == 1);
  BOOST_TEST(nn::argmax(std::vector<float>{nan, 1, 2}) == 2);
  BOOST_TEST(nn::argmax(std::vector<float>{nan, nan}) == 0);
  BOOST_TEST(nn::argmax(std::vector<float>{}) == 0);
}

BOOST_AUTO_TEST_CASE(status_codes_and_shape_errors) {
  const auto m = tiny<float>();
  std::vector<float> x(6), out(4), ws(static_cast<std::size_t>(m.workspace_size(2)));
  const bp::matrix_view<const float> xv(x.data(), 2, 3);
  BOOST_TEST((m.forward(xv, bp::matrix_view<float>(out.data(), 2, 2), ws) == bp::status::success));
  BOOST_TEST((m.forward(xv, bp::matrix_view<float>(out.data(), 1, 2), ws) == bp::status::invalid_argument));
  BOOST_TEST((m.forward(bp::matrix_view<const float>(x.data(), 2, 2), bp::matrix_view<float>(out.data(), 2, 2), ws) ==
              bp::status::invalid_argument));
  BOOST_TEST((m.forward(xv, bp::matrix_view<float>(out.data(), 2, 2), std::span<float>(ws).first(ws.size() - 1)) ==
              bp::status::workspace_too_small));
  BOOST_TEST(
      (nn::mlp<float>().forward(xv, bp::matrix_view<float>(out.data(), 2, 2), ws) == bp::status::invalid_argument));
  BOOST_CHECK_THROW(nn::mlp<float>(nn::mlp_shape{0, {4}, 5}), bp::error);
  BOOST_CHECK_THROW(nn::mlp<float>(nn::mlp_shape{4, {4, -1}, 5}), bp::error);
  auto n = tiny<float>();
  const std::vector<float> mean = {0, 0, 0}, bad = {1, 0, 1};
  BOOST_CHECK_THROW(n.set_standardization(mean, bad), bp::error);
  BOOST_TEST(m.workspace_size(0) == 0);
  BOOST_TEST(m.workspace_size(1000) == m.workspace_size(64));
}

BOOST_AUTO_TEST_CASE(no_hidden_layer_is_linear) {
  nn::mlp<float> m(nn::mlp_shape{2, {}, 2});
  set(m, 0, {1, 2, 3, 4}, {1, -1});
  const auto out = run(m, {1, 1}, 1);
  BOOST_TEST(out[0] == 4.0f);
  BOOST_TEST(out[1] == 6.0f);
}
