// Where the tests find the repository's files: the source root that the build passes as
// BLOCKPILOT_SOURCE_ROOT, so that a test reads the same files from any working directory.
#pragma once

#include <filesystem>

#ifndef BLOCKPILOT_SOURCE_ROOT
#error "the build defines BLOCKPILOT_SOURCE_ROOT (the repository root) for the tests"
#endif

namespace blockpilot::testing {

inline std::filesystem::path source_root() { return BLOCKPILOT_SOURCE_ROOT; }
/// examples/data/: the measured acceptance traces and the prompt files (examples/data/README.md).
inline std::filesystem::path project_data_dir() { return source_root() / "examples" / "data"; }
/// test/data/: reference outputs and small fixtures of the tests.
inline std::filesystem::path test_data_dir() { return source_root() / "test" / "data"; }

}  // namespace blockpilot::testing
