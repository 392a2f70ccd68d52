// The CPU passes in a program that links nvcc and host translation units: nvcc's host pass compiles only
// their generic variant, yet every call, from either side, runs the widest variant the CPU has (the
// host files register the wide ones at start-up), with the same results bit for bit. Needs no device.
#include <cstdio>
#include <cstring>
#include <vector>

#include "blockpilot/cpu/isa.hpp"
#include "blockpilot/cpu/row_ops.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/random/philox.hpp"
#include "host_dispatch.hpp"

namespace bp = blockpilot;

int main() {
  int failures = 0;
  const auto check = [&](bool ok, const char* what) {
    if (!ok) std::printf("FAILED: %s\n", what);
    failures += !ok;
  };
  namespace rk = bp::cpu_detail::row_kernels;
  const bp::cpu_features& cpu = bp::detected_cpu_features();
#if defined(__x86_64__)
  const rk::vector_variant widest = cpu.avx512 ? rk::vector_variant::avx512 : cpu.avx2 ? rk::vector_variant::avx2 : rk::vector_variant::generic;
#else
  const rk::vector_variant widest = rk::vector_variant::generic;
#endif
  check(rk::best_vector_variant() == widest, "the nvcc file runs the widest variant the CPU has");
  check(bp::testing::host_best_variant() == static_cast<int>(widest), "the host file runs the widest variant the CPU has");

  const std::int64_t vocab = 49152;
  std::vector<float> row(static_cast<std::size_t>(vocab));
  const bp::philox_stream stream{7, 1};
  for (std::int64_t i = 0; i < vocab; ++i)
    row[static_cast<std::size_t>(i)] = static_cast<float>(stream.uniform(static_cast<std::uint32_t>(i), bp::random_domain::user) * 30.0 - 20.0);
  const bp::compact_features f{64, 1.0f};
  std::vector<float> here(static_cast<std::size_t>(f.feature_count(vocab))), there(here.size());
  std::vector<float> workspace(f.workspace_size(vocab));
  check(f.extract(row, workspace, here) == bp::status::success, "the nvcc file's compact features");
  check(bp::testing::host_compact(row, 64, there) == bp::status::success, "the host file's compact features");
  check(std::memcmp(here.data(), there.data(), here.size() * sizeof(float)) == 0, "the same compact features, bit for bit");

  float max_here = 0, max_there = 0;
  bp::token_id at_here = -1, at_there = -1;
  check(bp::cpu_detail::checked_max(row, max_here, at_here) == bp::status::success &&
            bp::testing::host_checked_max(row, max_there, at_there) == bp::status::success && max_here == max_there &&
            at_here == at_there,
        "the same maximum");
  std::printf("variant %d (0 generic, 1 avx2, 2 avx512): %s\n", static_cast<int>(widest), failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}
