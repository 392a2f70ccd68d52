// The acceptance rules by the names the library gives them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nanobind/nanobind.h>

#include "blockpilot/acceptance/acceptance_rule.hpp"

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

}  // namespace blockpilot::python
