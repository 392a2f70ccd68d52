// The replay report: the per-size table and the policy summary (replay and compare print it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "blockpilot_workbench/eval/replay.hpp"

namespace blockpilot::cli {

namespace replay_detail {

/// The DFlash default block size that the summary compares every policy with.
inline constexpr int reference_size = 16;

/// "+3.48 %" relative to `base`, or "" when there is no base.
inline std::string percent_vs(double tau, std::optional<double> base) {
  return base ? fmt::format("{:+.2f} %", 100.0 * (tau / *base - 1.0)) : std::string();
}

/// Prints one table line without the trailing blanks of an empty last column.
inline void print_line(std::string line) {
  line.erase(line.find_last_not_of(' ') + 1);
  fmt::print("{}\n", line);
}

/// Prints the per-size table and the policy summary.
inline void print_report(const replay_report& r, const std::string& dir, const std::string& selection_file) {
  const auto base = r.fixed_tau(reference_size);
  fmt::print("acceptance: {} ({} prompts, {} block sizes)\n\n", dir, r.prompts, r.fixed.size());
  print_line(fmt::format("{:>6}  {:>9}  {:>12}", "size", "mean tau", base ? fmt::format("vs tau({})", reference_size) : ""));
  for (const auto& [b, tau] : r.fixed)
    print_line(fmt::format("{:>6}  {:>9.4f}  {:>12}", b, tau, base ? fmt::format("{:.4f}", tau / *base) : ""));

  std::vector<std::pair<std::string, double>> rows;
  if (base) rows.emplace_back(fmt::format("fixed {}", reference_size), *base);
  rows.emplace_back(fmt::format("best fixed ({})", r.best_fixed_size), r.best_fixed_tau);
  rows.emplace_back(fmt::format("per-prompt oracle over {}..{}", r.window_lo, r.window_hi), r.oracle_window);
  rows.emplace_back("per-prompt oracle over all sizes", r.oracle_all);
  if (r.selection)
    rows.emplace_back(fmt::format("selection ({})", std::filesystem::path(selection_file).filename().string()), *r.selection);
  std::size_t width = 6;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  fmt::print("\n");
  print_line(fmt::format("{:<{}}  {:>9}  {:>12}", "policy", width, "mean tau", base ? fmt::format("vs fixed {}", reference_size) : ""));
  for (const auto& [policy, tau] : rows) print_line(fmt::format("{:<{}}  {:>9.4f}  {:>12}", policy, width, tau, percent_vs(tau, base)));
}

}  // namespace replay_detail

}  // namespace blockpilot::cli
