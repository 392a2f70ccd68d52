// A scratch folder of the fuzzing process (removed at exit), for the readers that take file paths:
// each input is written to a file there and read back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace blockpilot::fuzzing {

inline const std::filesystem::path& scratch_folder() {
  struct folder {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("blockpilot_fuzz_" + std::to_string(::getpid()));
    folder() { std::filesystem::create_directories(path); }
    ~folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const folder f;
  return f.path;
}

/// Writes the input to `name` in the scratch folder and returns its path.
inline std::filesystem::path write_input(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const auto path = scratch_folder() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace blockpilot::fuzzing
