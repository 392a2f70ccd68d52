// Training of the predictor mlp<float> on measured tau vectors: backward pass with dropout,
// cross-entropy or expected-regret loss, AdamW, early stopping on validation mean tau. CPU, deterministic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "blockpilot/nn/mlp.hpp"
#include "blockpilot_workbench/nn/initialize.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::nn {

/// Training objective over the 2k+1 candidate sizes.
enum class loss_kind {
  cross_entropy,  ///< −log softmax(z)_y with y = argmax tau (ties to the smaller size)
  expected_tau,   ///< expected regret Σ_c softmax(z)_c (tau_max − tau_c), in tau units (tokens per step)
};

/// The name stored in predictor files ("cross_entropy", "expected_tau").
[[nodiscard]] constexpr std::string_view to_string(loss_kind k) {
  return k == loss_kind::cross_entropy ? "cross_entropy" : "expected_tau";
}

/// Samples: features `[n][dim]` (raw; standardisation happens inside `train`) and the measured tau of
/// each candidate size `[n][classes]` (class c is block size B − k + c).
struct training_set {
  std::vector<float> features;
  std::int64_t dim = 0;
  std::vector<float> tau;
  std::int64_t classes = 0;

  [[nodiscard]] std::int64_t size() const { return classes > 0 ? static_cast<std::int64_t>(tau.size()) / classes : 0; }
  /// Throws `error` naming the set and the field unless sizes agree, n >= 1 and all values are finite.
  void validate(std::string_view name) const {
    const auto fail = [&](std::string_view field, const std::string& what) {
      return error("training_set '" + std::string(name) + "' field '" + std::string(field) + "': " + what);
    };
    if (dim < 1) throw fail("dim", "must be >= 1");
    if (classes < 1) throw fail("classes", "must be >= 1");
    if (tau.empty() || tau.size() % static_cast<std::size_t>(classes) != 0)
      throw fail("tau", "must hold n >= 1 rows of " + std::to_string(classes) + " values");
    if (features.size() != static_cast<std::size_t>(size() * dim))
      throw fail("features",
                 std::to_string(features.size()) + " values, expected n × dim = " + std::to_string(size() * dim));
    for (const auto* v : {&features, &tau})
      for (std::size_t i = 0; i < v->size(); ++i)
        if (!std::isfinite((*v)[i]))
          throw fail(v == &tau ? "tau" : "features", "value " + std::to_string(i) + " is not finite");
  }
};

/// AdamW hyper-parameters (PyTorch defaults except weight_decay).
struct adamw_options {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  ///< decoupled, applied to every parameter (as torch.optim.AdamW)
};

/// AdamW over a flat fp32 parameter vector, in PyTorch's order: p ← p·(1 − lr·wd), then
/// p ← p − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + eps).
class adamw {
 public:
  adamw(std::size_t n, adamw_options options) : o_(options), m_(n, 0.0f), v_(n, 0.0f) {}
  /// One step; throws `error` unless params and grad have the size given at construction.
  void step(std::span<float> params, std::span<const float> grad) {
    if (params.size() != m_.size() || grad.size() != m_.size())
      throw error("adamw::step: field 'params'/'grad' must have " + std::to_string(m_.size()) + " entries");
    ++t_;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    const auto decay = static_cast<float>(1.0 - o_.learning_rate * o_.weight_decay);
    const auto b1 = static_cast<float>(o_.beta1), b2 = static_cast<float>(o_.beta2);
    const auto step_size = static_cast<float>(o_.learning_rate / bc1),
               inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const auto eps = static_cast<float>(o_.eps);
    for (std::size_t i = 0; i < params.size(); ++i) {
      m_[i] = b1 * m_[i] + (1.0f - b1) * grad[i];
      v_[i] = b2 * v_[i] + (1.0f - b2) * grad[i] * grad[i];
      params[i] = params[i] * decay - step_size * m_[i] / (std::sqrt(v_[i]) * inv_sqrt_bc2 + eps);
    }
  }
  [[nodiscard]] std::int64_t steps() const { return t_; }

 private:
  adamw_options o_;
  std::vector<float> m_, v_;
  std::int64_t t_ = 0;
};

/// One epoch's numbers, passed to the progress callback.
struct epoch_report {
  std::int64_t epoch = 0;          ///< 1-based
  double train_loss = 0;           ///< mean over training samples, with dropout
  double validation_loss = 0;      ///< without dropout
  double validation_mean_tau = 0;  ///< mean tau of the argmax class (the early-stopping criterion)
  double validation_accuracy = 0;  ///< share of argmax class == label (argmax tau)
  bool improved = false;           ///< this epoch's model is the new best
};

/// Settings of `train`; the shape is {dim, hidden, classes}.
struct training_options {
  std::vector<std::int64_t> hidden = {2048, 2048};
  loss_kind loss = loss_kind::cross_entropy;
  double dropout = 0.2;  ///< after each hidden ReLU, before the residual add; training only
  adamw_options optimizer{};
  std::int64_t batch_size = 32;
  std::int64_t max_epochs = 100;
  std::int64_t patience = 10;  ///< stop after this many epochs without a better validation mean tau
  /// With the expected-tau loss: train the first epochs with cross-entropy (a convex start that
  /// learns the whole posterior), then minimise expected regret; patience counts after the switch.
  std::int64_t cross_entropy_warmup = 0;
  std::uint64_t seed = 0;      ///< initialisation, shuffling and dropout all derive from it
  bool standardize = true;     ///< per-feature mean/std of the training set; else the identity
  std::function<void(const epoch_report&)> on_epoch;
};

/// The best-validation model (standardisation included) and its epoch's report.
struct training_result {
  mlp<float> model;
  epoch_report best;
  std::int64_t epochs_run = 0;
};

/// Mean loss over the rows of logits `[n][classes]` against tau `[n][classes]`; writes d(mean loss)/d
/// logits into dlogits (same shape) unless it is empty. Host memory.
template <class Scalar>
Scalar loss_rows(matrix_view<const Scalar> logits, matrix_view<const Scalar> tau, loss_kind kind,
                 matrix_view<Scalar> dlogits) {
  const std::int64_t n = logits.rows, c = logits.cols;
  std::vector<Scalar> p(static_cast<std::size_t>(c));
  Scalar total = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    const auto z = logits.row(r);
    const auto t = tau.row(r);
    const Scalar mx = *std::max_element(z.begin(), z.end());
    Scalar sum = 0;
    for (std::int64_t j = 0; j < c; ++j) sum += p[j] = std::exp(z[j] - mx);
    for (auto& v : p) v /= sum;
    const Scalar t_max = *std::max_element(t.begin(), t.end());
    Scalar row_loss = 0;
    if (kind == loss_kind::cross_entropy) {
      const auto y = mlp_detail::argmax(std::span<const Scalar>(t));
      row_loss = std::log(sum) - (z[y] - mx);
      if (!dlogits.empty())
        for (std::int64_t j = 0; j < c; ++j) dlogits.row(r)[j] = (p[j] - (j == y ? Scalar(1) : Scalar(0))) / Scalar(n);
    } else {
      for (std::int64_t j = 0; j < c; ++j) row_loss += p[j] * (t_max - t[j]);
      if (!dlogits.empty())
        for (std::int64_t j = 0; j < c; ++j) dlogits.row(r)[j] = p[j] * ((t_max - t[j]) - row_loss) / Scalar(n);
    }
    total += row_loss;
  }
  return total / Scalar(n);
}

/// Mean loss of a batch and its gradient with respect to all parameters, for the network `shape`
/// with flat parameters `params` (`mlp` layout, `[shape.parameter_count()]`). x `[batch][input]` is
/// the network input after standardisation; tau `[batch][classes]`. Dropout p zeroes each hidden
/// unit with probability p (mask from std::mt19937_64(dropout_seed), layer by layer, row-major) and
/// scales survivors by 1/(1 − p). gradient `[shape.parameter_count()]` is overwritten.
/// Scalar = double gives the reference for gradient checks. Throws `error` naming the argument when
/// a size disagrees with the shape.
template <class Scalar>
Scalar loss_and_gradient(const mlp_shape& shape, std::span<const Scalar> params, matrix_view<const Scalar> x,
                         matrix_view<const Scalar> tau, loss_kind kind, double dropout, std::uint64_t dropout_seed,
                         std::span<Scalar> gradient) {
  const auto count = static_cast<std::size_t>(shape.parameter_count());
  if (params.size() != count || gradient.size() != count || x.cols != shape.input || tau.cols != shape.classes ||
      tau.rows != x.rows || x.rows < 1)
    throw error("loss_and_gradient: field 'params'/'gradient'/'x'/'tau' does not match the shape");
  using mat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using cmap = Eigen::Map<const mat, Eigen::Unaligned, Eigen::OuterStride<>>;
  using vec = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;
  const std::size_t layers = shape.linear_count();
  const auto w = [&](std::size_t l) {
    return cmap(params.data() + shape.weight_offset(l), shape.out_features(l), shape.in_features(l),
                Eigen::OuterStride<>(shape.in_features(l)));
  };
  const auto b = [&](std::size_t l) {
    return Eigen::Map<const vec>(params.data() + shape.bias_offset(l), shape.out_features(l));
  };
  std::vector<mat> act(layers), mask(layers - 1);  // act[l]: input of linear l; mask: ReLU' × dropout
  act[0] = cmap(x.data, x.rows, x.cols, Eigen::OuterStride<>(x.row_stride));
  std::mt19937_64 rng(dropout_seed);
  const auto keep_scale = static_cast<Scalar>(1.0 / (1.0 - dropout));
  for (std::size_t l = 0; l + 1 < layers; ++l) {
    mat z = act[l] * w(l).transpose();
    z.rowwise() += b(l);
    mask[l] = (z.array() > Scalar(0)).template cast<Scalar>();
    if (dropout > 0)
      for (Eigen::Index i = 0; i < mask[l].size(); ++i)  // row-major storage: row-major order
        mask[l].data()[i] *= uniform01(rng) >= dropout ? keep_scale : Scalar(0);
    act[l + 1] = z.cwiseProduct(mask[l]);
    if (shape.residual(l)) act[l + 1] += act[l];
  }
  mat logits = act[layers - 1] * w(layers - 1).transpose();
  logits.rowwise() += b(layers - 1);
  mat g(logits.rows(), logits.cols());
  const Scalar loss = loss_rows<Scalar>(matrix_view<const Scalar>(logits.data(), logits.rows(), logits.cols()), tau,
                                        kind, matrix_view<Scalar>(g.data(), g.rows(), g.cols()));
  mat d_act;
  for (std::size_t l = layers; l-- > 0;) {
    if (l + 1 < layers) g = d_act.cwiseProduct(mask[l]);  // d loss / d z_l
    Eigen::Map<mat>(gradient.data() + shape.weight_offset(l), shape.out_features(l), shape.in_features(l)).noalias() =
        g.transpose() * act[l];
    // Bias gradient: column sums in a fixed row order. (Eigen's vectorised colwise().sum() associates
    // differently from its scalar path, and an unaligned destination takes the scalar path for its
    // first columns, so that result would depend on the gradient buffer's address.)
    Scalar* db = gradient.data() + shape.bias_offset(l);
    std::fill_n(db, g.cols(), Scalar(0));
    for (Eigen::Index r = 0; r < g.rows(); ++r)
      for (Eigen::Index j = 0; j < g.cols(); ++j) db[j] += g(r, j);
    if (l == 0) break;
    mat d_in = g * w(l);
    if (shape.residual(l)) d_in += d_act;
    d_act = std::move(d_in);
  }
  return loss;
}

/// Quality of a predictor on a labelled set.
struct evaluation {
  double loss = 0;             ///< mean loss of the given kind (no dropout)
  double mean_tau = 0;         ///< mean tau of the argmax class
  double accuracy = 0;         ///< share of argmax class == label (argmax tau, ties to the smaller size)
  double oracle_mean_tau = 0;  ///< mean of each sample's best tau in the window (the upper bound)
};

/// Evaluates a model (standardisation included) on raw features through the deployed forward path.
/// Throws `error` when the set does not match the model's shape.
template <mlp_storage T>
[[nodiscard]] evaluation evaluate(const mlp<T>& net, const training_set& set, loss_kind kind) {
  const std::int64_t n = set.size(), c = set.classes;
  std::vector<float> logits(static_cast<std::size_t>(n * c)), ws(static_cast<std::size_t>(net.workspace_size(n)));
  const matrix_view<const float> tau(set.tau.data(), n, c);
  if (net.forward(matrix_view<const float>(set.features.data(), n, set.dim), matrix_view<float>(logits.data(), n, c),
                  ws) != status::success)
    throw error("evaluate: field 'dim'/'classes' of the set does not match the model");
  const matrix_view<const float> z(logits.data(), n, c);
  evaluation e;
  e.loss = loss_rows<float>(z, tau, kind, {});
  for (std::int64_t i = 0; i < n; ++i) {
    const auto pick = argmax(z.row(i)), best = argmax(tau.row(i));
    e.mean_tau += tau.row(i)[static_cast<std::size_t>(pick)];
    e.oracle_mean_tau += tau.row(i)[static_cast<std::size_t>(best)];
    e.accuracy += pick == best ? 1.0 : 0.0;
  }
  e.mean_tau /= static_cast<double>(n);
  e.oracle_mean_tau /= static_cast<double>(n);
  e.accuracy /= static_cast<double>(n);
  return e;
}

namespace training_detail {

/// Restores Eigen's thread count on scope exit.
struct eigen_single_thread {
  int saved = Eigen::nbThreads();
  eigen_single_thread() { Eigen::setNbThreads(1); }
  ~eigen_single_thread() { Eigen::setNbThreads(saved); }
  eigen_single_thread(const eigen_single_thread&) = delete;
  eigen_single_thread& operator=(const eigen_single_thread&) = delete;
};

}  // namespace training_detail

/// Trains mlp<float> {train.dim, options.hidden, train.classes} from options.seed; returns the model of
/// the epoch with the highest validation mean tau (first such epoch on ties). Runs Eigen on one thread
/// (restoring the setting), so two runs with equal inputs give bit-identical models on one machine and
/// build. Throws `error` naming the set or option field for invalid inputs.
inline training_result train(const training_set& train_set, const training_set& validation,
                             const training_options& options) {
  train_set.validate("train");
  validation.validate("validation");
  const auto fail = [](std::string_view field, std::string_view what) {
    return error("training_options field '" + std::string(field) + "': " + std::string(what));
  };
  if (validation.dim != train_set.dim || validation.classes != train_set.classes)
    throw error("training_set 'validation' field 'dim'/'classes': differs from the training set");
  if (!(options.dropout >= 0 && options.dropout < 1)) throw fail("dropout", "must be in [0, 1)");
  if (options.batch_size < 1) throw fail("batch_size", "must be >= 1");
  if (options.max_epochs < 1) throw fail("max_epochs", "must be >= 1");
  if (options.patience < 1) throw fail("patience", "must be >= 1");
  const auto& o = options.optimizer;
  if (!(o.learning_rate > 0) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps > 0) ||
      !(o.weight_decay >= 0))
    throw fail("optimizer", "needs learning_rate > 0, betas in [0, 1), eps > 0, weight_decay >= 0");

  const training_detail::eigen_single_thread single_thread;
  const std::int64_t n = train_set.size(), d = train_set.dim, c = train_set.classes;
  training_result result{mlp<float>(mlp_shape{d, options.hidden, c}), {}, 0};
  mlp<float>& net = result.model;
  initialize(net, options.seed);

  std::vector<float> mean(static_cast<std::size_t>(d), 0.0f), sd(mean.size(), 1.0f);
  if (options.standardize) {
    for (std::int64_t j = 0; j < d; ++j) {
      double s = 0, s2 = 0;
      for (std::int64_t i = 0; i < n; ++i) s += train_set.features[static_cast<std::size_t>(i * d + j)];
      const double mu = s / static_cast<double>(n);
      for (std::int64_t i = 0; i < n; ++i) {
        const double e = train_set.features[static_cast<std::size_t>(i * d + j)] - mu;
        s2 += e * e;
      }
      const double sigma = std::sqrt(s2 / static_cast<double>(n));
      mean[static_cast<std::size_t>(j)] = static_cast<float>(mu);
      sd[static_cast<std::size_t>(j)] =
          sigma > 1e-6 && std::isfinite(static_cast<float>(sigma)) ? static_cast<float>(sigma) : 1.0f;
    }
  }
  net.set_standardization(mean, sd);
  std::vector<float> xs(train_set.features.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::size_t j = i % static_cast<std::size_t>(d);
    xs[i] = (train_set.features[i] - mean[j]) * (1.0f / sd[j]);
  }

  adamw opt(net.parameters().size(), options.optimizer);
  std::vector<float> grad(net.parameters().size()), best_params(net.parameters().begin(), net.parameters().end());
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::mt19937_64 shuffle_rng(options.seed ^ 0x9e3779b97f4a7c15ULL), dropout_rng(options.seed ^ 0xd1b54a32d192ed03ULL);
  const std::int64_t bs = std::min(options.batch_size, n);
  std::vector<float> xb(static_cast<std::size_t>(bs * d)), tb(static_cast<std::size_t>(bs * c));
  result.best.validation_mean_tau = -std::numeric_limits<double>::infinity();
  std::int64_t stale = 0;
  for (std::int64_t epoch = 1; epoch <= options.max_epochs && stale < options.patience; ++epoch) {
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    for (std::int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<std::size_t>(i)], order[shuffle_rng() % static_cast<std::uint64_t>(i + 1)]);
    const bool warming_up = epoch <= options.cross_entropy_warmup;
    const loss_kind epoch_loss = warming_up ? loss_kind::cross_entropy : options.loss;
    double train_loss = 0;
    for (std::int64_t b0 = 0; b0 < n; b0 += bs) {
      const std::int64_t rows = std::min(bs, n - b0);
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto src = order[static_cast<std::size_t>(b0 + r)];
        std::copy_n(xs.begin() + src * d, d, xb.begin() + r * d);
        std::copy_n(train_set.tau.begin() + src * c, c, tb.begin() + r * c);
      }
      const std::span<const float> params = net.parameters();
      train_loss += rows * loss_and_gradient<float>(net.shape(), params, matrix_view<const float>(xb.data(), rows, d),
                                                    matrix_view<const float>(tb.data(), rows, c), epoch_loss,
                                                    options.dropout, dropout_rng(), grad);
      opt.step(net.parameters(), grad);
    }
    const evaluation e = evaluate(net, validation, epoch_loss);
    epoch_report report{epoch, train_loss / static_cast<double>(n), e.loss, e.mean_tau, e.accuracy, false};
    report.improved = report.validation_mean_tau > result.best.validation_mean_tau;
    if (report.improved) {
      result.best = report;
      std::ranges::copy(net.parameters(), best_params.begin());
      stale = 0;
    } else if (!warming_up) {
      ++stale;
    }
    result.epochs_run = epoch;
    if (options.on_epoch) options.on_epoch(report);
  }
  std::ranges::copy(best_params, net.parameters().begin());
  return result;
}

}  // namespace blockpilot::nn
