// A real GGUF target as the subcommands configure it: `--model gguf:PATH`, `--drafter
// none|lookup|early-exit:L|dflash:FOLDER`, and prompt files (one prompt per line, keyed NAME:LINE).
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "blockpilot_workbench/io/trace_json.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/dflash_drafter.hpp"
#include "blockpilot_workbench/models/early_exit_drafter.hpp"
#include "blockpilot_workbench/models/llama.hpp"
#include "blockpilot_workbench/models/lookup_drafter.hpp"
#include "options.hpp"

namespace blockpilot::cli {

/// Tokenizer and weights of one GGUF file.
struct real_model {
  std::filesystem::path path;
  bpe_tokenizer tokenizer;
  llama_model model;
};

/// `--storage fp32|quantized|quantized_int8`: how the target keeps its weights.
inline llama_storage parse_storage(std::string_view text) {
  if (text == "fp32") return llama_storage::fp32;
  if (text == "quantized") return llama_storage::quantized;
  if (text == "quantized_int8") return llama_storage::quantized_int8;
  throw error("--storage: expected fp32, quantized or quantized_int8, got \"" + std::string(text) + "\"");
}

/// Loads `--model gguf:PATH`; throws `error` naming the option or the file.
inline real_model load_real_model(const std::string& spec, llama_storage storage = llama_storage::fp32) {
  if (!spec.starts_with("gguf:")) throw error("--model: expected gguf:PATH, got '" + spec + "'");
  const std::filesystem::path path = spec.substr(5);
  const auto file = io::gguf_file::open(path);
  return {path, bpe_tokenizer::from_gguf(file), llama_model::load(file, storage)};
}

/// KV-cache positions for prompts of up to `longest_prompt` tokens and `max_new` new tokens in blocks
/// of up to `max_block`: the model's context length (llama.context_length) bounds the request, so
/// that no request allocates past what the model can attend to. Throws `error` naming the options.
inline std::int64_t kv_positions(const llama_model& model, std::int64_t longest_prompt, std::int64_t max_new, int max_block) {
  const std::int64_t context = model.config().context_length;
  if (context > 0 && longest_prompt + max_new > context)
    throw error("a prompt of " + std::to_string(longest_prompt) + " tokens plus --max-new-tokens " + std::to_string(max_new) +
                " exceeds the model's context length of " + std::to_string(context) +
                " tokens (llama.context_length); shorten the prompt or lower --max-new-tokens");
  return longest_prompt + max_new + max_block + 1;
}

/// Throws before tokenizing when `text` (named `what`) cannot fit the model's context with `max_new`
/// new tokens: no token spells more bytes than the longest vocabulary entry, so a text longer than
/// that many bytes per position needs more positions than there are (tokenizing it first could take
/// minutes and gigabytes).
inline void require_prompt_fits(const real_model& real, std::string_view text, std::int64_t max_new, const std::string& what) {
  const std::int64_t context = real.model.config().context_length;
  if (context <= 0 || max_new >= context) return;  // kv_positions says what exceeds the context
  std::size_t longest = 1;
  for (std::size_t i = 0; i < real.tokenizer.vocab_size(); ++i)
    longest = std::max(longest, real.tokenizer.token_text(static_cast<token_id>(i)).size());
  const auto room = static_cast<std::size_t>(std::max<std::int64_t>(context - max_new, 0));
  if (text.size() > room * longest)
    throw error(what + ": " + std::to_string(text.size()) + " bytes cannot fit the model's context length of " +
                std::to_string(context) + " tokens (llama.context_length) with " + std::to_string(max_new) +
                " new tokens; shorten it");
}

/// `--drafter none|lookup[:evidence][,corpus=FILE]|early-exit:L|dflash:FOLDER[,vocab=N][,weights=S]`
/// (lookup's confidence graded by the matched n-gram's length, or by the evidence for the match:
/// lookup_confidence; with a corpus of the target's continuations, a trace of `measure --trace-out`:
/// ngram_corpus; dflash's draft vocabulary the first N tokens of FOLDER/draft_vocab.json, its weights
/// held as --storage S: dflash_options, dflash_model::load).
struct drafter_spec {
  enum class kind { none, lookup, early_exit, dflash } type = kind::lookup;
  int layers = 0;              ///< L of early-exit
  std::filesystem::path folder;  ///< the checkpoint of dflash (config.json + model.safetensors)
  lookup_confidence grade = lookup_confidence::ngram;
  std::filesystem::path corpus{};  ///< lookup's corpus, when given
  int vocab = 0;                   ///< dflash's draft vocabulary size (0: the whole vocabulary)
  std::string weights = "fp32";    ///< dflash's weight storage

  /// Throws `error` naming the option; L is checked against the model when the drafter is built.
  static drafter_spec parse(std::string_view text, bool allow_none) {
    if (allow_none && text == "none") return {kind::none, 0, {}};
    if (const auto comma = text.find(",corpus="); text.starts_with("lookup") && comma != std::string_view::npos &&
                                                  comma + 8 < text.size()) {
      drafter_spec s = parse(text.substr(0, comma), false);
      s.corpus = std::string(text.substr(comma + 8));
      return s;
    }
    if (text == "lookup") return {kind::lookup, 0, {}};
    if (text == "lookup:evidence") return {kind::lookup, 0, {}, lookup_confidence::evidence};
    if (text.starts_with("early-exit:"))
      if (const auto l = parse_int(text.substr(11)); l) return {kind::early_exit, *l, {}};
    if (text.starts_with("dflash:") && text.size() > 7) return parse_dflash(text.substr(7));
    throw error(std::string("--drafter: expected ") + (allow_none ? "none, " : "") +
                "lookup[:evidence][,corpus=FILE], early-exit:L or dflash:FOLDER[,vocab=N][,weights=S], got \"" +
                std::string(text) + "\"");
  }
  static drafter_spec parse_dflash(std::string_view text) {
    drafter_spec s{kind::dflash, 0, std::string(text.substr(0, text.find(',')))};
    for (auto rest = text.substr(std::min(text.size(), text.find(','))); !rest.empty();) {
      rest.remove_prefix(1);
      const auto option = rest.substr(0, rest.find(','));
      rest.remove_prefix(option.size());
      if (option.starts_with("vocab=")) {
        const auto n = parse_int(option.substr(6));
        if (!n || *n < 1) throw error("--drafter dflash: vocab=N needs a positive N, got \"" + std::string(option) + "\"");
        s.vocab = *n;
      } else if (option.starts_with("weights=")) {
        s.weights = std::string(option.substr(8));
        if (s.weights != "fp32" && s.weights != "quantized" && s.weights != "quantized_int8")
          throw error("--drafter dflash: weights=S: expected fp32, quantized or quantized_int8, got \"" + s.weights + "\"");
      } else {
        throw error("--drafter dflash:FOLDER: options are vocab=N and weights=fp32|quantized|quantized_int8, got \"" +
                    std::string(option) + "\"");
      }
    }
    if (s.folder.empty()) throw error("--drafter dflash:FOLDER: no folder");
    return s;
  }
  [[nodiscard]] std::string name() const {
    switch (type) {
      case kind::none: return "none";
      case kind::lookup:
        return std::string(grade == lookup_confidence::evidence ? "lookup:evidence" : "lookup") +
               (corpus.empty() ? "" : ",corpus=" + corpus.filename().string());
      case kind::early_exit: return "early-exit:" + std::to_string(layers);
      case kind::dflash:
        return "dflash:" + folder.filename().string() + (vocab > 0 ? ",vocab=" + std::to_string(vocab) : "") +
               (weights != "fp32" ? ",weights=" + weights : "");
    }
    return "";
  }
};

/// What a drafter needs before the target is built: a DFlash checkpoint, loaded once, whose drafter
/// reads the target's hidden states at its `target_layer_ids` (the verifier must tap those layers).
struct drafter_weights {
  std::optional<dflash_model> dflash;
  std::vector<token_id> draft_vocab;  ///< dflash's draft vocabulary (empty: all)
  std::shared_ptr<const ngram_corpus> corpus;
  std::int64_t corpus_vocab = 0;  ///< the vocabulary the corpus's tokens are of

  /// Loads the checkpoint of a dflash spec (and its draft vocabulary) or lookup's corpus; throws `error`
  /// naming the file.
  static drafter_weights load(const drafter_spec& spec) {
    drafter_weights w;
    if (spec.type == drafter_spec::kind::dflash) {
      w.dflash.emplace(dflash_model::load(spec.folder, parse_storage(spec.weights)));
      if (spec.vocab > 0) w.draft_vocab = read_draft_vocab(spec.folder / "draft_vocab.json", spec.vocab);
    }
    if (!spec.corpus.empty()) {
      std::vector<std::vector<token_id>> sequences;
      read_corpus(spec.corpus, sequences, w.corpus_vocab);
      w.corpus = std::make_shared<const ngram_corpus>(sequences);
    }
    return w;
  }
  /// The continuations of a trace of `measure --trace-out`, and its vocabulary.
  static void read_corpus(const std::filesystem::path& path, std::vector<std::vector<token_id>>& sequences,
                          std::int64_t& vocab) {
    auto trace = decode_trace::read(path, "--drafter: the corpus " + path.string());
    vocab = trace.vocab;
    for (auto& r : trace.requests) sequences.push_back(std::move(r.tokens));
  }
  /// The layers the target's verifier must expose as context features (none for other drafters).
  [[nodiscard]] std::vector<int> feature_layers() const {
    return dflash ? dflash->config().target_layer_ids : std::vector<int>{};
  }
};

/// The prompt-lookup drafter of a lookup spec: n-grams of 3 down to 1, over the corpus in `weights`.
inline lookup_drafter make_lookup_drafter(const drafter_spec& spec, const drafter_weights& weights, std::int64_t vocab,
                                          int draft_rows) {
  if (weights.corpus && weights.corpus_vocab != vocab)
    throw error("--drafter: the corpus " + spec.corpus.string() + " holds tokens of a vocabulary of " +
                std::to_string(weights.corpus_vocab) + ", the target's has " + std::to_string(vocab) +
                " (another model's writing)");
  return lookup_drafter(vocab, 3, 1, draft_rows, spec.grade, weights.corpus);
}

/// The lookup drafter of the spec `text`, its corpus loaded; throws `error(not_lookup)` for another drafter.
inline lookup_drafter load_lookup_drafter(std::string_view text, std::int64_t vocab, int draft_rows,
                                          const std::string& not_lookup) {
  const auto spec = drafter_spec::parse(text, false);
  if (spec.type != drafter_spec::kind::lookup) throw error(not_lookup);
  return make_lookup_drafter(spec, drafter_weights::load(spec), vocab, draft_rows);
}

/// A DFlash drafter with its own checkpoint, for a policy's @DRAFTER beside --drafter's `like` (the same
/// options but the spec's draft vocabulary); its checkpoint must tap the target layers that `like`'s does,
/// which the verifier exposes. Throws `error` starting with `what`.
struct owned_dflash_drafter {
  drafter_weights weights;
  dflash_drafter drafter;

  owned_dflash_drafter(std::string_view text, const dflash_drafter& like, const llama_model& target, const std::string& what)
      : weights(load_dflash(text, like, what)), drafter(*weights.dflash, target, options(like, weights)) {}

 private:
  static drafter_weights load_dflash(std::string_view text, const dflash_drafter& like, const std::string& what) {
    const auto spec = drafter_spec::parse(text, false);
    if (spec.type != drafter_spec::kind::dflash) throw error(what + ": @DRAFTER is a dflash drafter with --drafter dflash:...");
    auto w = drafter_weights::load(spec);
    if (w.dflash->config().target_layer_ids != like.model().config().target_layer_ids)
      throw error(what + ": @DRAFTER's checkpoint taps other target layers than --drafter's");
    return w;
  }
  static dflash_options options(const dflash_drafter& like, const drafter_weights& w) {
    auto o = like.options();
    o.draft_vocab = w.draft_vocab;
    return o;
  }
};

/// Builds the drafter of `spec` over `model` for blocks up to `max_block` and calls `fn(drafter)`
/// (the prompt-lookup drafter for `none`, which then never drafts). Throws `error` for a bad L or a
/// checkpoint that does not fit the target.
template <class Fn>
void with_drafter(const drafter_spec& spec, const drafter_weights& weights, const llama_model& model, int max_block,
                  std::int64_t max_positions, int threads, Fn&& fn) {
  const int draft_rows = std::max(max_block - 1, 0);
  if (spec.type == drafter_spec::kind::early_exit) {
    early_exit_options o;
    o.layers = spec.layers;
    o.max_positions = max_positions;
    o.max_draft_rows = draft_rows;
    o.threads = threads;
    early_exit_drafter d(model, o);
    fn(d);
  } else if (spec.type == drafter_spec::kind::dflash) {
    dflash_options o;
    o.max_positions = max_positions;
    o.max_draft_rows = draft_rows;
    o.threads = threads;
    o.draft_vocab = weights.draft_vocab;
    dflash_drafter d(weights.dflash.value(), model, o);
    fn(d);
  } else {
    auto d = make_lookup_drafter(spec, weights, model.config().vocab, draft_rows);
    fn(d);
  }
}

/// Builds the target (a verifier of `real`'s model with room for prompts of up to `longest_prompt` tokens,
/// `max_new` more and a block of `max_block`) and the drafter of `spec`, and calls `fn(drafter, target)`.
template <class Fn>
void with_real_pair(const real_model& real, const drafter_spec& spec, std::int64_t longest_prompt, std::int64_t max_new,
                    int max_block, int threads, Fn&& fn) {
  const auto positions = kv_positions(real.model, longest_prompt, max_new, max_block);
  const auto weights = drafter_weights::load(spec);
  llama_verifier_options target_options;
  target_options.max_positions = positions;
  target_options.max_block = std::max(64, max_block);
  target_options.threads = threads;
  target_options.feature_layers = weights.feature_layers();
  llama_verifier target(real.model, target_options);
  with_drafter(spec, weights, real.model, max_block, positions, threads, [&](auto& drafter) { fn(drafter, target); });
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
/// inclusive; last = 0: to the end). A `.jsonl` file holds one JSON object per line whose "prompt" is
/// the text (newlines kept). Throws `error` naming the file (and the line of a malformed one).
inline std::vector<prompt_line> read_prompt_lines(const std::filesystem::path& file, int first = 1, int last = 0) {
  std::ifstream in(file);
  if (!in) throw error("prompt file '" + file.string() + "': cannot open");
  const auto name = prompt_file_name(file);
  const bool json_lines = file.extension() == ".jsonl";
  std::vector<prompt_line> out;
  std::string text;
  int number = 0;
  for (; std::getline(in, text);) {
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty() || number < first || (last > 0 && number > last)) continue;
    if (json_lines) {
      const auto row = nlohmann::json::parse(text, nullptr, false);
      if (!row.is_object() || !row.contains("prompt") || !row["prompt"].is_string())
        throw error("prompt file '" + file.string() + "': line " + std::to_string(number) +
                    " is not a JSON object with a \"prompt\" string");
      text = row["prompt"].get<std::string>();
    }
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
