// Tests of nn/training.hpp: finite-difference gradients of both losses (double path, and float
// against double), AdamW, determinism, a learnable task, and expected-tau against cross-entropy.
#define BOOST_TEST_MODULE training
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "blockpilot_workbench/nn/training.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"
#include "support/shifted_heap.hpp"

namespace bp = blockpilot;
namespace nn = blockpilot::nn;

namespace {

double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// 4 → 5 → 5 → 3 → 3 classes: a residual layer (5 → 5) and a non-residual one (5 → 3).
const nn::mlp_shape grad_shape{4, {5, 5, 3}, 3};

struct grad_case {
  std::vector<double> params, x, tau;
  std::int64_t batch = 6;
};

grad_case make_grad_case() {
  nn::mlp<float> m(grad_shape);
  blockpilot::nn::initialize(m, 1);
  std::mt19937_64 rng(2);
  grad_case c;
  for (float v : m.parameters()) c.params.push_back(v);
  for (std::size_t l = 0; l < grad_shape.linear_count(); ++l)  // non-zero biases
    for (std::int64_t i = 0; i < grad_shape.out_features(l); ++i)
      c.params[std::size_t(grad_shape.bias_offset(l) + i)] = 0.2 * (uniform(rng) - 0.5);
  for (std::int64_t i = 0; i < c.batch * 4; ++i) c.x.push_back(2 * uniform(rng) - 1);
  for (std::int64_t i = 0; i < c.batch * 3; ++i) c.tau.push_back(3 + 3 * uniform(rng));
  return c;
}

template <class S>
S loss_of(const grad_case& c, const std::vector<S>& params, nn::loss_kind kind, double p, std::vector<S>& grad) {
  const std::vector<S> x(c.x.begin(), c.x.end()), tau(c.tau.begin(), c.tau.end());
  grad.assign(params.size(), S(0));
  return nn::loss_and_gradient<S>(grad_shape, params, bp::matrix_view<const S>(x.data(), c.batch, 4),
                                  bp::matrix_view<const S>(tau.data(), c.batch, 3), kind, p, 99, grad);
}

double rel_norm_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

/// Samples of the near-tie task: a safe class (tau 5.0) and a risky neighbour that wins by 0.01 in
/// 60% of samples (unpredictably) and loses by 2.0 otherwise; which pair depends on the sign of x0.
nn::training_set near_tie_set(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  nn::training_set s{{}, 4, {}, 5};
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<float> x(4);
    for (auto& v : x) v = float(2 * uniform(rng) - 1);
    const int safe = x[0] > 0 ? 2 : 1, risky = x[0] > 0 ? 3 : 0;
    std::vector<float> tau(5, 4.0f);
    tau[std::size_t(safe)] = 5.0f;
    tau[std::size_t(risky)] = uniform(rng) < 0.6 ? 5.01f : 3.0f;
    s.features.insert(s.features.end(), x.begin(), x.end());
    s.tau.insert(s.tau.end(), tau.begin(), tau.end());
  }
  return s;
}

/// The best size is the argmax of a fixed random linear map of 10 features (scaled and shifted to
/// exercise standardisation); tau falls off by 0.5 per step away from it.
nn::training_set linear_teacher_set(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 teacher(7), rng(seed);
  std::vector<double> w(50);
  for (auto& v : w) v = 2 * uniform(teacher) - 1;
  nn::training_set s{{}, 10, {}, 5};
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> x(10);
    for (auto& v : x) v = 2 * uniform(rng) - 1;
    std::vector<double> score(5, 0.0);
    for (int c = 0; c < 5; ++c)
      for (int j = 0; j < 10; ++j) score[std::size_t(c)] += w[std::size_t(c * 10 + j)] * x[std::size_t(j)];
    const auto y = nn::argmax(score);
    for (int j = 0; j < 10; ++j) s.features.push_back(float(100 * x[std::size_t(j)] + 50 * j));
    for (int c = 0; c < 5; ++c) s.tau.push_back(float(6.0 - 0.5 * std::abs(c - y) + 0.01 * uniform(rng)));
  }
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(finite_difference_gradients) {
  const auto c = make_grad_case();
  for (const auto kind : {nn::loss_kind::cross_entropy, nn::loss_kind::expected_tau}) {
    for (const double p : {0.0, 0.3}) {
      BOOST_TEST_CONTEXT("loss " << nn::to_string(kind) << ", dropout " << p) {
        std::vector<double> grad, scratch, fd(c.params.size());
        const double loss = loss_of(c, c.params, kind, p, grad);
        BOOST_TEST(std::isfinite(loss));
        const double h = 1e-6;
        for (std::size_t i = 0; i < c.params.size(); ++i) {
          auto plus = c.params, minus = c.params;
          plus[i] += h;
          minus[i] -= h;
          fd[i] = (loss_of(c, plus, kind, p, scratch) - loss_of(c, minus, kind, p, scratch)) / (2 * h);
        }
        BOOST_TEST(rel_norm_error(grad, fd) < 1e-6);
        for (std::size_t i = 0; i < fd.size(); ++i)
          BOOST_TEST(std::abs(grad[i] - fd[i]) < 1e-7 + 1e-5 * std::abs(fd[i]));
        // The float path (used by train) agrees with the double reference.
        std::vector<float> pf(c.params.begin(), c.params.end()), gf;
        const float loss_f = loss_of(c, pf, kind, p, gf);
        BOOST_TEST(std::abs(loss_f - loss) < 1e-5 * std::max(1.0, std::abs(loss)));
        BOOST_TEST(rel_norm_error(std::vector<double>(gf.begin(), gf.end()), grad) < 1e-3);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(loss_values) {
  // logits [0, ln 3] → softmax [1/4, 3/4]; tau [5, 4]: label 0, tau_max 5.
  const std::vector<double> z = {0, std::log(3.0)}, tau = {5, 4};
  std::vector<double> g(2);
  const bp::matrix_view<const double> zv(z.data(), 1, 2), tv(tau.data(), 1, 2);
  const double ce =
      nn::loss_rows<double>(zv, tv, nn::loss_kind::cross_entropy, bp::matrix_view<double>(g.data(), 1, 2));
  BOOST_TEST(ce == std::log(4.0), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(g[0] == -0.75, boost::test_tools::tolerance(1e-12));
  const double et = nn::loss_rows<double>(zv, tv, nn::loss_kind::expected_tau, bp::matrix_view<double>(g.data(), 1, 2));
  BOOST_TEST(et == 0.75, boost::test_tools::tolerance(1e-12));  // 3/4 of the time one token short
  // Tie in tau: the label is the smaller size.
  const std::vector<double> tied = {4, 4};
  nn::loss_rows<double>(zv, bp::matrix_view<const double>(tied.data(), 1, 2), nn::loss_kind::cross_entropy,
                        bp::matrix_view<double>(g.data(), 1, 2));
  BOOST_TEST(g[0] == 0.25 - 1.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(adamw_steps) {
  nn::adamw_options o{.learning_rate = 0.1, .weight_decay = 0.0};
  {  // first step moves each parameter by lr against the sign of its gradient
    nn::adamw opt(2, o);
    std::vector<float> p = {1, 1};
    const std::vector<float> g = {3, -0.5f};
    opt.step(p, g);
    BOOST_TEST(p[0] == 0.9f, boost::test_tools::tolerance(1e-5f));
    BOOST_TEST(p[1] == 1.1f, boost::test_tools::tolerance(1e-5f));
  }
  {  // decoupled weight decay alone: p · (1 − lr · wd)
    nn::adamw opt(1, {.learning_rate = 0.1, .weight_decay = 0.5});
    std::vector<float> p = {2};
    opt.step(p, std::vector<float>{0});
    BOOST_TEST(p[0] == 2.0f * 0.95f, boost::test_tools::tolerance(1e-6f));
  }
  // Minimises f(p) = ½ Σ a_i (p_i − c_i)², with very different curvatures.
  const std::vector<float> a = {100, 1, 0.01f}, target = {1, -2, 3};
  std::vector<float> p(3, 0.0f), g(3);
  o.learning_rate = 0.01;
  nn::adamw opt(3, o);
  for (int t = 0; t < 5000; ++t) {
    for (std::size_t i = 0; i < 3; ++i) g[i] = a[i] * (p[i] - target[i]);
    opt.step(p, g);
  }
  BOOST_TEST(opt.steps() == 5000);
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(std::abs(p[i] - target[i]) < 0.02f);
}

BOOST_AUTO_TEST_CASE(learns_a_synthetic_task_deterministically) {
  const auto train = linear_teacher_set(2000, 1), val = linear_teacher_set(500, 2);
  nn::training_options o;
  o.hidden = {32, 32};
  o.dropout = 0.1;
  o.optimizer.learning_rate = 3e-3;
  o.batch_size = 64;
  o.max_epochs = 60;
  o.patience = 15;
  o.seed = 5;
  std::vector<nn::epoch_report> reports;
  o.on_epoch = [&](const nn::epoch_report& r) { reports.push_back(r); };
  const auto r1 = nn::train(train, val, o);
  BOOST_TEST_MESSAGE("synthetic task: epochs " << r1.epochs_run << ", best epoch " << r1.best.epoch << ", accuracy "
                                               << r1.best.validation_accuracy << ", mean tau "
                                               << r1.best.validation_mean_tau);
  BOOST_TEST(r1.best.validation_accuracy > 0.9);
  BOOST_TEST(reports.size() == std::size_t(r1.epochs_run));
  BOOST_TEST(reports.front().train_loss > reports.back().train_loss);
  BOOST_TEST(reports[std::size_t(r1.best.epoch - 1)].improved);
  // The returned model is the best epoch's: re-evaluating it gives the same numbers.
  const auto again = nn::evaluate(r1.model, val, o.loss);
  BOOST_TEST(again.mean_tau == r1.best.validation_mean_tau);
  BOOST_TEST(again.oracle_mean_tau >= again.mean_tau);
  BOOST_TEST(nn::evaluate(nn::mlp<Eigen::bfloat16>(r1.model), val, o.loss).accuracy > 0.85);
  // Bit-identical further runs, with every buffer train allocates at another offset from a 64-byte
  // boundary (each alignment a 16-byte-aligned malloc can give against an AVX-512 vector).
  o.on_epoch = nullptr;
  for (const std::size_t shift : {0, 16, 32, 48}) {
    BOOST_TEST_CONTEXT("heap shift " << shift << " bytes") {
      const bp::testing::scoped_heap_shift shifted(shift);
      const auto r2 = nn::train(train, val, o);
      BOOST_TEST(std::ranges::equal(r1.model.parameters(), r2.model.parameters()));
      BOOST_TEST(std::ranges::equal(r1.model.feature_std(), r2.model.feature_std()));
      BOOST_TEST(r1.best.validation_loss == r2.best.validation_loss);
    }
  }
}

BOOST_AUTO_TEST_CASE(gradient_does_not_depend_on_buffer_addresses) {
  // The same parameters, inputs and gradient at every float offset within a 64-byte line: the loss
  // and every gradient entry are bit-identical (vectorised code must not associate by address).
  // Layers wider than a vector register and a batch of 9 rows give each reduction vectorised paths.
  const nn::mlp_shape shape{6, {37, 37}, 5};
  const std::int64_t batch = 9;
  nn::mlp<float> m(shape);
  blockpilot::nn::initialize(m, 3);
  std::mt19937_64 rng(4);
  std::vector<float> x(std::size_t(batch * shape.input)), tau(std::size_t(batch * shape.classes));
  for (auto& v : x) v = float(2 * uniform(rng) - 1);
  for (auto& v : tau) v = float(3 + 3 * uniform(rng));
  const auto n = m.parameters().size();
  std::vector<float> params_at(n + 16), grad_at(n + 16), x_at(x.size() + 16);
  std::vector<float> first_grad;
  float first_loss = 0;
  for (std::size_t offset = 0; offset < 16; ++offset) {
    // Heap blocks start on a 64-byte boundary (heap_shift 0), so this is offset·4 bytes past a line.
    const std::span<float> params(params_at.data() + offset, n), grad(grad_at.data() + offset, n);
    std::ranges::copy(m.parameters(), params.begin());
    std::ranges::copy(x, x_at.begin() + std::ptrdiff_t(offset));
    const float loss = nn::loss_and_gradient<float>(
        shape, std::span<const float>(params), bp::matrix_view<const float>(x_at.data() + offset, batch, shape.input),
        bp::matrix_view<const float>(tau.data(), batch, shape.classes), nn::loss_kind::expected_tau, 0.3, 99, grad);
    if (offset == 0) {
      first_loss = loss;
      first_grad.assign(grad.begin(), grad.end());
    }
    BOOST_TEST_CONTEXT("offset " << offset << " floats") {
      BOOST_TEST(loss == first_loss);
      BOOST_TEST(std::ranges::equal(grad, first_grad));
    }
  }
}

BOOST_AUTO_TEST_CASE(expected_tau_beats_cross_entropy_on_near_ties) {
  const auto train = near_tie_set(2000, 3), val = near_tie_set(1000, 4);
  nn::training_options o;
  o.hidden = {16, 16};
  o.dropout = 0.0;
  o.optimizer.learning_rate = 3e-3;
  o.batch_size = 64;
  o.max_epochs = 30;
  o.patience = 30;
  o.seed = 11;
  double final_ce_tau = 0;
  o.on_epoch = [&](const nn::epoch_report& r) { final_ce_tau = r.validation_mean_tau; };
  const auto ce = nn::train(train, val, o);
  o.loss = nn::loss_kind::expected_tau;
  o.on_epoch = nullptr;
  const auto et = nn::train(train, val, o);
  BOOST_TEST_MESSAGE("near ties: mean tau CE best " << ce.best.validation_mean_tau << " (last epoch " << final_ce_tau
                                                    << "), expected-tau " << et.best.validation_mean_tau);
  BOOST_TEST(et.best.validation_mean_tau > 4.95);
  BOOST_TEST(et.best.validation_mean_tau >= ce.best.validation_mean_tau - 1e-3);
  BOOST_TEST(final_ce_tau < 4.5);  // CE follows the noisy majority label
}

BOOST_AUTO_TEST_CASE(invalid_inputs_throw) {
  const auto good = near_tie_set(10, 1);
  auto bad = good;
  bad.features.pop_back();
  BOOST_CHECK_THROW(nn::train(bad, good, {}), bp::error);
  bad = good;
  bad.tau[3] = std::nanf("");
  BOOST_CHECK_THROW(nn::train(good, bad, {}), bp::error);
  nn::training_options o;
  o.dropout = 1.0;
  BOOST_CHECK_THROW(nn::train(good, good, o), bp::error);
  std::vector<float> params(10), grad(10), x(4), tau(5);
  BOOST_CHECK_THROW(nn::loss_and_gradient<float>(grad_shape, params, bp::matrix_view<const float>(x.data(), 1, 4),
                                                 bp::matrix_view<const float>(tau.data(), 1, 3),
                                                 nn::loss_kind::cross_entropy, 0.0, 0, grad),
                    bp::error);
  nn::adamw opt(3, {});
  BOOST_CHECK_THROW(opt.step(params, grad), bp::error);
  try {
    o.dropout = 0;
    o.batch_size = 0;
    (void)nn::train(good, good, o);
    BOOST_ERROR("batch_size 0 was accepted");
  } catch (const bp::error& e) {
    BOOST_TEST(std::string(e.what()).find("batch_size") != std::string::npos);
  }
}
