// The random stream and the fixed-point softmax: Philox known-answer vectors, the portable exp,
// and inverse-CDF sampling against the exact distribution.
#define BOOST_TEST_MODULE philox
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "blockpilot/blockpilot.hpp"

using namespace blockpilot;

BOOST_AUTO_TEST_CASE(philox_known_answers) {
  // The Random123 known-answer vectors for Philox-4x32-10.
  const auto check = [](philox_block ctr, std::uint32_t k0, std::uint32_t k1, philox_block expected) {
    const philox_block out = philox4x32_10(ctr, k0, k1);
    for (int i = 0; i < 4; ++i) BOOST_TEST(out.v[i] == expected.v[i]);
  };
  check({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  check({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
        {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  check({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
        {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
  static_assert(philox4x32_10({{0, 0, 0, 0}}, 0, 0).v[0] == 0x6627e8d5, "usable at compile time");
}

BOOST_AUTO_TEST_CASE(streams_differ_by_offset_index_and_domain) {
  const philox_stream a{1, 5};
  BOOST_TEST(a.bits64(0, random_domain::target_sample) != a.bits64(1, random_domain::target_sample));
  BOOST_TEST(a.bits64(0, random_domain::target_sample) != a.bits64(0, random_domain::accept_test));
  BOOST_TEST((a.bits64(0, random_domain::target_sample) != philox_stream{1, 6}.bits64(0, random_domain::target_sample)));
  BOOST_TEST((a.bits64(0, random_domain::target_sample) != philox_stream{2, 5}.bits64(0, random_domain::target_sample)));
  double sum = 0;
  for (std::uint32_t i = 0; i < 100000; ++i) {
    const double u = a.uniform(i, random_domain::user);
    BOOST_REQUIRE(u >= 0.0);
    BOOST_REQUIRE(u < 1.0);
    sum += u;
  }
  BOOST_TEST(std::abs(sum / 100000 - 0.5) < 0.005);
}

BOOST_AUTO_TEST_CASE(portable_exp_is_accurate) {
  double worst = 0;
  for (float x = -86.0f; x <= 0.0f; x += 0.000731f) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(detail::exp_nonpositive(x) - exact) / exact);
  }
  BOOST_TEST_MESSAGE("largest relative error of exp_nonpositive on [-86, 0]: " << worst);
  BOOST_TEST(worst < 3e-7);  // about 2.5 ulp of a float
  BOOST_TEST(detail::exp_nonpositive(0.0f) == 1.0f);
  BOOST_TEST(detail::exp_nonpositive(-100.0f) == 0.0f);
  BOOST_TEST(detail::exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
}

BOOST_AUTO_TEST_CASE(inverse_cdf_sampling_matches_softmax) {
  const std::vector<float> logits = {1.0f, 2.5f, -1.0f, 0.0f, 2.0f, -std::numeric_limits<float>::infinity()};
  std::vector<std::uint64_t> w(logits.size());
  for (const float t : {1.0f, 0.5f, 2.0f}) {
    double z = 0;
    std::vector<double> p;
    for (const float x : logits) z += std::exp(x / t);
    for (const float x : logits) p.push_back(std::exp(x / t) / z);
    std::vector<std::int64_t> counts(logits.size());
    const int n = 50000;
    for (int i = 0; i < n; ++i) {
      token_id tok = -1;
      BOOST_REQUIRE((cpu_detail::sample_row(logits, t, philox_stream{3, static_cast<std::uint64_t>(i)}.bits64(0, random_domain::target_sample), w, tok) == status::success));
      ++counts[static_cast<std::size_t>(tok)];
    }
    BOOST_TEST(counts[5] == 0);  // masked
    double chi2 = 0;
    for (std::size_t i = 0; i < 5; ++i) chi2 += (counts[i] - n * p[i]) * (counts[i] - n * p[i]) / (n * p[i]);
    BOOST_TEST_MESSAGE("T=" << t << " chi2 " << chi2 << " (critical 18.47 at 0.001, 4 dof)");
    BOOST_TEST(chi2 < 18.47);
  }
  token_id greedy = -1;
  BOOST_TEST((cpu_detail::sample_row(logits, 0.0f, 0, w, greedy) == status::success));
  BOOST_TEST(greedy == 1);
}
