// Writing a file so that readers see the old content or the new, never a half-written one: the bytes
// go to a temporary file beside it, which is then renamed over the target; folders are made with the
// same error reporting.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "blockpilot/status.hpp"

namespace blockpilot::io {

/// Creates `dir` and its parents when missing; throws `error` naming it when it cannot.
inline void create_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw error("folder '" + dir.string() + "': cannot create it (" + ec.message() + ")");
}

/// Replaces `path` with `bytes` atomically (temporary file in the same folder, written, flushed to the
/// disk and closed with every error checked, then renamed over the target); throws `error` naming the
/// file when it cannot be written, and then leaves the old file as it was.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  auto temporary = path;
  static std::atomic<unsigned> writes{0};  // threads of one process writing the same file get their own temporaries
  temporary += ".partial." + std::to_string(::getpid()) + "." + std::to_string(writes++);
  const auto fail = [&](const std::string& what) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    return error("file '" + path.string() + "': " + what);
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);  // less the umask
  if (fd < 0) throw fail("cannot write (" + std::string(std::strerror(errno)) + ")");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) done += static_cast<std::size_t>(n);
    else if (n == 0 || errno != EINTR) break;
  }
  const int write_errno = done == bytes.size() ? 0 : errno;
  int sync_errno = write_errno == 0 && ::fsync(fd) != 0 ? errno : 0;
  if (sync_errno == EINVAL || sync_errno == ENOTSUP) sync_errno = 0;  // a file system that cannot sync
  const int close_errno = ::close(fd) != 0 ? errno : 0;
  if (const int e = write_errno ? write_errno : sync_errno ? sync_errno : close_errno; e || done != bytes.size())
    throw fail("cannot write (" + std::string(e ? std::strerror(e) : "nothing written") + ")");
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw fail("cannot replace it (" + ec.message() + ")");
  // The rename reaches the disk with the folder's entry.
  const auto folder = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  if (const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

}  // namespace blockpilot::io
