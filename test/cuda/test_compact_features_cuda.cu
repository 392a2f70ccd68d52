// The CUDA compact feature pass against compact_features::extract on the same rows: statuses exactly,
// features to float tolerance, for fp32 and bf16 rows, k from 1 to 1024, vocabularies that are not a
// multiple of the segment, strided and misaligned rows, NaN / +inf / fully masked rows, argument and
// workspace errors, CUDA-graph replay, the optional probabilities output, and the compact predictor fused
// behind the pass.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "blockpilot/cuda/compact_features.cuh"
#include "cpu_reference.hpp"
#include "device_test.cuh"

namespace bp = blockpilot;
namespace cpu = blockpilot::testing::cpu;
using bp::testing::checker;
using bp::testing::device_buffer;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
constexpr std::uint32_t poison_bits = 0x55555555u;  // 1.47e13: a value no feature takes

/// The kinds of row every configuration runs.
enum class row_kind { normal, flat, masked, ties, uniform, single, nan, pos_inf, all_masked, peaked, wide, two_finite, count };
const char* name_of(row_kind k) {
  static const char* names[] = {"normal", "flat", "masked", "ties", "uniform", "single", "nan",
                                "+inf", "all_masked", "peaked", "wide", "two_finite"};
  return names[static_cast<int>(k)];
}

std::vector<float> make_row(row_kind kind, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<std::int64_t> position(0, vocab - 1);
  std::vector<float> row(static_cast<std::size_t>(vocab));
  for (float& x : row) x = normal(gen);
  switch (kind) {
    case row_kind::normal: break;
    case row_kind::flat: for (float& x : row) x *= 0.1f; break;
    case row_kind::masked: {
      std::bernoulli_distribution mask(0.6);
      for (float& x : row) if (mask(gen)) x = -inf;
      row[static_cast<std::size_t>(position(gen))] = 1.0f;  // at least one finite value
      break;
    }
    case row_kind::ties: for (float& x : row) x = std::round(x * 2.0f) / 2.0f; break;
    case row_kind::uniform: for (float& x : row) x = 0.25f; break;
    case row_kind::single: for (float& x : row) x = -inf; row[static_cast<std::size_t>(position(gen))] = -3.0f; break;
    case row_kind::nan: row[static_cast<std::size_t>(position(gen))] = qnan; break;
    case row_kind::pos_inf: row[static_cast<std::size_t>(position(gen))] = inf; break;
    case row_kind::all_masked: for (float& x : row) x = -inf; break;
    case row_kind::peaked: row[static_cast<std::size_t>(position(gen))] = 40.0f; break;
    case row_kind::wide: for (float& x : row) x *= 20.0f; break;
    case row_kind::two_finite:
      for (float& x : row) x = -inf;
      row[static_cast<std::size_t>(position(gen))] = 2.0f;
      row[static_cast<std::size_t>(position(gen))] = 1.0f;  // may land on the first: then one finite value
      break;
    case row_kind::count: break;
  }
  return row;
}

std::uint16_t to_bf16_bits(float x) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x; }
__nv_bfloat16 bf16_of_bits(std::uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __nv_bfloat16(raw);
}
float from_bf16_bits(std::uint16_t bits) {
  const std::uint32_t w = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

bool close(double got, double want, double abs_tol, double rel_tol) {
  return std::abs(got - want) <= abs_tol + rel_tol * std::abs(want);
}

/// Compares one row's GPU features with the CPU's; `what` names the case.
void compare_features(checker& c, const std::string& what, int top_k, const float* gpu, const std::vector<float>& want) {
  for (int i = 0; i < top_k; ++i)
    c.expect(close(gpu[i], want[static_cast<std::size_t>(i)], 1e-12, 3e-5), "%s: top-k probability %d: got %.9g, want %.9g",
             what.c_str(), i, gpu[i], want[static_cast<std::size_t>(i)]);
  struct tolerance {
    const char* name;
    double abs, rel;
  };
  const tolerance tol[] = {{"entropy", 1e-4, 3e-5},      {"varentropy", 5e-4, 5e-4}, {"log_sum_exp", 3e-5, 2e-6},
                           {"max_logit", 0.0, 1e-6},     {"top1_margin", 1e-5, 1e-6}, {"top_k_mass", 1e-5, 3e-5},
                           {"effective_tokens", 1e-5, 5e-4}, {"near_max_tokens", 0.0, 0.0}, {"log_vocab", 0.0, 1e-7}};
  for (int s = 0; s < cpu::compact_statistic_count(); ++s) {
    const double g = gpu[top_k + s], w = want[static_cast<std::size_t>(top_k + s)];
    c.expect(close(g, w, tol[s].abs, tol[s].rel), "%s: %s: got %.9g, want %.9g", what.c_str(), tol[s].name, g, w);
  }
}

/// One configuration: a batch of rows (every row_kind, twice with different seeds) as Logit, through the
/// GPU pass and through the CPU extractor.
template <class Logit>
void run_case(checker& c, std::int64_t vocab, int top_k, float temperature, std::int64_t row_pad = 0,
              std::int64_t features_pad = 0) {
  if (bp::testing::quick_mode() && vocab > 80000) return;
  const bool bf16 = !std::is_same_v<Logit, float>;
  const std::string what_case = std::string(bf16 ? "bf16" : "fp32") + " V=" + std::to_string(vocab) +
                                " k=" + std::to_string(top_k) + " T=" + std::to_string(temperature) +
                                " stride+" + std::to_string(row_pad);
  const int kinds = static_cast<int>(row_kind::count);
  const int batch = 2 * kinds;
  const std::int64_t stride = vocab + row_pad;
  const int feature_count = top_k + cpu::compact_statistic_count();
  const std::int64_t features_stride = feature_count + features_pad;

  std::vector<std::vector<float>> rows;
  std::vector<Logit> host(static_cast<std::size_t>(batch * stride));
  for (int r = 0; r < batch; ++r) {
    std::vector<float> row = make_row(static_cast<row_kind>(r % kinds), vocab, static_cast<std::uint32_t>(1000 * r + vocab + top_k));
    for (std::int64_t i = 0; i < vocab; ++i) {
      Logit& dst = host[static_cast<std::size_t>(r * stride + i)];
      if constexpr (std::is_same_v<Logit, float>) {
        dst = row[static_cast<std::size_t>(i)];
      } else {
        const std::uint16_t bits = to_bf16_bits(row[static_cast<std::size_t>(i)]);
        dst = bf16_of_bits(bits);
        row[static_cast<std::size_t>(i)] = from_bf16_bits(bits);  // the CPU sees exactly the widened bf16
      }
    }
    rows.push_back(std::move(row));
  }
  device_buffer<Logit> logits(host);
  device_buffer<float> features(static_cast<std::size_t>(batch * features_stride));
  device_buffer<bp::status> statuses(static_cast<std::size_t>(batch));
  device_buffer<float> probabilities(static_cast<std::size_t>(batch * stride));
  features.fill_bytes(0x55);
  statuses.fill_bytes(0x7f);
  probabilities.fill_bytes(0x55);

  bp::compact_feature_args<Logit> args;
  args.shape = {batch, vocab, top_k};
  args.logits = logits.data();
  args.row_stride = stride;
  args.temperature = temperature;
  args.features = features.data();
  args.features_stride = features_stride;
  args.statuses = statuses.data();
  args.probabilities = probabilities.data();
  args.probabilities_stride = stride;
  using op = bp::compact_feature_op<bp::cuda_backend>;
  device_buffer<std::byte> workspace(op::workspace_size(args.shape));
  const bp::status launched = op::run(bp::cuda_backend{}, args, workspace.bytes());
  c.expect(launched == bp::status::success, "%s: run: %s", what_case.c_str(), std::string(bp::to_string(launched)).c_str());
  BLOCKPILOT_SYNC_OK();
  const std::vector<float> got = features.download();
  const std::vector<bp::status> got_status = statuses.download();
  const std::vector<float> got_probabilities = probabilities.download();

  for (int r = 0; r < batch; ++r) {
    const std::string what = what_case + " row " + std::to_string(r) + " (" + name_of(static_cast<row_kind>(r % kinds)) + ")";
    std::vector<float> want;
    const bp::status want_status = cpu::compact_features(rows[static_cast<std::size_t>(r)], top_k, temperature, want);
    const float* g = got.data() + r * features_stride;
    c.expect(got_status[static_cast<std::size_t>(r)] == want_status, "%s: status %d, want %d", what.c_str(),
             static_cast<int>(got_status[static_cast<std::size_t>(r)]), static_cast<int>(want_status));
    if (want_status == bp::status::success) {
      compare_features(c, what, top_k, g, want);
    } else {
      for (int i = 0; i < feature_count; ++i) c.expect(std::isnan(g[i]), "%s: feature %d of a failed row is not NaN", what.c_str(), i);
    }
    // The optional probabilities: full_row_features' transform, to float tolerance; NaN for failed rows.
    // That transform forms the exponent as x/T − max/T, which loses up to one ulp of |max/T| to
    // cancellation (the device's (x − max)/T does not): a relative error of ε·|max/T| in every probability.
    float row_max = -std::numeric_limits<float>::infinity();
    for (const float x : rows[static_cast<std::size_t>(r)])
      if (std::isfinite(x)) row_max = std::max(row_max, x);
    const double exponent_tol =
        std::isfinite(row_max) ? 2.0 * std::numeric_limits<float>::epsilon() * std::abs(row_max / temperature) : 0.0;
    std::vector<float> want_p;
    const bp::status p_status = cpu::full_row_probabilities(rows[static_cast<std::size_t>(r)], temperature, want_p);
    c.expect(p_status == want_status, "%s: the CPU probabilities' status differs from the features'", what.c_str());
    const float* gp = got_probabilities.data() + r * stride;
    for (std::int64_t i = 0; i < vocab; ++i) {
      const double w = want_p[static_cast<std::size_t>(i)];
      if (!c.expect(want_status == bp::status::success ? close(gp[i], w, 1e-30, 3e-5 + exponent_tol) : std::isnan(gp[i]),
                    "%s: probability %lld: got %.9g, want %.9g", what.c_str(), static_cast<long long>(i), gp[i],
                    want_status == bp::status::success ? w : std::nan("")))
        break;
    }
    for (std::int64_t i = vocab; i < stride; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, gp + i, sizeof bits);
      c.expect(bits == poison_bits, "%s: padding probability %lld was written", what.c_str(), static_cast<long long>(i));
    }
    for (std::int64_t i = feature_count; i < features_stride; ++i) {  // padding untouched
      std::uint32_t bits;
      std::memcpy(&bits, g + i, sizeof bits);
      c.expect(bits == poison_bits, "%s: padding feature %lld was written", what.c_str(), static_cast<long long>(i));
    }
  }
}

void argument_checks(checker& c) {
  using op = bp::compact_feature_op<bp::cuda_backend>;
  const bp::cuda_backend be{};
  c.expect(op::can_implement({1, 1000, 0}, 1.0f) == bp::status::invalid_argument, "top_k 0");
  c.expect(op::can_implement({1, 1000, 1025}, 1.0f) == bp::status::invalid_argument, "top_k 1025");
  c.expect(op::can_implement({1, 100, 101}, 1.0f) == bp::status::invalid_argument, "top_k > vocab");
  c.expect(op::can_implement({1, op::max_vocab + 1, 8}, 1.0f) == bp::status::invalid_argument, "vocab too large");
  c.expect(op::can_implement({-1, 100, 8}, 1.0f) == bp::status::invalid_argument, "negative batch");
  for (const float t : {0.0f, -1.0f, qnan, inf, 1e-39f})
    c.expect(op::can_implement({1, 100, 8}, t) == bp::status::invalid_temperature, "temperature %g", t);
  c.expect(op::can_implement({1, 1, 1}, 1.0f) == bp::status::success, "V = k = 1");

  const bp::compact_feature_shape shape{3, 20000, 64};
  device_buffer<float> logits(3 * 20000);
  device_buffer<float> features(3 * 73);
  device_buffer<bp::status> statuses(3);
  features.fill_bytes(0x55);
  const std::size_t need = op::workspace_size(shape);
  c.expect(need > 0 && need % 256 == 0, "workspace size %zu", need);
  device_buffer<std::byte> workspace(need + 256);
  bp::compact_feature_args<float> args;
  args.shape = shape;
  args.logits = logits.data();
  args.features = features.data();
  args.statuses = statuses.data();
  c.expect(op::run(be, args, workspace.bytes().first(need - 1)) == bp::status::workspace_too_small, "workspace one byte short");
  c.expect(op::run(be, args, {}) == bp::status::workspace_too_small, "no workspace");
  c.expect(op::run(be, args, workspace.bytes().subspan(8, need)) == bp::status::invalid_argument, "misaligned workspace");
  auto bad = args;
  bad.logits = nullptr;
  c.expect(op::run(be, bad, workspace.bytes()) == bp::status::invalid_argument, "null logits");
  bad = args;
  bad.row_stride = 19999;
  c.expect(op::run(be, bad, workspace.bytes()) == bp::status::invalid_argument, "row stride < vocab");
  bad = args;
  bad.features_stride = 72;
  c.expect(op::run(be, bad, workspace.bytes()) == bp::status::invalid_argument, "features stride < k + 9");
  bad = args;
  bad.probabilities = features.data();
  bad.probabilities_stride = 100;
  c.expect(op::run(be, bad, workspace.bytes()) == bp::status::invalid_argument, "probabilities stride < vocab");
  bad = args;
  bad.temperature = 0.0f;
  c.expect(op::run(be, bad, workspace.bytes()) == bp::status::invalid_temperature, "T = 0");
  bad = args;
  bad.shape.batch = 0;
  c.expect(op::run(be, bad, {}) == bp::status::success, "empty batch");
  BLOCKPILOT_SYNC_OK();
  const std::vector<float> untouched = features.download();
  for (const float f : untouched) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (!c.expect(bits == poison_bits, "a rejected call wrote features")) break;
  }
}

/// Captures one run in a CUDA graph, changes the logits in place, replays twice: each replay matches the
/// CPU on the current logits (the row tickets are re-zeroed by the graph's memset node).
void graph_replay(checker& c) {
  using op = bp::compact_feature_op<bp::cuda_backend>;
  const std::int64_t vocab = 50000;
  const int batch = 4, top_k = 32;
  device_buffer<float> logits(batch * vocab);
  device_buffer<float> features(batch * (top_k + 9));
  device_buffer<bp::status> statuses(batch);
  bp::compact_feature_args<float> args;
  args.shape = {batch, vocab, top_k};
  args.logits = logits.data();
  args.temperature = 0.8f;
  args.features = features.data();
  args.statuses = statuses.data();
  device_buffer<std::byte> workspace(op::workspace_size(args.shape));
  cudaStream_t stream;
  BLOCKPILOT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  BLOCKPILOT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const bp::status captured = op::run(bp::cuda_backend{stream}, args, workspace.bytes());
  BLOCKPILOT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  c.expect(captured == bp::status::success, "graph capture: %s", std::string(bp::to_string(captured)).c_str());
  cudaGraphExec_t exec;
  BLOCKPILOT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    std::vector<float> host;
    std::vector<std::vector<float>> rows;
    for (int r = 0; r < batch; ++r) {
      rows.push_back(make_row(row_kind::normal, vocab, static_cast<std::uint32_t>(77 + 10 * replay + r)));
      host.insert(host.end(), rows.back().begin(), rows.back().end());
    }
    logits.upload(host);
    BLOCKPILOT_CUDA_OK(cudaGraphLaunch(exec, stream));
    BLOCKPILOT_CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<float> got = features.download();
    const std::vector<bp::status> got_status = statuses.download();
    for (int r = 0; r < batch; ++r) {
      std::vector<float> want;
      (void)cpu::compact_features(rows[static_cast<std::size_t>(r)], top_k, 0.8f, want);
      c.expect(got_status[static_cast<std::size_t>(r)] == bp::status::success, "graph replay %d row %d status", replay, r);
      compare_features(c, "graph replay " + std::to_string(replay) + " row " + std::to_string(r), top_k,
                       got.data() + r * (top_k + 9), want);
    }
  }
  BLOCKPILOT_CUDA_OK(cudaGraphExecDestroy(exec));
  BLOCKPILOT_CUDA_OK(cudaGraphDestroy(graph));
  BLOCKPILOT_CUDA_OK(cudaStreamDestroy(stream));
}

/// The fused compact predictor: class logits to tolerance against the CPU network on the CPU features,
/// classes exactly where the CPU's top two logits are not nearly tied, -1 for failed rows.
template <class W>
void fused_predictor(checker& c, std::int64_t vocab, int top_k, std::vector<int> hidden) {
  if (bp::testing::quick_mode()) vocab = std::min<std::int64_t>(vocab, 20000);
  const bool bf16 = std::is_same_v<W, __nv_bfloat16>;
  const int input = top_k + cpu::compact_statistic_count(), classes = 5;
  const std::string what_case = std::string("fused ") + (bf16 ? "bf16" : "fp32") + " V=" + std::to_string(vocab) +
                                " k=" + std::to_string(top_k);
  const cpu::mlp_reference net(input, hidden, classes, 4242 + static_cast<std::uint64_t>(top_k), bf16);
  const int kinds = static_cast<int>(row_kind::count);
  const int batch = kinds;
  std::vector<float> host;
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < batch; ++r) {
    rows.push_back(make_row(static_cast<row_kind>(r), vocab, static_cast<std::uint32_t>(500 + r)));
    host.insert(host.end(), rows.back().begin(), rows.back().end());
  }
  device_buffer<float> logits(host);
  device_buffer<float> features(static_cast<std::size_t>(batch * input));
  device_buffer<bp::status> statuses(batch);
  device_buffer<int> classes_out(batch);
  device_buffer<float> class_logits(static_cast<std::size_t>(batch * classes));
  device_buffer<std::byte> parameters(net.parameter_bytes());
  BLOCKPILOT_CUDA_OK(cudaMemcpy(parameters.data(), net.parameters(), net.parameter_bytes(), cudaMemcpyHostToDevice));
  BLOCKPILOT_CUDA_OK(cudaDeviceSynchronize());
  device_buffer<float> mean(net.feature_mean()), stddev(net.feature_std());

  bp::compact_feature_args<float> args;
  args.shape = {batch, vocab, top_k};
  args.logits = logits.data();
  args.temperature = 1.0f;
  args.features = features.data();
  args.statuses = statuses.data();
  bp::compact_predictor_args<W> predictor;
  predictor.network.parameters = reinterpret_cast<const W*>(parameters.data());
  predictor.network.feature_mean = mean.data();
  predictor.network.feature_std = stddev.data();
  bp::mlp_device_shape shape;
  shape.input = input;
  shape.hidden_count = static_cast<int>(hidden.size());
  for (std::size_t i = 0; i < hidden.size(); ++i) shape.hidden[i] = hidden[i];
  shape.classes = classes;
  predictor.network.shape = shape;
  predictor.classes = classes_out.data();
  predictor.class_logits = class_logits.data();
  using op = bp::compact_feature_op<bp::cuda_backend>;
  device_buffer<std::byte> workspace(op::workspace_size(args.shape));
  const bp::status launched = op::run(bp::cuda_backend{}, args, predictor, workspace.bytes());
  c.expect(launched == bp::status::success, "%s: run: %s", what_case.c_str(), std::string(bp::to_string(launched)).c_str());
  BLOCKPILOT_SYNC_OK();
  const std::vector<int> got_class = classes_out.download();
  const std::vector<float> got_logits = class_logits.download();
  int compared = 0;
  for (int r = 0; r < batch; ++r) {
    const std::string what = what_case + " row " + std::to_string(r) + " (" + name_of(static_cast<row_kind>(r)) + ")";
    std::vector<float> f;
    const bp::status s = cpu::compact_features(rows[static_cast<std::size_t>(r)], top_k, 1.0f, f);
    bool usable = s == bp::status::success;
    for (const float x : f) usable = usable && std::isfinite(x);
    if (!usable) {
      c.expect(got_class[static_cast<std::size_t>(r)] == -1, "%s: class %d, want -1 (fallback)", what.c_str(), got_class[static_cast<std::size_t>(r)]);
      continue;
    }
    std::vector<float> want(classes);
    c.expect(net.forward(f.data(), 1, want.data()) == bp::status::success, "%s: CPU forward", what.c_str());
    double scale = 0.0;
    for (const float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
    for (int k = 0; k < classes; ++k)
      c.expect(close(got_logits[static_cast<std::size_t>(r * classes + k)], want[static_cast<std::size_t>(k)], 1e-3 * (1.0 + scale), 0.0),
               "%s: class logit %d: got %.7g, want %.7g", what.c_str(), k, got_logits[static_cast<std::size_t>(r * classes + k)],
               want[static_cast<std::size_t>(k)]);
    std::vector<float> sorted = want;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 1e-2 * (1.0 + scale)) {
      ++compared;
      c.expect(got_class[static_cast<std::size_t>(r)] == cpu::argmax(want), "%s: class %d, want %lld", what.c_str(),
               got_class[static_cast<std::size_t>(r)], static_cast<long long>(cpu::argmax(want)));
    }
  }
  c.expect(compared > 0, "%s: no row had a clear class", what_case.c_str());

  // Shapes that cannot be fused.
  auto wrong = predictor;
  wrong.network.shape.input = input + 1;
  c.expect(op::run(bp::cuda_backend{}, args, wrong, workspace.bytes()) == bp::status::invalid_argument, "%s: input mismatch", what_case.c_str());
  wrong = predictor;
  wrong.network.shape.hidden[0] = 4096;
  c.expect(op::run(bp::cuda_backend{}, args, wrong, workspace.bytes()) == bp::status::invalid_argument, "%s: too wide to fuse", what_case.c_str());
  wrong = predictor;
  wrong.classes = nullptr;
  c.expect(op::run(bp::cuda_backend{}, args, wrong, workspace.bytes()) == bp::status::invalid_argument, "%s: null classes", what_case.c_str());
}

/// Statuses at tiny temperatures, the same on both backends. At T = 2e-38 with ordinary logits max y = 1e39 is
/// finite as a double but not as the float feature (it once passed on the GPU with +inf features); rows whose
/// maximum times log2(e) / T passes 2^30 (detail::max_scaled_logit) are non_finite_logits on both, in the
/// CPU pass's first chunk or past it (`at`); just inside, a row succeeds.
void statistics_that_overflow_a_float(checker& c, float temperature, float row_max, std::size_t at,
                                      bp::status expected) {
  constexpr std::int64_t vocab = 1000;
  constexpr int top_k = 8;
  std::vector<float> row = make_row(row_kind::normal, vocab, 11);
  if (at > 3) std::fill(row.begin(), row.begin() + 64, -5.0f);
  row[at] = row_max;
  std::vector<float> want;
  const bp::status want_status = cpu::compact_features(row, top_k, temperature, want);
  c.expect(want_status == expected, "overflowing statistics on the CPU (T %g, max %g at %zu): status %d",
           static_cast<double>(temperature), static_cast<double>(row_max), at, static_cast<int>(want_status));
  device_buffer<float> logits(row), features(static_cast<std::size_t>(top_k + cpu::compact_statistic_count()));
  device_buffer<bp::status> statuses(1);
  bp::compact_feature_args<float> args;
  args.shape = {1, vocab, top_k};
  args.logits = logits.data();
  args.row_stride = vocab;
  args.temperature = temperature;
  args.features = features.data();
  args.features_stride = top_k + cpu::compact_statistic_count();
  args.statuses = statuses.data();
  using op = bp::compact_feature_op<bp::cuda_backend>;
  device_buffer<std::byte> workspace(op::workspace_size(args.shape));
  c.expect(op::run(bp::cuda_backend{}, args, workspace.bytes()) == bp::status::success, "overflowing statistics: run");
  BLOCKPILOT_SYNC_OK();
  const bp::status got = statuses.download()[0];
  c.expect(got == want_status, "overflowing statistics: status %d, want %d", static_cast<int>(got), static_cast<int>(want_status));
}

}  // namespace

int main() {
  bp::testing::require_device_or_skip("compact_features_cuda");
  checker c("compact_features_cuda");
  argument_checks(c);
  // Vocabularies around the segment (8192) and the merge capacity; k at its limits.
  run_case<float>(c, 1, 1, 1.0f);
  run_case<float>(c, 7, 1, 1.0f);
  run_case<float>(c, 7, 7, 0.7f);
  run_case<float>(c, 1000, 1, 1.0f);
  run_case<float>(c, 1000, 64, 2.5f);
  run_case<float>(c, 1000, 1000, 1.0f);
  run_case<float>(c, 8191, 256, 1.0f);
  run_case<float>(c, 8192, 1024, 1.0f);
  run_case<float>(c, 8193, 1024, 0.7f);
  run_case<float>(c, 8193, 2, 1.0f);
  run_case<float>(c, 32003, 1024, 1.0f);   // 4 segments: 4096 candidates, merged in shared memory
  run_case<float>(c, 32003, 64, 0.05f);
  run_case<float>(c, 70001, 1024, 1.0f);   // 9 x 1024 = 9216 candidates: selected from global memory
  run_case<float>(c, 151936, 1, 1.0f);
  run_case<float>(c, 151936, 256, 1.0f);   // 19 segments x 256 = 4864 candidates in shared memory
  run_case<float>(c, 151936, 1024, 0.7f);  // 19 x 1024 = 19456 candidates: selected from global memory
  // Strided rows: misaligned (scalar loads) and padded feature rows.
  run_case<float>(c, 8193, 100, 1.0f, 3, 5);
  run_case<float>(c, 20000, 512, 1.3f, 4, 1);
  // bf16 rows.
  run_case<__nv_bfloat16>(c, 1000, 64, 1.0f);
  run_case<__nv_bfloat16>(c, 151936, 256, 1.0f);
  run_case<__nv_bfloat16>(c, 151936, 1024, 1.0f);
  run_case<__nv_bfloat16>(c, 8193, 100, 0.9f, 1, 0);
  statistics_that_overflow_a_float(c, 2e-38f, 20.0f, 3, bp::status::non_finite_logits);
  statistics_that_overflow_a_float(c, 1e-37f, 30.0f, 3, bp::status::non_finite_logits);
  statistics_that_overflow_a_float(c, 1e-37f, 20.0f, 100, bp::status::non_finite_logits);
  statistics_that_overflow_a_float(c, 1e-9f, 10.125f, 3, bp::status::non_finite_logits);
  statistics_that_overflow_a_float(c, 1e-7f, 20.0f, 100, bp::status::success);
  graph_replay(c);
  fused_predictor<float>(c, 151936, 64, {256, 256});
  fused_predictor<__nv_bfloat16>(c, 151936, 64, {256, 256});
  fused_predictor<float>(c, 1000, 16, {32, 48, 48});
  fused_predictor<__nv_bfloat16>(c, 32003, 1024, {512});
  return c.finish();
}
