// The acceptance rules by the names the library gives them, and the batches they take.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nanobind/nanobind.h>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "errors.hpp"
#include "ragged_layout.hpp"

namespace blockpilot::python {

/// f(Rule{}) for the built-in rule named `name` ("greedy", "sample-match", "rejection"); ValueError for
/// another name.
template <class F>
auto with_rule(std::string_view name, F&& f) {
  std::optional<decltype(f(greedy_match{}))> result;
  if (!with_builtin_rule(name, [&](auto rule) { result.emplace(f(rule)); }))
    throw nanobind::value_error(
        ("unknown acceptance rule '" + std::string(name) + "': use " + std::string(builtin_rule_names)).c_str());
  return std::move(*result);
}

/// Error with Status.invalid_argument, on the CPU and the device alike, for a batch beyond the rules' limits.
inline void check_rule_limits(std::int64_t batch, std::int64_t vocab) {
  if (const std::string why = beyond_rule_limits(batch, vocab); !why.empty())
    throw status_error(status::invalid_argument, "accept: " + why);
}

}  // namespace blockpilot::python
