// The host side of test_host_dispatch: the same CPU passes, compiled by the C++ compiler, which
// compiles the wide variants and registers them at start-up.
#include "host_dispatch.hpp"

#include "blockpilot/cpu/row_ops.hpp"
#include "blockpilot/features/compact.hpp"

#include <vector>

namespace blockpilot::testing {

int host_best_variant() { return static_cast<int>(cpu_detail::row_kernels::best_vector_variant()); }

status host_compact(std::span<const float> row, int top_k, std::span<float> out) {
  const compact_features f{top_k, 1.0f};
  std::vector<float> workspace(f.workspace_size(static_cast<std::int64_t>(row.size())));
  return f.extract(row, workspace, out);
}

status host_checked_max(std::span<const float> row, float& max, token_id& argmax) {
  return cpu_detail::checked_max(row, max, argmax);
}

}  // namespace blockpilot::testing
