// The reference acceptance format: a folder of `<B>.json` files, each mapping prompt index to tau
// (mean accepted draft tokens + 1 at block size B), and selection files mapping prompt to block size.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot_workbench/io/atomic_file.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

/// Measured acceptance lengths of a set of prompts at a set of block sizes.
struct acceptance_table {
  std::vector<int> sizes;                 ///< block sizes, strictly ascending
  std::vector<std::string> prompts;       ///< prompt keys, numeric order when all are integers
  std::vector<std::vector<double>> tau;   ///< `[prompt][size index]`, each in [1, size]
  std::string source;                     ///< where the table came from (a folder), for messages

  [[nodiscard]] std::size_t prompt_count() const { return prompts.size(); }
  [[nodiscard]] std::size_t size_count() const { return sizes.size(); }

  /// Position of block size `b` in `sizes`, or nullopt when the table has no column for it.
  [[nodiscard]] std::optional<std::size_t> size_index(int b) const {
    const auto it = std::lower_bound(sizes.begin(), sizes.end(), b);
    if (it == sizes.end() || *it != b) return std::nullopt;
    return static_cast<std::size_t>(it - sizes.begin());
  }

  /// Position of prompt `key` in `prompts`, or nullopt when the table has no such prompt.
  [[nodiscard]] std::optional<std::size_t> prompt_index(std::string_view key) const {
    const auto it = std::find(prompts.begin(), prompts.end(), key);
    if (it == prompts.end()) return std::nullopt;
    return static_cast<std::size_t>(it - prompts.begin());
  }

  /// The sizes as a readable list ("4, 8, 16"), for messages.
  [[nodiscard]] std::string sizes_text() const {
    std::string s;
    for (const int b : sizes) s += (s.empty() ? "" : ", ") + std::to_string(b);
    return s;
  }
};

/// A per-prompt block-size choice: prompt key → block size.
using block_size_selection = std::map<std::string, int>;

namespace detail {

/// Python's spellings of non-finite numbers.
inline constexpr std::string_view python_non_finite[] = {"-Infinity", "Infinity", "NaN"};

/// Quotes the bare `NaN`, `Infinity` and `-Infinity` tokens that Python's json module writes, so
/// that such a value reaches the field check (and its message) instead of failing the JSON parse.
inline std::string quote_python_non_finite(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    in_string = c == '"';
    const auto* hit = std::find_if(std::begin(python_non_finite), std::end(python_non_finite),
                                   [&](std::string_view t) { return text.substr(i, t.size()) == t; });
    if (hit == std::end(python_non_finite)) {
      out += c;
      continue;
    }
    out += '"';
    out += *hit;
    out += '"';
    i += hit->size() - 1;
  }
  return out;
}

/// Reads `file` as one JSON object; throws `error` naming the file when it is unreadable, not
/// JSON, or not an object.
inline nlohmann::json read_json_object(const std::filesystem::path& file, std::string_view what) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw error(file.string() + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(quote_python_non_finite(text.str()));
  } catch (const nlohmann::json::exception& e) {
    throw error(file.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw error(file.string() + ": expected a JSON object mapping " + std::string(what) + ", got " +
                j.type_name());
  return j;
}

/// `"key"` as it appears in messages.
inline std::string field_name(std::string_view key) { return "field \"" + std::string(key) + "\""; }

/// True when `s` is 1 to `max_digits` decimal digits.
inline bool is_decimal(std::string_view s, std::size_t max_digits) {
  return !s.empty() && s.size() <= max_digits && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The positive integer B of a file named `<B>.json` (canonical digits, no leading zero).
inline std::optional<int> block_size_of_file_name(const std::filesystem::path& file) {
  if (file.extension() != ".json") return std::nullopt;
  const std::string stem = file.stem().string();
  if (!is_decimal(stem, 6) || stem[0] == '0') return std::nullopt;
  return std::stoi(stem);
}

/// Orders prompt keys numerically when all are non-negative integers, else lexicographically.
inline void sort_prompt_keys(std::vector<std::string>& keys) {
  if (std::all_of(keys.begin(), keys.end(), [](const std::string& k) { return is_decimal(k, 9); }))
    std::sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
      return std::make_pair(std::stol(a), a) < std::make_pair(std::stol(b), b);
    });
  else
    std::sort(keys.begin(), keys.end());
}

/// Reads one `<b>.json` file into prompt → tau, checking every value.
inline std::map<std::string, double> read_tau_file(const std::filesystem::path& file, int b) {
  const nlohmann::json j = read_json_object(file, "prompt index to tau");
  if (j.empty()) throw error(file.string() + ": holds no prompts");
  std::map<std::string, double> out;
  for (const auto& [key, value] : j.items()) {
    const std::string where = file.string() + ": " + field_name(key);
    if (value.is_string() && std::ranges::count(python_non_finite, value.get<std::string>()) > 0)
      throw error(where + ": tau is not finite (" + value.get<std::string>() + ")");
    if (!value.is_number()) throw error(where + ": tau must be a number, got " + value.dump());
    const double tau = value.get<double>();
    if (!std::isfinite(tau)) throw error(where + ": tau is not finite");
    if (tau < 1.0 || tau > static_cast<double>(b))
      throw error(where + ": tau " + value.dump() + " is outside [1, " + std::to_string(b) +
                  "] (tau is a mean acceptance length at block size " + std::to_string(b) +
                  "; the reference tooling writes its selector as 1.json; pass such a file with --selection)");
    out.emplace(key, tau);
  }
  return out;
}

/// The first prompt in `a` that `b` lacks, if any.
inline std::optional<std::string> first_missing(const std::map<std::string, double>& a,
                                                const std::map<std::string, double>& b) {
  for (const auto& kv : a)
    if (!b.contains(kv.first)) return kv.first;
  return std::nullopt;
}

}  // namespace detail

/// Reads a folder of `<B>.json` acceptance files (B a positive integer; other names are ignored).
/// Throws `error` naming the folder, file and field when the folder is missing or has no
/// `<B>.json`, a file is not a JSON object, a tau is not a finite number in [1, B], or two files
/// cover different prompts.
[[nodiscard]] inline acceptance_table read_acceptance_folder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw error(dir.string() + ": acceptance folder not found");
  std::map<int, fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (const auto b = detail::block_size_of_file_name(it->path()); b && it->is_regular_file(ec))
      files.emplace(*b, it->path());
  if (ec) throw error(dir.string() + ": cannot list the acceptance folder (" + ec.message() + ")");
  if (files.empty()) throw error(dir.string() + ": no <B>.json acceptance file (B a positive integer) in the folder");

  std::vector<std::pair<fs::path, std::map<std::string, double>>> columns;
  acceptance_table t;
  t.source = dir.string();
  for (const auto& [b, file] : files) {
    auto column = detail::read_tau_file(file, b);
    if (!columns.empty()) {
      const auto& [first_file, first] = columns.front();
      if (const auto p = detail::first_missing(first, column))
        throw error("prompt \"" + *p + "\" is in " + first_file.string() + " but not in " + file.string());
      if (const auto p = detail::first_missing(column, first))
        throw error("prompt \"" + *p + "\" is in " + file.string() + " but not in " + first_file.string());
    }
    t.sizes.push_back(b);
    columns.emplace_back(file, std::move(column));
  }
  for (const auto& kv : columns.front().second) t.prompts.push_back(kv.first);
  detail::sort_prompt_keys(t.prompts);
  t.tau.reserve(t.prompts.size());
  for (const auto& p : t.prompts) {
    auto& row = t.tau.emplace_back();
    row.reserve(columns.size());
    for (const auto& column : columns) row.push_back(column.second.at(p));
  }
  return t;
}

/// Reads a selection file (a JSON object mapping prompt key to an integer block size) without
/// checking it against a table. Throws `error` naming the file and field on malformed input.
[[nodiscard]] inline block_size_selection read_selection(const std::filesystem::path& file) {
  const nlohmann::json j = detail::read_json_object(file, "prompt index to block size");
  block_size_selection out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > block_size_limit)
      throw error(file.string() + ": " + detail::field_name(key) + ": block size must be an integer in 1.." +
                  std::to_string(block_size_limit) + ", got " + value.dump());
    out.emplace(key, value.get<int>());
  }
  return out;
}

/// Checks that `selection` names exactly the table's prompts and only sizes the table has.
/// Throws `error` whose message starts with `source` (a file name) and names the field.
inline void check_selection(const block_size_selection& selection, const acceptance_table& table,
                            std::string_view source) {
  const std::string where(source);
  for (const auto& [key, b] : selection) {
    if (!table.prompt_index(key))
      throw error(where + ": " + detail::field_name(key) + ": unknown prompt (not in " + table.source + ")");
    if (!table.size_index(b))
      throw error(where + ": " + detail::field_name(key) + ": block size " + std::to_string(b) +
                  " has no acceptance file in " + table.source + " (sizes: " + table.sizes_text() + ")");
  }
  for (const auto& p : table.prompts)
    if (!selection.contains(p))
      throw error(where + ": " + detail::field_name(p) + ": missing; the selection must cover every prompt of " + table.source);
}

/// Reads a selection file and checks it against `table` (see `check_selection`).
[[nodiscard]] inline block_size_selection read_selection(const std::filesystem::path& file,
                                                         const acceptance_table& table) {
  auto selection = read_selection(file);
  check_selection(selection, table, file.string());
  return selection;
}

/// Writes `table` as `<B>.json` files into `dir` (created if needed), prompts in table order, values
/// with round-trip precision. Throws `error` naming the folder or file when the table is ragged or a write fails.
inline void write_acceptance_folder(const acceptance_table& table, const std::filesystem::path& dir) {
  const bool ragged = table.tau.size() != table.prompts.size() ||
                      std::ranges::any_of(table.tau, [&](const auto& row) { return row.size() != table.sizes.size(); });
  if (ragged)
    throw error(dir.string() + ": cannot write a table whose tau is not [" + std::to_string(table.prompts.size()) +
                " prompts][" + std::to_string(table.sizes.size()) + " sizes]");
  io::create_folder(dir);
  for (std::size_t s = 0; s < table.sizes.size(); ++s) {
    const auto file = dir / (std::to_string(table.sizes[s]) + ".json");
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (std::size_t p = 0; p < table.prompts.size(); ++p) j[table.prompts[p]] = table.tau[p][s];
    io::write_file_atomically(file, j.dump() + '\n');
  }
}

}  // namespace blockpilot
