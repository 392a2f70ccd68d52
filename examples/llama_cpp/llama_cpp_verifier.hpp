// llama.cpp's own model as BlockPilot's verifier, through its C API: a block is one llama_decode with
// logits for every row, the crop after acceptance is llama_memory_seq_rm of the rejected positions.
#pragma once

#include <llama.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/concepts.hpp"

namespace blockpilot::llama_cpp {

struct model_deleter {
  void operator()(::llama_model* m) const { llama_model_free(m); }
};
struct context_deleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
using model_ptr = std::unique_ptr<::llama_model, model_deleter>;
using context_ptr = std::unique_ptr<llama_context, context_deleter>;

/// Loads a GGUF file on the CPU, its weights repacked for llama.cpp's multi-row kernels when `repack`
/// (its default); throws `error` naming it.
inline model_ptr load_model(const std::string& path, bool repack = true) {
  llama_model_params params = llama_model_default_params();
  params.n_gpu_layers = 0;
  params.use_extra_bufts = repack;
  model_ptr model(llama_model_load_from_file(path.c_str(), params));
  if (!model) throw error("llama.cpp could not load '" + path + "'");
  return model;
}

/// A context of one sequence with room for `positions` tokens, batches of up to `max_batch` tokens, and
/// flash attention: without it a block's rows differ from the same rows alone; with it and one thread
/// they are the same (several threads share one row's attention otherwise than a block's on long contexts).
inline context_ptr make_context(::llama_model& model, int positions, int max_batch, int threads) {
  llama_context_params params = llama_context_default_params();
  params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  params.n_ctx = static_cast<std::uint32_t>(positions);
  params.n_batch = params.n_ubatch = static_cast<std::uint32_t>(max_batch);
  params.n_seq_max = 1;
  params.n_threads = params.n_threads_batch = threads;
  params.no_perf = true;
  context_ptr context(llama_init_from_model(&model, params));
  if (!context) throw error("llama.cpp could not create a context of " + std::to_string(positions) + " positions");
  return context;
}

/// A single-sequence llama_batch, freed with it.
class batch {
 public:
  explicit batch(int capacity) : b_(llama_batch_init(capacity, 0, 1)), capacity_(capacity) {}
  batch(const batch&) = delete;
  batch& operator=(const batch&) = delete;
  ~batch() { llama_batch_free(b_); }

  /// tokens at positions first.., logits for every row (or only the last).
  llama_batch& fill(std::span<const token_id> tokens, llama_pos first, bool every_row) {
    b_.n_tokens = static_cast<std::int32_t>(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      b_.token[i] = tokens[i];
      b_.pos[i] = first + static_cast<llama_pos>(i);
      b_.n_seq_id[i] = 1;
      b_.seq_id[i][0] = 0;
      b_.logits[i] = every_row || i + 1 == tokens.size();
    }
    return b_;
  }
  [[nodiscard]] int capacity() const { return capacity_; }

 private:
  llama_batch b_;
  int capacity_;
};

/// The verifier concept over a llama.cpp context (which it owns; the model must outlive it). Logit views
/// point into llama.cpp's output buffer and stay valid until the next call.
class llama_cpp_verifier {
 public:
  llama_cpp_verifier(::llama_model& model, int positions, int max_batch, int threads)
      : context_(make_context(model, positions, max_batch, threads)),
        memory_(llama_get_memory(context_.get())),
        batch_(max_batch),
        vocab_(llama_vocab_n_tokens(llama_model_get_vocab(&model))) {}

  [[nodiscard]] std::int64_t vocab_size() const { return vocab_; }
  [[nodiscard]] llama_context* context() const { return context_.get(); }

  /// Clears the sequence and runs the prompt in batches; returns its last row.
  status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) {
    llama_memory_clear(memory_, true);
    committed_ = 0;
    for (std::size_t first = 0; first < prompt.size(); first += static_cast<std::size_t>(batch_.capacity())) {
      const auto part = prompt.subspan(first, std::min<std::size_t>(prompt.size() - first, batch_.capacity()));
      if (llama_decode(context_.get(), batch_.fill(part, static_cast<llama_pos>(first), false)) != 0) return status::model_error;
    }
    committed_ = static_cast<llama_pos>(prompt.size());
    logits = {llama_get_logits_ith(context_.get(), -1), 1, vocab_};
    return logits.data != nullptr ? status::success : status::model_error;
  }

  /// The block at the next positions in one llama_decode, a row of logits per token.
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    if (block.empty() || block.size() > static_cast<std::size_t>(batch_.capacity())) return status::invalid_block_size;
    if (llama_decode(context_.get(), batch_.fill(block, committed_, true)) != 0) return status::model_error;
    scored_ = static_cast<llama_pos>(block.size());
    // Rows of the outputs in batch order, back to back ([n_outputs][vocab]).
    logits = {llama_get_logits(context_.get()), static_cast<std::int64_t>(block.size()), vocab_};
    return logits.data != nullptr ? status::success : status::model_error;
  }

  /// Keeps the first n scored positions: the rest leave the KV cache.
  status commit(int n) {
    if (n < 0 || n > scored_) return status::invalid_argument;
    committed_ += n;
    scored_ = 0;
    return llama_memory_seq_rm(memory_, 0, committed_, -1) ? status::success : status::model_error;
  }

 private:
  context_ptr context_;
  llama_memory_t memory_;
  batch batch_;
  std::int64_t vocab_;
  llama_pos committed_ = 0, scored_ = 0;
};

static_assert(verifier<llama_cpp_verifier>);

/// The tokens that end a generation in the model's vocabulary (its end-of-generation set).
inline std::vector<token_id> end_of_generation_tokens(const ::llama_model& model) {
  const llama_vocab* vocab = llama_model_get_vocab(&model);
  std::vector<token_id> stops;
  for (token_id t = 0; t < llama_vocab_n_tokens(vocab); ++t)
    if (llama_vocab_is_eog(vocab, t)) stops.push_back(t);
  return stops;
}

/// `text` in the model's tokens, with the start the vocabulary asks for (a BOS token, once) and special
/// tokens written in the text read as such when `parse_special`.
inline std::vector<token_id> tokenize(const ::llama_model& model, const std::string& text, bool parse_special) {
  const llama_vocab* vocab = llama_model_get_vocab(&model);
  const auto length = static_cast<std::int32_t>(text.size());
  std::vector<token_id> tokens(text.size() + 2);
  auto n = llama_tokenize(vocab, text.data(), length, tokens.data(), static_cast<std::int32_t>(tokens.size()), true, parse_special);
  if (n < 0) {
    tokens.resize(static_cast<std::size_t>(-n));
    n = llama_tokenize(vocab, text.data(), length, tokens.data(), -n, true, parse_special);
  }
  if (n < 0) throw error("llama.cpp could not tokenize a prompt");
  tokens.resize(static_cast<std::size_t>(n));
  const token_id bos = llama_vocab_bos(vocab);  // a template that writes BOS itself would give two
  if (tokens.size() >= 2 && tokens[0] == bos && tokens[1] == bos) tokens.erase(tokens.begin());
  return tokens;
}

/// `text` as the user's turn of the model's own chat template (after a system turn, when `system` is not
/// empty), ready for the assistant's answer.
inline std::vector<token_id> tokenize_chat(const ::llama_model& model, const std::string& text, const std::string& system = {}) {
  const char* chat_template = llama_model_chat_template(&model, nullptr);
  if (chat_template == nullptr) throw error("the model has no chat template: give its prompts as raw text");
  std::vector<llama_chat_message> turns;
  if (!system.empty()) turns.push_back({"system", system.c_str()});
  turns.push_back({"user", text.c_str()});
  std::string formatted(2 * (text.size() + system.size()) + 256, '\0');
  auto n = llama_chat_apply_template(chat_template, turns.data(), turns.size(), true, formatted.data(),
                                     static_cast<std::int32_t>(formatted.size()));
  if (n > static_cast<std::int32_t>(formatted.size())) {
    formatted.resize(static_cast<std::size_t>(n));
    n = llama_chat_apply_template(chat_template, turns.data(), turns.size(), true, formatted.data(), n);
  }
  if (n < 0) throw error("llama.cpp does not know the model's chat template: give its prompts as raw text");
  formatted.resize(static_cast<std::size_t>(n));
  return tokenize(model, formatted, true);
}

/// llama.cpp's own greedy decoding (its greedy sampler, one llama_decode per token): up to `max_new`
/// tokens after `prompt`, ending after a stop token. The reference the adapter must reproduce.
inline std::vector<token_id> greedy_decode(llama_cpp_verifier& v, std::span<const token_id> prompt, int max_new,
                                           std::span<const token_id> stops) {
  std::unique_ptr<llama_sampler, decltype(&llama_sampler_free)> sampler(
      llama_sampler_chain_init(llama_sampler_chain_default_params()), &llama_sampler_free);
  llama_sampler_chain_add(sampler.get(), llama_sampler_init_greedy());
  std::vector<token_id> out;
  matrix_view<const float> logits;
  if (v.prefill(prompt, logits) != status::success) throw error("llama.cpp: prefill failed");
  while (static_cast<int>(out.size()) < max_new) {
    const token_id t = llama_sampler_sample(sampler.get(), v.context(), -1);
    out.push_back(t);
    if (std::ranges::find(stops, t) != stops.end() || static_cast<int>(out.size()) == max_new) break;
    if (v.score(std::span<const token_id>(&out.back(), 1), logits) != status::success || v.commit(1) != status::success)
      throw error("llama.cpp: decode failed");
  }
  return out;
}

}  // namespace blockpilot::llama_cpp
