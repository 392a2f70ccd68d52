// The acceptance rules by the names the library gives them.
#pragma once

#include <string>
#include <string_view>

#include <nanobind/nanobind.h>

#include "blockpilot/acceptance/acceptance_rule.hpp"

namespace blockpilot::python {

/// Calls f(Rule{}) for the rule named `name` ("greedy", "sample-match", "rejection").
template <class F>
decltype(auto) with_rule(std::string_view name, F&& f) {
  if (name == greedy_match::name) return f(greedy_match{});
  if (name == sample_and_match::name) return f(sample_and_match{});
  if (name == rejection_sampling::name) return f(rejection_sampling{});
  throw nanobind::value_error(("unknown acceptance rule '" + std::string(name) + "': use '" + std::string(greedy_match::name) +
                               "', '" + std::string(sample_and_match::name) + "' or '" +
                               std::string(rejection_sampling::name) + "'")
                                  .c_str());
}

}  // namespace blockpilot::python
