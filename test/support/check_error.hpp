// Asserting that a configuration-time call throws blockpilot::error with a message that names
// what went wrong (the file, the field).
#pragma once

#include <initializer_list>
#include <string>

#include <boost/test/unit_test.hpp>

#include "blockpilot/status.hpp"

namespace blockpilot::testing {

/// Runs `f`, requires a `blockpilot::error`, and checks that its message holds every fragment.
template <class F>
void check_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    BOOST_ERROR("expected blockpilot::error");
  } catch (const blockpilot::error& e) {
    const std::string msg = e.what();
    BOOST_TEST_MESSAGE(msg);
    for (const auto& frag : fragments) BOOST_TEST(msg.find(frag) != std::string::npos, "\"" << frag << "\" in: " << msg);
  }
}

}  // namespace blockpilot::testing
