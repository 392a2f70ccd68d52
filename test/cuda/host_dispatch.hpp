// Functions of host_dispatch.cpp, a host translation unit, for test_host_dispatch.cu.
#pragma once

#include <span>

#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::testing {

int host_best_variant();
status host_compact(std::span<const float> row, int top_k, std::span<float> out);
status host_checked_max(std::span<const float> row, float& max, token_id& argmax);

}  // namespace blockpilot::testing
