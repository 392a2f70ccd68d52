// Option parsing shared by the blockpilot subcommands: windows, shards, feature extractors,
// and running a predictor file's policy whatever extractor it was trained with.
#pragma once

#include <charconv>
#include <exception>
#include <new>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <unistd.h>

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/full_row.hpp"
#include "blockpilot/features/prompt.hpp"
#include "blockpilot/features/prompt_compact.hpp"
#include "blockpilot_workbench/io/atomic_file.hpp"
#include "blockpilot_workbench/io/safetensors.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot_workbench/nn/load_policy.hpp"

namespace blockpilot::cli {

/// The largest block size the program's options take (its drafters propose at most 63 rows).
inline constexpr int max_block_size = 64;

/// Reports a subcommand's failure on stderr ("blockpilot COMMAND: message") and throws
/// CLI::RuntimeError(2), which main turns into exit code 2.
[[noreturn]] inline void fail(std::string_view command, const std::exception& e) {
  const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
  fmt::print(stderr, "blockpilot {}: {}\n", command,
             oom ? std::string("out of memory (a smaller request, fewer tokens or prompts, may fit)") : std::string(e.what()));
  throw CLI::RuntimeError(2);
}

/// Check of an output file option (--json-out, --trace-out, train's --out): its folder exists and may be written, so that a
/// command refuses a bad path before its work rather than losing the work after it.
inline const CLI::Validator output_file(
    [](std::string& path) -> std::string {
      const std::filesystem::path p(path), folder = p.parent_path().empty() ? "." : p.parent_path();
      if (std::filesystem::is_directory(p)) return "'" + path + "' is a folder";
      if (!std::filesystem::is_directory(folder)) return "folder '" + folder.string() + "' does not exist";
      if (::access(folder.c_str(), W_OK) != 0) return "folder '" + folder.string() + "' is not writable";
      return {};
    },
    "FILE");

/// Writes a command's JSON to an output file (atomically: readers never see half a file).
inline void write_json_file(const std::string& path, const auto& json, int indent) {
  io::write_file_atomically(path, json.dump(indent) + "\n");
}

inline std::optional<int> parse_int(std::string_view part) {
  int v = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (ec != std::errc{} || end != part.data() + part.size() || part.empty()) return std::nullopt;
  return v;
}

/// "A:B" with integers; throws `error` naming the option.
inline std::pair<int, int> parse_pair(std::string_view text, std::string_view option, char separator) {
  const auto at = text.find(separator);
  if (at != std::string_view::npos)
    if (const auto a = parse_int(text.substr(0, at)), b = parse_int(text.substr(at + 1)); a && b) return {*a, *b};
  throw error(std::string(option) + ": expected two integers separated by '" + separator + "', got \"" + std::string(text) + "\"");
}

/// `--window LO:HI`.
inline std::pair<int, int> parse_window(std::string_view text) {
  const auto w = parse_pair(text, "--window", ':');
  if (w.first < 1 || w.first > w.second || w.second > max_block_size)
    throw error("--window: needs 1 <= LO <= HI <= " + std::to_string(max_block_size) + ", got \"" + std::string(text) + "\"");
  return w;
}

/// `--shard I/N` with 0 <= I < N.
inline std::pair<int, int> parse_shard(std::string_view text) {
  const auto s = parse_pair(text, "--shard", '/');
  if (s.second < 1 || s.first < 0 || s.first >= s.second) throw error("--shard: needs I/N with 0 <= I < N, got \"" + std::string(text) + "\"");
  return s;
}

/// The acceptance rule of --rule, or the default everywhere: greedy match at T = 0, else the
/// DFlash reference's sample-and-match.
inline std::string rule_or_default(const std::string& rule, float temperature) {
  return !rule.empty() ? rule : temperature < 1e-5f ? "greedy" : "sample-match";
}

/// Calls `fn(Rule{})` with the acceptance rule named `name` (greedy, sample-match, rejection).
template <class Fn>
void with_rule(std::string_view name, Fn&& fn) {
  if (!with_builtin_rule(name, fn))
    throw error("--rule: expected " + std::string(builtin_rule_names) + ", got \"" + std::string(name) + "\"");
}

/// Calls `fn(policy)` with the blockpilot_policy of a predictor file, whichever extractor it names;
/// the file must be for a target of `vocab` tokens.
template <class Fn>
void with_predictor_policy(const std::filesystem::path& file, std::int64_t vocab, Fn&& fn) {
  const auto name = io::safetensors_file::read(file).metadata();
  const auto it = name.find("feature_extractor");
  const std::string extractor = it == name.end() ? "" : it->second;
  if (extractor == compact_features::name) {
    auto policy = load_blockpilot_policy<compact_features>(file, vocab);
    fn(policy);
  } else if (extractor == full_row_features::name) {
    auto policy = load_blockpilot_policy<full_row_features>(file, vocab);
    fn(policy);
  } else if (extractor == prompt_features::name) {
    auto policy = load_blockpilot_policy<prompt_features>(file, vocab);
    fn(policy);
  } else if (extractor == prompt_compact_features::name) {
    auto policy = load_blockpilot_policy<prompt_compact_features>(file, vocab);
    fn(policy);
  } else {
    throw error("predictor file '" + file.string() + "' field 'feature_extractor': unknown extractor '" + extractor + "'");
  }
}

}  // namespace blockpilot::cli
