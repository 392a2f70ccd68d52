// The smallest engine-side use of the installed library, built by test/package.sh through each way an
// engine finds it (pkg-config, CMake, Meson subproject): the headers, C++20, and Eigen and
// nlohmann-json through the package's own requirements.
#include <blockpilot/concepts.hpp>
#include <blockpilot/features/compact.hpp>
#include <blockpilot/policy/blockpilot.hpp>
#include <blockpilot/policy/fixed.hpp>
#include <blockpilot/status.hpp>

#include <cstdio>
#include <string>

static_assert(blockpilot::block_size_policy<blockpilot::fixed_block_size<16>>);
static_assert(blockpilot::block_size_policy<blockpilot::blockpilot_policy<blockpilot::compact_features>>);

int main() {
  std::printf("%s\n", std::string(blockpilot::to_string(blockpilot::status::success)).c_str());
  return 0;
}
