// Where the blockpilot program finds the repository's examples/data/ folder (measured acceptance traces and
// prompt files, examples/data/README.md): never relative to the working directory.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "blockpilot/status.hpp"

namespace blockpilot::cli {

/// $BLOCKPILOT_DATA_DIR, else the source tree's examples/data/ this program was built from, else the installed
/// copy; throws `error` saying what to set when none exists.
inline std::filesystem::path data_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("BLOCKPILOT_DATA_DIR"); env && *env) {
    if (!fs::is_directory(env)) throw error(std::string("BLOCKPILOT_DATA_DIR=") + env + " is not a folder");
    return env;
  }
  for (const fs::path& candidate : {fs::path(BLOCKPILOT_SOURCE_DATA_DIR), fs::path(BLOCKPILOT_INSTALLED_DATA_DIR)})
    if (fs::is_directory(candidate)) return candidate;
  throw error("the data folder is neither at " BLOCKPILOT_SOURCE_DATA_DIR " nor at " BLOCKPILOT_INSTALLED_DATA_DIR
              "; set BLOCKPILOT_DATA_DIR to the repository's examples/data/ folder");
}

}  // namespace blockpilot::cli
