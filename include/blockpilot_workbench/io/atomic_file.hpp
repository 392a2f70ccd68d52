// Writing a file so that readers see the old content or the new, never a half-written one: the bytes
// go to a temporary file beside it, which is then renamed over the target.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

#include "blockpilot/status.hpp"

namespace blockpilot::io {

/// Replaces `path` with `bytes` atomically (temporary file in the same folder, then rename); throws
/// `error` naming the file when it cannot be written.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  auto temporary = path;
  temporary += ".partial." + std::to_string(::getpid());
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
