// A real GGUF target as the subcommands configure it: `--model gguf:PATH`, `--drafter
// none|lookup|early-exit:L`, and prompt files (one prompt per line, keyed NAME:LINE).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "blockpilot/models/bpe_tokenizer.hpp"
#include "blockpilot/models/early_exit_drafter.hpp"
#include "blockpilot/models/llama.hpp"
#include "blockpilot/models/lookup_drafter.hpp"
#include "options.hpp"

namespace blockpilot::cli {

/// Tokenizer and weights of one GGUF file.
struct real_model {
  std::filesystem::path path;
  bpe_tokenizer tokenizer;
  llama_model model;
};

/// `--storage fp32|quantized`: how the target keeps its weights.
inline llama_storage parse_storage(std::string_view text) {
  if (text == "fp32") return llama_storage::fp32;
  if (text == "quantized") return llama_storage::quantized;
  throw error("--storage: expected fp32 or quantized, got \"" + std::string(text) + "\"");
}

/// Loads `--model gguf:PATH`; throws `error` naming the option or the file.
inline real_model load_real_model(const std::string& spec, llama_storage storage = llama_storage::fp32) {
  if (!spec.starts_with("gguf:")) throw error("--model: expected gguf:PATH, got '" + spec + "'");
  const std::filesystem::path path = spec.substr(5);
  const auto file = io::gguf_file::open(path);
  return {path, bpe_tokenizer::from_gguf(file), llama_model::load(file, storage)};
}

/// `--drafter none|lookup|early-exit:L`.
struct drafter_spec {
  enum class kind { none, lookup, early_exit } type = kind::lookup;
  int layers = 0;  ///< L of early-exit

  /// Throws `error` naming the option; L is checked against the model when the drafter is built.
  static drafter_spec parse(std::string_view text, bool allow_none) {
    if (allow_none && text == "none") return {kind::none, 0};
    if (text == "lookup") return {kind::lookup, 0};
    if (text.starts_with("early-exit:"))
      if (const auto l = parse_int(text.substr(11)); l) return {kind::early_exit, *l};
    throw error(std::string("--drafter: expected ") + (allow_none ? "none, " : "") + "lookup or early-exit:L, got \"" +
                std::string(text) + "\"");
  }
  [[nodiscard]] std::string name() const {
    return type == kind::none ? "none" : type == kind::lookup ? "lookup" : "early-exit:" + std::to_string(layers);
  }
};

/// Builds the drafter of `spec` over `model` for blocks up to `max_block` and calls `fn(drafter)`
/// (the prompt-lookup drafter for `none`, which then never drafts). Throws `error` for a bad L.
template <class Fn>
void with_drafter(const drafter_spec& spec, const llama_model& model, int max_block, std::int64_t max_positions,
                  int threads, Fn&& fn) {
  if (spec.type == drafter_spec::kind::early_exit) {
    early_exit_options o;
    o.layers = spec.layers;
    o.max_positions = max_positions;
    o.max_draft_rows = std::max(max_block - 1, 0);
    o.threads = threads;
    early_exit_drafter d(model, o);
    fn(d);
  } else {
    lookup_drafter d(model.config().vocab, 3, 1, std::max(max_block - 1, 0));
    fn(d);
  }
}

/// One prompt of a prompt file.
struct prompt_line {
  std::string key;   ///< NAME:LINE, LINE 1-based
  std::string text;
};

/// The NAME of a prompt file's keys: its stem without a trailing "_<count>" (copa.txt -> copa,
/// sharegpt_60.txt -> sharegpt).
inline std::string prompt_file_name(const std::filesystem::path& file) {
  std::string stem = file.stem().string();
  if (const auto at = stem.rfind('_'); at != std::string::npos && at + 1 < stem.size() &&
                                       stem.find_first_not_of("0123456789", at + 1) == std::string::npos)
    stem.resize(at);
  return stem;
}

/// The prompts of `file`, one per line (empty lines skipped but counted), lines first..last (1-based,
/// inclusive; last = 0: to the end). Throws `error` naming the file.
inline std::vector<prompt_line> read_prompt_lines(const std::filesystem::path& file, int first = 1, int last = 0) {
  std::ifstream in(file);
  if (!in) throw error("prompt file '" + file.string() + "': cannot open");
  const auto name = prompt_file_name(file);
  std::vector<prompt_line> out;
  std::string text;
  int number = 0;
  for (; std::getline(in, text);) {
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty() || number < first || (last > 0 && number > last)) continue;
    out.push_back({name + ":" + std::to_string(number), text});
  }
  if (last > number)
    throw error("prompt file '" + file.string() + "': --lines " + std::to_string(first) + ":" + std::to_string(last) +
                " goes past its last line " + std::to_string(number));
  if (out.empty()) throw error("prompt file '" + file.string() + "': no prompts");
  return out;
}

/// `--lines A:B` with 1 <= A <= B.
inline std::pair<int, int> parse_lines(std::string_view text) {
  const auto l = parse_pair(text, "--lines", ':');
  if (l.first < 1 || l.first > l.second) throw error("--lines: needs 1 <= A <= B, got \"" + std::string(text) + "\"");
  return l;
}

}  // namespace blockpilot::cli
