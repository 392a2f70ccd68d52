// A progress bar with an ETA for long jobs (sweeps, training) on stderr; on a terminal it redraws
// one line, elsewhere (CI logs) it prints a line every tenth of the work.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/core.h>
#include <unistd.h>

namespace blockpilot::cli {

class progress_bar {
 public:
  explicit progress_bar(std::string label, bool enabled = true)
      : label_(std::move(label)), enabled_(enabled), tty_(isatty(fileno(stderr)) != 0),
        start_(std::chrono::steady_clock::now()) {}

  void update(std::size_t done, std::size_t total) {
    if (!enabled_ || total == 0) return;
    const int tenth = static_cast<int>(10 * done / total);
    if (!tty_ && tenth == last_tenth_ && done != total) return;
    last_tenth_ = tenth;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done == 0 ? 0.0 : elapsed * static_cast<double>(total - done) / static_cast<double>(done);
    const int filled = static_cast<int>(30 * done / total);
    fmt::print(stderr, "{}{} [{:#<{}}{:.<{}}] {:3d}% {}/{} elapsed {:.0f}s ETA {:.0f}s{}", tty_ ? "\r" : "", label_, "",
               filled, "", 30 - filled, static_cast<int>(100 * done / total), done, total, elapsed, eta,
               tty_ && done != total ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool enabled_, tty_;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace blockpilot::cli
