// libFuzzer target for prompt text (models/bpe_tokenizer.hpp), on a small byte-level vocabulary built
// in memory (test/support/gguf_writer.hpp): encoding any bytes, plain or in the chat template, throws
// nothing, gives ids inside the vocabulary and decodes back to the same bytes (every byte has a
// token); decoding any ids throws nothing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "../support/gguf_writer.hpp"

namespace bp = blockpilot;

namespace {
const bp::bpe_tokenizer& tokenizer() {
  static const auto file = [] {
    bp::testing::gguf_writer w;
    bp::testing::add_tiny_tokenizer(w);
    return w.serialize();
  }();
  static const auto t = bp::bpe_tokenizer::from_gguf(bp::io::gguf_file::parse(file, "tiny tokenizer"));
  return t;
}

void require_round_trip(const std::vector<bp::token_id>& ids, std::string_view text) {
  for (const auto id : ids)
    if (id < 0 || static_cast<std::size_t>(id) >= tokenizer().vocab_size()) __builtin_trap();
  if (tokenizer().decode(ids) != text) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  require_round_trip(tokenizer().encode(text), text);
  require_round_trip(tokenizer().encode_chat(text), bp::bpe_tokenizer::apply_chat_template(text));
  std::vector<bp::token_id> ids(size / sizeof(bp::token_id));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(bp::token_id));
  (void)tokenizer().decode(ids);
  return 0;
}
