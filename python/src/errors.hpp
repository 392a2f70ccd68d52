// How the binding reports failures: blockpilot.Error, with the library's status text and the status
// itself as `.status` (None for file and configuration errors, which carry their own message).
#pragma once

#include <string>
#include <utility>

#include <nanobind/nanobind.h>

#include "blockpilot/status.hpp"

namespace blockpilot::python {

/// A status that ends a call, with what the call was doing.
struct status_error : error {
  status code;
  status_error(status s, const std::string& context) : error(context + ": " + std::string(to_string(s))), code(s) {}
};

/// A call that failed because a Python callback raised `raised`: blockpilot.Error with it as __cause__,
/// or `raised` itself where it is no failure of the call (KeyboardInterrupt, SystemExit).
struct callback_failure : error {
  nanobind::object raised;
  callback_failure(const std::string& message, nanobind::object exception) : error(message), raised(std::move(exception)) {}
};

/// Throws status_error unless `s` is success.
inline void check(status s, const std::string& context) {
  if (s != status::success) throw status_error(s, context);
}

}  // namespace blockpilot::python
