// A minimal GGUF writer for tests and fuzz fixtures: metadata and tensors in insertion order,
// offsets aligned, no trailing padding; plus a small byte-level BPE vocabulary (tokenizer metadata).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"

namespace blockpilot::testing {

using bytes = std::vector<std::byte>;

/// A minimal GGUF writer: metadata and tensors in insertion order, offsets aligned, no trailing padding.
class gguf_writer {
 public:
  std::uint32_t version = 3;
  std::uint64_t alignment = 32;  ///< used for layout; emit `general.alignment` with `kv` to change the reader's

  template <class T>
  static void put(bytes& out, T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void put_string(bytes& out, std::string_view s) {
    put<std::uint64_t>(out, s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out.insert(out.end(), p, p + s.size());
  }
  /// A key with a raw, already encoded value of type `type`.
  void kv_raw(std::string_view key, io::gguf_value_type type, const bytes& value) {
    put_string(kv_, key);
    put(kv_, static_cast<std::uint32_t>(type));
    kv_.insert(kv_.end(), value.begin(), value.end());
    ++kv_count_;
  }
  template <class T>
  void kv(std::string_view key, io::gguf_value_type type, T v) {
    bytes b;
    put(b, v);
    kv_raw(key, type, b);
  }
  void kv_string(std::string_view key, std::string_view s) {
    bytes b;
    put_string(b, s);
    kv_raw(key, io::gguf_value_type::string, b);
  }
  template <class T>
  void kv_array(std::string_view key, io::gguf_value_type element, const std::vector<T>& items) {
    bytes b;
    put(b, static_cast<std::uint32_t>(element));
    put<std::uint64_t>(b, items.size());
    for (const auto& x : items) {
      if constexpr (std::is_same_v<T, std::string>)
        put_string(b, x);
      else
        put(b, x);
    }
    kv_raw(key, io::gguf_value_type::array, b);
  }
  void tensor(std::string name, std::vector<std::uint64_t> dims, io::ggml_type type, bytes data) {
    tensors_.push_back({std::move(name), std::move(dims), type, std::move(data)});
  }
  /// Replaces the computed offset of tensor `i` when serializing.
  void override_offset(std::size_t i, std::uint64_t offset) { offsets_[i] = offset; }

  [[nodiscard]] bytes serialize() const {
    bytes out;
    const char magic[4] = {'G', 'G', 'U', 'F'};
    for (char c : magic) out.push_back(static_cast<std::byte>(c));
    put(out, version);
    put<std::uint64_t>(out, tensors_.size());
    put<std::uint64_t>(out, kv_count_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    bytes data;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      data.resize((data.size() + alignment - 1) / alignment * alignment);
      put_string(out, t.name);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) put(out, d);
      put(out, static_cast<std::uint32_t>(t.type));
      const auto it = offsets_.find(i);
      put<std::uint64_t>(out, it != offsets_.end() ? it->second : data.size());
      data.insert(data.end(), t.data.begin(), t.data.end());
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment);
    out.insert(out.end(), data.begin(), data.end());
    return out;
  }

 private:
  struct tensor_entry {
    std::string name;
    std::vector<std::uint64_t> dims;
    io::ggml_type type;
    bytes data;
  };
  bytes kv_;
  std::uint64_t kv_count_ = 0;
  std::vector<tensor_entry> tensors_;
  std::map<std::size_t, std::uint64_t> offsets_;
};

/// Tokenizer metadata of a small byte-level BPE vocabulary as SmolLM2's is built: the 256 byte tokens
/// (GPT-2's byte-to-unicode form), a few merges, and the ChatML special tokens (type 3, ids 0..2).
inline void add_tiny_tokenizer(gguf_writer& w) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (unsigned b = 0; b < 256; ++b) {
    std::string s;
    bpe_detail::append_utf8(s, bpe_detail::byte_to_unicode[b]);
    tokens.push_back(s);
  }
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e", "Ċ Ċ",
                                           "Ġ Ġ", "ĠĠ ĠĠ", "in g", "Ġa n", "Ġan d"};
  for (const auto& m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  std::vector<std::int32_t> types(tokens.size(), 1);
  types[0] = types[1] = types[2] = 3;
  w.kv_string("tokenizer.ggml.model", "gpt2");
  w.kv_string("tokenizer.ggml.pre", "smollm");
  w.kv_array("tokenizer.ggml.tokens", io::gguf_value_type::string, tokens);
  w.kv_array("tokenizer.ggml.token_type", io::gguf_value_type::i32, types);
  w.kv_array("tokenizer.ggml.merges", io::gguf_value_type::string, merges);
  w.kv("tokenizer.ggml.bos_token_id", io::gguf_value_type::u32, std::uint32_t{1});
  w.kv("tokenizer.ggml.eos_token_id", io::gguf_value_type::u32, std::uint32_t{2});
}

}  // namespace blockpilot::testing
