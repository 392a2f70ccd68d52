// `blockpilot replay`: evaluates fixed, oracle and selected block sizes on a folder of measured
// acceptance files and prints a table (or JSON).

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "blockpilot_workbench/eval/replay.hpp"
#include "blockpilot_workbench/io/acceptance_json.hpp"
#include "blockpilot/status.hpp"
#include "options.hpp"
#include "replay_report.hpp"

namespace blockpilot::cli {


/// Registers `replay --acceptance-dir DIR [--window LO:HI] [--selection FILE] [--json]` on `app`.
/// On a malformed folder, selection or window it prints the message to stderr and throws
/// `CLI::RuntimeError(2)`, which `app.exit` turns into exit code 2 without printing more.
void add_replay_command(CLI::App& app) {
  struct options {
    std::string dir, window = "14:18", selection;
    bool json = false;
  };
  auto opts = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand("replay", "Evaluate block-size policies on measured acceptance files (<B>.json)");
  cmd->add_option("--acceptance-dir", opts->dir, "Folder of <B>.json files mapping prompt index to tau")->required();
  cmd->add_option("--window", opts->window, "Oracle candidate window LO:HI, inclusive")->capture_default_str();
  cmd->add_option("--selection", opts->selection, "JSON file mapping prompt index to a chosen block size");
  cmd->add_flag("--json", opts->json, "Print the report as JSON");
  cmd->callback([opts] {
    try {
      const auto [lo, hi] = parse_window(opts->window);
      const auto table = read_acceptance_folder(opts->dir);
      std::optional<block_size_selection> selection;
      if (!opts->selection.empty()) selection = read_selection(opts->selection, table);
      const auto report = replay(table, lo, hi, selection ? &*selection : nullptr);
      if (opts->json) fmt::print("{}\n", to_json(report).dump(2));
      else replay_detail::print_report(report, opts->dir, opts->selection);
    } catch (const std::exception& e) {  // blockpilot::error, or a filesystem error while listing the folder
      fail("replay", e);
    }
  });
}

}  // namespace blockpilot::cli
