// Writing a file so that readers see the old content or the new, never a half-written one: the bytes
// go to a temporary file beside it, which is then renamed over the target; folders are made with the
// same error reporting.
#pragma once

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

#include "blockpilot/status.hpp"

namespace blockpilot::io {

/// Creates `dir` and its parents when missing; throws `error` naming it when it cannot.
inline void create_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw error("folder '" + dir.string() + "': cannot create it (" + ec.message() + ")");
}

/// Replaces `path` with `bytes` atomically (temporary file in the same folder, then rename); throws
/// `error` naming the file when it cannot be written.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  auto temporary = path;
  static std::atomic<unsigned> writes{0};  // threads of one process writing the same file get their own temporaries
  temporary += ".partial." + std::to_string(::getpid()) + "." + std::to_string(writes++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !out.flush()) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw error("file '" + path.string() + "': cannot write");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw error("file '" + path.string() + "': cannot replace it (" + ec.message() + ")");
  }
}

}  // namespace blockpilot::io
