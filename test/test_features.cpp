// Tests of the feature extractors against naive double-precision references: values, edge cases,
// status codes, concept conformance and metadata round trips. The row kernels' every variant this CPU
// runs (generic, avx2, avx512) meets the references, and the extractors run the widest.
#define BOOST_TEST_MODULE features
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/full_row.hpp"

namespace bp = blockpilot;
namespace rk = blockpilot::cpu_detail::row_kernels;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> normal_row(std::size_t v, unsigned seed, float sigma = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> row(v);
  for (float& x : row) x = d(gen);
  return row;
}

/// Double-precision softmax moments and sorted top-k of row / t.
struct reference {
  double max = -INFINITY, z = 0.0, entropy = 0.0, varentropy = 0.0;
  std::vector<double> sorted;  // descending, all entries
  reference(const std::vector<float>& row, double t) {
    for (float x : row) max = std::max(max, static_cast<double>(x));
    double s = 0.0, q = 0.0;
    for (float x : row) {
      if (x == -INFINITY) continue;
      const double d = (x - max) / t, e = std::exp(d);
      z += e;
      s += e * d;
      q += e * d * d;
    }
    entropy = std::log(z) - s / z;
    varentropy = q / z - (s / z) * (s / z);
    sorted.assign(row.begin(), row.end());
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (double& x : sorted) x /= t;
  }
  [[nodiscard]] double prob(std::size_t i) const { return std::exp(sorted[i] - max_y()) / z; }
  [[nodiscard]] double max_y() const { return sorted[0]; }
};

void check_close(double got, double want, double abs_tol, double rel_tol, const char* what) {
  BOOST_TEST_INFO(what << ": got " << got << ", want " << want);
  BOOST_TEST(std::abs(got - want) <= abs_tol + rel_tol * std::abs(want));
}

/// The row kernels' variants this CPU runs, the widest last.
std::vector<rk::vector_variant> runnable_variants() {
  std::vector<rk::vector_variant> r;
  for (const auto v : {rk::vector_variant::generic, rk::vector_variant::avx2, rk::vector_variant::avx512})
    if (rk::runs(v)) r.push_back(v);
  return r;
}
const char* name_of(rk::vector_variant v) {
  return v == rk::vector_variant::generic ? "generic" : v == rk::vector_variant::avx2 ? "avx2" : "avx512";
}

/// The extractor's features, and each variant's compact pass on the same row: the widest variant's
/// features are the extractor's, bit for bit; every variant returns `expect`. Returns every variant's.
std::vector<std::vector<float>> run_compact(const bp::compact_features& f, const std::vector<float>& row,
                                            bp::status expect = bp::status::success) {
  const auto v = static_cast<std::int64_t>(row.size());
  std::vector<float> ws(f.workspace_size(v), 12345.0f);
  std::vector<float> extracted(static_cast<std::size_t>(f.feature_count(v)), -1.0f);
  const bp::status got = f.extract(row, ws, extracted);
  BOOST_TEST((got == expect), "status: " << bp::to_string(got));
  std::vector<std::vector<float>> outs;
  for (const rk::vector_variant variant : runnable_variants()) {
    std::vector<float> out(extracted.size(), -1.0f);
    std::ranges::fill(ws, 12345.0f);
    const bp::status s = rk::compact_pass(row, f.top_k, 1.0f / f.temperature, ws, out, variant);
    BOOST_TEST((s == expect), name_of(variant) << " status: " << bp::to_string(s));
    outs.push_back(std::move(out));
  }
  if (expect == bp::status::success)
    BOOST_TEST(std::memcmp(outs.back().data(), extracted.data(), extracted.size() * sizeof(float)) == 0,
               "the extractor's features are not the widest variant's (" << name_of(runnable_variants().back()) << ")");
  return outs;
}

void check_compact(const bp::compact_features& f, const std::vector<float>& row) {
  const reference ref(row, f.temperature);
  const auto variants = runnable_variants();
  const auto outs = run_compact(f, row);
  for (std::size_t variant = 0; variant < outs.size(); ++variant) BOOST_TEST_CONTEXT(
      "V=" << row.size() << " k=" << f.top_k << " T=" << f.temperature << " variant " << name_of(variants[variant])) {
    const std::vector<float>& out = outs[variant];
    const auto k = static_cast<std::size_t>(f.top_k);
    double mass = 0.0;
    int near = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const double p = ref.prob(i);
      // 8e-6: the compact pass's exp2_poly4 has relative error < 3e-6, in the numerator and in Z (2 x 3e-6),
      // plus the float rounding of its argument (0.5 ulp(|y|) ln 2 < 1e-6 for the terms that matter).
      check_close(out[i], p, 1e-7, 8e-6, "top-k probability");
      mass += p;
      near += ref.sorted[i] - ref.max_y() >= -2.0;
    }
    const auto stat = [&](bp::compact_statistic s) { return static_cast<double>(out[static_cast<std::size_t>(f.offset(s))]); };
    using cs = bp::compact_statistic;
    check_close(stat(cs::entropy), ref.entropy, 1e-5, 1e-5, "entropy");
    check_close(stat(cs::varentropy), ref.varentropy, 2e-4, 1e-4, "varentropy");
    check_close(stat(cs::log_sum_exp), ref.max_y() + std::log(ref.z), 1e-5, 1e-6, "log_sum_exp");
    check_close(stat(cs::max_logit), ref.max_y(), 0.0, 1e-6, "max_logit");
    const double margin = row.size() > 1 && ref.sorted[1] > -INFINITY ? std::min(ref.sorted[0] - ref.sorted[1], 88.0) : 88.0;
    check_close(stat(cs::top1_margin), margin, 1e-5, 1e-5, "top1_margin");
    check_close(stat(cs::top_k_mass), mass, 1e-6, 1e-5, "top_k_mass");
    check_close(stat(cs::effective_tokens), std::exp(ref.entropy), 1e-5, 1e-5, "effective_tokens");
    check_close(stat(cs::near_max_tokens), near, 0.0, 0.0, "near_max_tokens");
    check_close(stat(cs::log_vocab), std::log(static_cast<double>(row.size())), 0.0, 1e-7, "log_vocab");
  }
}

}  // namespace

// Types for the concept tests: one complete extractor, and copies each missing one member (a named
// namespace, so unused members do not warn).
namespace concept_cases {

struct complete {
  static constexpr std::string_view name = "complete";
  std::int64_t feature_count(std::int64_t v) const { return v; }
  std::size_t workspace_size(std::int64_t) const { return 0; }
  bp::status extract(std::span<const float>, std::span<float>, std::span<float>) const { return bp::status::success; }
  std::map<std::string, std::string> metadata() const { return {}; }
};
struct no_name {
  std::int64_t feature_count(std::int64_t v) const { return v; }
  std::size_t workspace_size(std::int64_t) const { return 0; }
  bp::status extract(std::span<const float>, std::span<float>, std::span<float>) const { return bp::status::success; }
  std::map<std::string, std::string> metadata() const { return {}; }
};
struct no_workspace_size {
  static constexpr std::string_view name = "x";
  std::int64_t feature_count(std::int64_t v) const { return v; }
  bp::status extract(std::span<const float>, std::span<float>, std::span<float>) const { return bp::status::success; }
  std::map<std::string, std::string> metadata() const { return {}; }
};
struct extract_returns_bool {
  static constexpr std::string_view name = "x";
  std::int64_t feature_count(std::int64_t v) const { return v; }
  std::size_t workspace_size(std::int64_t) const { return 0; }
  bool extract(std::span<const float>, std::span<float>, std::span<float>) const { return true; }
  std::map<std::string, std::string> metadata() const { return {}; }
};
struct no_metadata {
  static constexpr std::string_view name = "x";
  std::int64_t feature_count(std::int64_t v) const { return v; }
  std::size_t workspace_size(std::int64_t) const { return 0; }
  bp::status extract(std::span<const float>, std::span<float>, std::span<float>) const { return bp::status::success; }
};
struct non_const_extract {
  static constexpr std::string_view name = "x";
  std::int64_t feature_count(std::int64_t v) const { return v; }
  std::size_t workspace_size(std::int64_t) const { return 0; }
  bp::status extract(std::span<const float>, std::span<float>, std::span<float>) { return bp::status::success; }
  std::map<std::string, std::string> metadata() const { return {}; }
};

}  // namespace concept_cases

static_assert(bp::feature_extractor<bp::compact_features>);
static_assert(bp::feature_extractor<bp::full_row_features>);
static_assert(bp::metadata_loadable<bp::compact_features>);
static_assert(bp::metadata_loadable<bp::full_row_features>);
static_assert(bp::feature_extractor<concept_cases::complete>);
static_assert(!bp::metadata_loadable<concept_cases::complete>);
static_assert(!bp::feature_extractor<concept_cases::no_name>);
static_assert(!bp::feature_extractor<concept_cases::no_workspace_size>);
static_assert(!bp::feature_extractor<concept_cases::extract_returns_bool>);
static_assert(!bp::feature_extractor<concept_cases::no_metadata>);
static_assert(!bp::feature_extractor<concept_cases::non_const_extract>);
static_assert(!bp::feature_extractor<int>);

namespace {

/// True when f throws blockpilot::error whose message names both `source` and `field`.
template <class F>
bool throws_naming(F&& f, std::string_view source, std::string_view field) {
  try {
    f();
  } catch (const bp::error& e) {
    const std::string msg = e.what();
    BOOST_TEST_MESSAGE(msg);
    return msg.find(source) != std::string::npos && msg.find("'" + std::string(field) + "'") != std::string::npos;
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(exp_poly5_matches_std_exp) {
  double worst = 0.0;
  for (float d = -86.99f; d <= 88.0f; d += 0.0137f) {
    const double want = std::exp(static_cast<double>(d));
    worst = std::max(worst, std::abs(bp::cpu_detail::row_kernels::generic::exp_poly5(d) - want) / want);
  }
  BOOST_TEST(worst < 3e-7);
  BOOST_TEST(bp::cpu_detail::row_kernels::generic::exp_poly5(0.0f) == 1.0f);
  BOOST_TEST(bp::cpu_detail::row_kernels::generic::exp_poly5(-88.0f) == 0.0f);
  BOOST_TEST(bp::cpu_detail::row_kernels::generic::exp_poly5(-inf) == 0.0f);
}

BOOST_AUTO_TEST_CASE(row_scans_agree_across_variants) {
  std::string ran;
  for (const auto v : runnable_variants()) ran += std::string(" ") + name_of(v);
  BOOST_TEST_MESSAGE("row kernel variants this CPU runs:" << ran << " (the extractors run the last)");
  unsigned seed = 40;
  for (const std::size_t n : {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 49152, 151936}) {
    std::vector<std::vector<float>> rows = {normal_row(n, ++seed), normal_row(n, ++seed, 0.01f)};
    auto masked = normal_row(n, ++seed);
    for (std::size_t i = 1; i < n; i += 2) masked[i] = -inf;
    rows.push_back(masked);
    auto tied = normal_row(n, ++seed);
    const float top = *std::max_element(tied.begin(), tied.end()) + 1.0f;
    tied[n - 1] = top;
    tied[n / 2] = top;  // the first of two maxima wins
    rows.push_back(tied);
    for (const auto& row : rows) {
      const float want_max = *std::max_element(row.begin(), row.end());
      const auto want_arg = static_cast<bp::token_id>(std::find(row.begin(), row.end(), want_max) - row.begin());
      const float inv_t = 1.3f, ref = want_max * inv_t;
      double want_z = 0.0;
      for (const float x : row) want_z += std::exp(static_cast<double>(x) * inv_t - ref);
      for (const auto v : runnable_variants()) BOOST_TEST_CONTEXT("n=" << n << " variant " << name_of(v)) {
        float m = 0.0f, m2 = 0.0f;
        bp::token_id a = -1;
        BOOST_TEST((rk::checked_max(row, m, a, v) == bp::status::success));
        BOOST_TEST(m == want_max);
        BOOST_TEST(a == want_arg);
        BOOST_TEST((rk::row_max(row, m2, v) == bp::status::success));
        BOOST_TEST(m2 == want_max);
        std::vector<float> terms(n);
        const double z = rk::sum_exp(row, inv_t, ref, terms, v);
        BOOST_TEST(std::abs(z - want_z) <= 1e-6 * want_z);
        // exp_poly5's 2.5e-7, and the float rounding of x / T - ref (an ulp of each part, relative to e).
        double worst = 0.0;
        for (std::size_t i = 0; i < n; ++i) {
          const double xt = static_cast<double>(row[i]) * inv_t, e = std::exp(xt - ref);
          worst = std::max(worst, std::abs(terms[i] - e) - (2.5e-7 + 1.2e-7 * (std::abs(xt) + std::abs(ref))) * e);
        }
        BOOST_TEST(worst <= 0.0);
      }
    }
    for (const float bad : {qnan, inf}) {
      for (const std::size_t pos : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{31},
                                    std::size_t{63}, std::size_t{64}, n / 2, n - 1}) {
        if (pos >= n) continue;
        auto row = normal_row(n, ++seed);
        row[pos] = bad;
        for (const auto v : runnable_variants()) BOOST_TEST_CONTEXT("n=" << n << " " << bad << " at " << pos << " variant " << name_of(v)) {
          float m = 0.0f;
          bp::token_id a = -1;
          BOOST_TEST((rk::checked_max(row, m, a, v) == bp::status::non_finite_logits));
          BOOST_TEST((rk::row_max(row, m, v) == bp::status::non_finite_logits));
        }
      }
    }
    for (const auto v : runnable_variants()) {  // nothing finite
      float m = 0.0f;
      bp::token_id a = -1;
      BOOST_TEST((rk::checked_max(std::vector<float>(n, -inf), m, a, v) == bp::status::non_finite_logits));
      BOOST_TEST((rk::row_max(std::vector<float>(n, -inf), m, v) == bp::status::non_finite_logits));
    }
  }
}

BOOST_AUTO_TEST_CASE(compact_random_rows) {
  unsigned seed = 1;
  for (std::size_t v : {1, 2, 5, 63, 64, 65, 1000, 4099, 151936}) {
    for (int k : {1, 2, 16, 256, 4096}) {
      if (static_cast<std::size_t>(k) > v) continue;
      for (float t : {1.0f, 0.7f, 2.5f}) check_compact({k, t}, normal_row(v, ++seed));
    }
  }
}

BOOST_AUTO_TEST_CASE(compact_k_equals_vocab) {
  for (std::size_t v : {1, 2, 3, 17, 64, 100, 257}) check_compact({static_cast<int>(v), 1.3f}, normal_row(v, 7 + static_cast<unsigned>(v)));
}

BOOST_AUTO_TEST_CASE(compact_peaked_and_ordered_rows) {
  // Peaked like an LLM row: one logit far above a broad bulk.
  auto row = normal_row(151936, 99, 2.0f);
  row[77777] = 30.0f;
  row[5] = 28.5f;
  check_compact({256, 1.0f}, row);
  check_compact({64, 0.5f}, row);
  // Ascending: the running max grows in every chunk (a rescale per chunk) and every chunk is a candidate.
  auto up = normal_row(20000, 5);
  std::sort(up.begin(), up.end());
  check_compact({256, 1.0f}, up);
  check_compact({1, 1.0f}, up);
  std::reverse(up.begin(), up.end());
  check_compact({256, 1.0f}, up);
  // Values far above the first chunk's max move the streaming pass's reference (more than 64 nats).
  auto jumps = normal_row(50000, 6, 1.0f);
  jumps[3000] = 150.0f;
  jumps[3001] = 149.0f;
  jumps[40000] = 400.0f;
  check_compact({16, 1.0f}, jumps);
  std::sort(up.begin(), up.end());
  check_compact({64, 0.05f}, up);  // ascending at T = 0.05: a move in many blocks
  check_compact({16, 0.01f}, normal_row(5000, 8));  // most of the row below e^-88
  check_compact({16, 50.0f}, normal_row(5000, 9));  // nearly uniform
}

BOOST_AUTO_TEST_CASE(compact_ties) {
  check_compact({8, 1.0f}, std::vector<float>(1000, 2.5f));  // uniform: H = log V, margin 0
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> level(-3, 3);
  std::vector<float> few_levels(70001);
  for (float& x : few_levels) x = static_cast<float>(level(gen));
  for (int k : {1, 2, 100, 4096}) check_compact({k, 1.0f}, few_levels);
  std::vector<float> two_max(300, 0.0f);
  two_max[10] = two_max[290] = 5.0f;  // top-1 tie: margin 0
  check_compact({1, 1.0f}, two_max);
}

BOOST_AUTO_TEST_CASE(compact_masked_tokens) {
  auto row = normal_row(151936, 11);
  std::mt19937 gen(12);
  std::bernoulli_distribution masked(0.5);
  for (float& x : row) x = masked(gen) ? -inf : x;
  check_compact({256, 1.0f}, row);
  // A long masked prefix (the running max stays -inf for many chunks) and fewer unmasked tokens than k.
  std::vector<float> sparse(1000, -inf);
  for (int i : {700, 701, 950, 999}) sparse[static_cast<std::size_t>(i)] = static_cast<float>(i) / 100.0f;
  check_compact({16, 0.8f}, sparse);
  check_compact({1, 1.0f}, sparse);
  std::vector<float> single(130, -inf);
  single[129] = 1.0f;  // one finite value, in the padded tail: margin is the cap
  check_compact({4, 1.0f}, single);
}

BOOST_AUTO_TEST_CASE(compact_non_finite_rows) {
  const bp::compact_features f{16, 1.0f};
  for (float bad : {qnan, inf}) {
    for (std::size_t pos : {0, 1, 63, 64, 65, 500, 999}) {
      auto row = normal_row(1000, 4);
      row[pos] = bad;
      BOOST_TEST_CONTEXT("bad=" << bad << " at " << pos) { run_compact(f, row, bp::status::non_finite_logits); }
    }
  }
  std::vector<float> masked_then_nan(1000, -inf);
  masked_then_nan[100] = qnan;
  masked_then_nan[900] = 1.0f;
  run_compact(f, masked_then_nan, bp::status::non_finite_logits);
  run_compact(f, std::vector<float>(1000, -inf), bp::status::non_finite_logits);
  run_compact({1, 1.0f}, {-inf}, bp::status::non_finite_logits);
}

BOOST_AUTO_TEST_CASE(compact_tiny_temperatures) {
  // Below T = 1e-9 a logit of 10 scales past 2^30, where the pass's float reference is spaced wider than its
  // rebase margin: the pass looped for ever on some of these rows (10.125 at 1e-9). Such rows are
  // non_finite_logits, as on the CUDA pass (detail::scaled_max_in_range), whatever their chunk and rounding.
  for (const float t : {1e-9f, 1e-20f, 1e-37f}) {
    for (float top = 10.0f; top < 11.0f; top += 0.125f) {
      for (const std::size_t at : {std::size_t{3}, std::size_t{100}}) {
        std::vector<float> row(1000, -5.0f);
        row[at] = top;
        BOOST_TEST_CONTEXT("T " << t << ", max " << top << " at " << at) {
          run_compact({8, t}, row, bp::status::non_finite_logits);
          BOOST_TEST(!bp::detail::scaled_max_in_range(top, 1.0f / t));
        }
      }
    }
  }
  // Just inside the range the features are the reference's (one-hot), the maximum in the first chunk or past it.
  for (const std::size_t at : {std::size_t{3}, std::size_t{100}}) {
    std::vector<float> row(1000, -5.0f);
    row[at] = 20.0f;
    BOOST_TEST(bp::detail::scaled_max_in_range(20.0f, 1e7f));
    check_compact({8, 1e-7f}, row);
  }
}

BOOST_AUTO_TEST_CASE(compact_argument_status) {
  const auto row = normal_row(100, 8);
  const bp::compact_features f{10, 1.0f};
  std::vector<float> out(static_cast<std::size_t>(f.feature_count(100)));
  std::vector<float> ws(f.workspace_size(100));
  BOOST_TEST((f.extract(row, std::span(ws).first(ws.size() - 1), out) == bp::status::workspace_too_small));
  BOOST_TEST((f.extract(row, ws, std::span(out).first(out.size() - 1)) == bp::status::invalid_argument));
  BOOST_TEST((f.extract({}, ws, out) == bp::status::invalid_argument));
  BOOST_TEST((bp::compact_features{101, 1.0f}.can_implement(100) == bp::status::invalid_argument));
  BOOST_TEST((bp::compact_features{0, 1.0f}.can_implement(100) == bp::status::invalid_argument));
  BOOST_TEST((bp::compact_features{4097, 1.0f}.can_implement(10000) == bp::status::invalid_argument));
  BOOST_TEST((bp::compact_features{4096, 1.0f}.can_implement(10000) == bp::status::success));
  for (float t : {0.0f, -1.0f, qnan, inf, 1e-40f}) {
    BOOST_TEST((bp::compact_features{10, t}.can_implement(100) == bp::status::invalid_temperature));
  }
}

BOOST_AUTO_TEST_CASE(full_row_transforms) {
  auto row = normal_row(151936, 21);
  for (std::size_t i = 0; i < row.size(); i += 7) row[i] = -inf;
  std::vector<float> out(row.size());
  for (float t : {1.0f, 0.6f}) {
    const reference ref(row, t);
    const bp::full_row_features raw{bp::input_transform::raw_logits, t};
    BOOST_TEST((raw.extract(row, {}, out) == bp::status::success));
    BOOST_TEST(std::equal(row.begin(), row.end(), out.begin()));
    const bp::full_row_features prob{bp::input_transform::probabilities, t};
    BOOST_TEST((prob.extract(row, {}, out) == bp::status::success));
    double sum = 0.0;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const double want = std::exp(row[i] / static_cast<double>(t) - ref.max_y()) / ref.z;
      BOOST_TEST(std::abs(out[i] - want) <= 4e-6 * want + 1e-12);  // float x / T: ~ulp(|x / T|) in the exponent
      sum += out[i];
    }
    BOOST_TEST(std::abs(sum - 1.0) < 1e-5);
    const bp::full_row_features logp{bp::input_transform::log_probabilities, t};
    BOOST_TEST((logp.extract(row, {}, out) == bp::status::success));
    const double lse = ref.max_y() + std::log(ref.z);
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (row[i] == -inf) {
        BOOST_TEST(out[i] == -inf);
      } else {
        BOOST_TEST(std::abs(out[i] - (row[i] / static_cast<double>(t) - lse)) <= 2e-5);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(full_row_status) {
  std::vector<float> out(50);
  for (auto tr : {bp::input_transform::raw_logits, bp::input_transform::probabilities, bp::input_transform::log_probabilities}) {
    const bp::full_row_features f{tr, 1.0f};
    for (float bad : {qnan, inf}) {
      auto row = normal_row(50, 2);
      row[49] = bad;
      BOOST_TEST((f.extract(row, {}, out) == bp::status::non_finite_logits));
    }
    BOOST_TEST((f.extract(std::vector<float>(50, -inf), {}, out) == bp::status::non_finite_logits));
    BOOST_TEST((f.extract(normal_row(51, 2), {}, out) == bp::status::invalid_argument));
    BOOST_TEST((f.extract({}, {}, std::span<float>{}) == bp::status::invalid_argument));
    const auto with_zero_t = bp::full_row_features{tr, 0.0f}.extract(normal_row(50, 2), {}, out);
    BOOST_TEST((with_zero_t == (tr == bp::input_transform::raw_logits ? bp::status::success : bp::status::invalid_temperature)));
  }
}

BOOST_AUTO_TEST_CASE(metadata_round_trip) {
  for (const bp::compact_features f : {bp::compact_features{}, bp::compact_features{1, 0.7f}, bp::compact_features{4096, 1e-3f}}) {
    const auto g = bp::make_feature_extractor<bp::compact_features>(f.metadata(), "w.safetensors");
    BOOST_TEST(g.top_k == f.top_k);
    BOOST_TEST(g.temperature == f.temperature);
    BOOST_TEST(f.metadata().at("name") == "compact");
  }
  for (auto tr : {bp::input_transform::raw_logits, bp::input_transform::probabilities, bp::input_transform::log_probabilities}) {
    const bp::full_row_features f{tr, 0.1f};
    const auto g = bp::make_feature_extractor<bp::full_row_features>(f.metadata(), "w.safetensors");
    BOOST_TEST((g.transform == f.transform));
    BOOST_TEST(g.temperature == f.temperature);
    BOOST_TEST((bp::parse_input_transform(bp::to_string(tr)) == tr));
  }
  BOOST_TEST(!bp::parse_input_transform("softmax").has_value());
  BOOST_TEST(bp::compact_features::statistics_list() ==
             "entropy,varentropy,log_sum_exp,max_logit,top1_margin,top_k_mass,effective_tokens,near_max_tokens,log_vocab");
}

BOOST_AUTO_TEST_CASE(metadata_errors_name_source_and_field) {
  const auto compact_with = [](const std::string& field, const std::string& value) {
    auto m = bp::compact_features{}.metadata();
    if (value.empty()) {
      m.erase(field);
    } else {
      m[field] = value;
    }
    return [m] { (void)bp::compact_features::from_metadata(m, "policy.safetensors"); };
  };
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"name", "full_row"}, {"name", ""}, {"top_k", ""}, {"top_k", "0"}, {"top_k", "4097"}, {"top_k", "12x"},
           {"top_k", "-5"}, {"temperature", ""}, {"temperature", "0"}, {"temperature", "-1"}, {"temperature", "nan"},
           {"temperature", "inf"}, {"temperature", "warm"}, {"statistics", "entropy"}, {"statistics", ""},
           {"top-k", "5"}}) {
    BOOST_TEST_CONTEXT(field << "=" << value) { BOOST_TEST(throws_naming(compact_with(field, value), "policy.safetensors", field)); }
  }
  const auto full_with = [](bp::input_transform tr, const std::string& field, const std::string& value) {
    auto m = bp::full_row_features{tr, 1.0f}.metadata();
    m[field] = value;
    return [m] { (void)bp::make_feature_extractor<bp::full_row_features>(m, "a.gguf"); };
  };
  BOOST_TEST(throws_naming(full_with(bp::input_transform::raw_logits, "transform", "softmax"), "a.gguf", "transform"));
  BOOST_TEST(throws_naming(full_with(bp::input_transform::probabilities, "temperature", "0"), "a.gguf", "temperature"));
  BOOST_TEST(throws_naming(full_with(bp::input_transform::raw_logits, "temperature", "x"), "a.gguf", "temperature"));
  BOOST_TEST(throws_naming(full_with(bp::input_transform::raw_logits, "extra", "1"), "a.gguf", "extra"));
  BOOST_TEST(throws_naming(full_with(bp::input_transform::raw_logits, "name", "compact"), "a.gguf", "name"));
  // raw_logits ignores the temperature, so a zero one loads.
  BOOST_TEST(bp::make_feature_extractor<bp::full_row_features>(bp::full_row_features{bp::input_transform::raw_logits, 0.0f}.metadata(), "a").temperature == 0.0f);
}
