// Tests of the byte-level BPE tokenizer on SmolLM2-135M-Instruct's GGUF against Hugging Face `tokenizers`
// (test/data/tokenizer_reference.json, written by test/data/make_tokenizer_reference.py).
#define BOOST_TEST_MODULE tokenizer
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/gguf_writer.hpp"
#include "support/source_paths.hpp"
#include "support/smollm2.hpp"
#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"

namespace fs = std::filesystem;
namespace bp = blockpilot;
namespace utf = boost::unit_test;
using ids = std::vector<bp::token_id>;

namespace {
using blockpilot::testing::smollm2_path;
using blockpilot::testing::smollm2_present;


fs::path prompts_folder() { return blockpilot::testing::project_data_dir() / "prompts"; }
fs::path reference_path() { return blockpilot::testing::test_data_dir() / "tokenizer_reference.json"; }

/// One tokenizer for the whole module (parsing the GGUF's 49k tokens and merges takes a moment).
const bp::bpe_tokenizer& smollm2() {
  static const bp::bpe_tokenizer t = bp::bpe_tokenizer::from_gguf(bp::io::gguf_file::open(smollm2_path()));
  return t;
}

/// The lines of `path`, split at '\n' only (the prompts hold U+2028 inside lines).
std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string round_trip(const std::string& s) { return smollm2().decode(smollm2().encode(s)); }

}  // namespace

BOOST_AUTO_TEST_CASE(metadata, *utf::precondition(smollm2_present)) {
  const auto& t = smollm2();
  BOOST_TEST(t.vocab_size() == 49152u);
  BOOST_TEST(t.bos_id() == 1);
  BOOST_TEST(t.eos_id() == 2);
  BOOST_TEST(t.pad_id() == 2);
  BOOST_TEST(t.pre_tokenizer_name() == "smollm");
  BOOST_TEST((t.pre_tokenizer() == bp::bpe_pre_tokenizer::digits_gpt2));
  BOOST_TEST(t.merge_count() > 48000u);
  BOOST_TEST(t.special_id("<|endoftext|>").value_or(-1) == 0);
  BOOST_TEST(t.special_id("<|im_start|>").value_or(-1) == 1);
  BOOST_TEST(t.special_id("<|im_end|>").value_or(-1) == 2);
  BOOST_TEST(t.special_id("<empty_output>").value_or(-1) == 16);
  for (bp::token_id id = 0; id < 17; ++id) BOOST_TEST(t.is_special(id), id);
  BOOST_TEST(!t.is_special(17));
  BOOST_TEST(t.token_text(2) == "<|im_end|>");
}

BOOST_AUTO_TEST_CASE(reference_ids, *utf::precondition(smollm2_present)) {
  const auto& t = smollm2();
  std::ifstream in(reference_path());
  const auto ref = nlohmann::json::parse(in);
  BOOST_TEST(ref.at("system").get<std::string>() == bp::bpe_tokenizer::default_system_prompt);
  const auto& cases = ref.at("cases");
  std::vector<std::string> prompts;
  for (const char* name : {"copa.txt", "sharegpt_60.txt"}) {
    const auto lines = read_lines(prompts_folder() / name);
    prompts.insert(prompts.end(), lines.begin(), lines.end());
  }
  BOOST_TEST_REQUIRE(prompts.size() == 160u);
  BOOST_TEST_REQUIRE(cases.size() == prompts.size());
  std::size_t matched = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& c = cases[i];
    BOOST_TEST_REQUIRE(c.at("text").get<std::string>() == prompts[i], "reference case " << i << " is another prompt");
    const auto raw = t.encode(prompts[i]);
    const auto chat = t.encode_chat(prompts[i]);
    const bool raw_ok = raw == c.at("ids").get<ids>();
    const bool chat_ok = chat == c.at("chat_ids").get<ids>();
    BOOST_TEST(raw_ok, "raw ids of prompt " << i << " (" << c.at("source").get<std::string>() << ")");
    BOOST_TEST(chat_ok, "chat ids of prompt " << i << " (" << c.at("source").get<std::string>() << ")");
    matched += raw_ok + chat_ok;
    BOOST_TEST(t.decode(raw) == prompts[i], "round trip of prompt " << i);
    BOOST_TEST(t.decode(chat) == bp::bpe_tokenizer::apply_chat_template(prompts[i]));
  }
  BOOST_TEST_MESSAGE(matched << " of " << 2 * prompts.size() << " reference cases match");
  BOOST_TEST(matched == 2 * prompts.size());
}

BOOST_AUTO_TEST_CASE(chat_template) {
  BOOST_TEST(bp::bpe_tokenizer::apply_chat_template("Hi") ==
             "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  BOOST_TEST(bp::bpe_tokenizer::apply_chat_template("Hi", "Be brief.") ==
             "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

BOOST_AUTO_TEST_CASE(special_tokens_are_atomic, *utf::precondition(smollm2_present)) {
  const auto& t = smollm2();
  BOOST_TEST(t.encode("<|im_start|>") == ids{1});
  BOOST_TEST(t.encode("<|im_end|><|im_end|>") == (ids{2, 2}));
  const auto around = t.encode("a<|im_end|>b");
  BOOST_TEST_REQUIRE(around.size() == 3u);
  BOOST_TEST(around[1] == 2);
  BOOST_TEST(around[0] == t.encode("a").front());
  BOOST_TEST(around[2] == t.encode("b").front());
  // A broken special token is ordinary text.
  const auto broken = t.encode("<|im_end");
  BOOST_TEST((std::ranges::find(broken, 2) == broken.end()));
  BOOST_TEST(t.decode(broken) == "<|im_end");
  // Text next to special tokens keeps its spaces.
  BOOST_TEST(round_trip(" <|im_start|> user\n<empty_output>  x ") == " <|im_start|> user\n<empty_output>  x ");
}

BOOST_AUTO_TEST_CASE(hand_cases, *utf::precondition(smollm2_present) * utf::label("short_real")) {
  const auto& t = smollm2();
  BOOST_TEST(t.encode("").empty());
  BOOST_TEST(t.decode(ids{}).empty());
  // Digits are split one by one, and a space before a digit stays a word of its own.
  BOOST_TEST(t.pre_tokenize("abc 2024x") == (std::vector<std::string>{"abc", " ", "2", "0", "2", "4", "x"}));
  BOOST_TEST(t.encode("2024").size() == 4u);
  BOOST_TEST(t.encode("12") == (ids{t.encode("1")[0], t.encode("2")[0]}));
  // GPT-2 regex: contractions, the space kept for the next word, whitespace runs, newlines.
  BOOST_TEST(t.pre_tokenize("I'm here  now\n\n ok!?") ==
             (std::vector<std::string>{"I", "'m", " here", " ", " now", "\n\n", " ok", "!?"}));
  BOOST_TEST(t.pre_tokenize("a \t\nb") == (std::vector<std::string>{"a", " \t", "\n", "b"}));
  BOOST_TEST(t.pre_tokenize("end   ") == (std::vector<std::string>{"end", "   "}));
  BOOST_TEST(t.pre_tokenize("x 's 'S") == (std::vector<std::string>{"x", " '", "s", " '", "S"}));
  BOOST_TEST(t.encode(" ") == ids{t.encode(" ")});
  // Unicode: letters of other scripts are letters; byte-level BPE covers every byte.
  BOOST_TEST(t.pre_tokenize("naïve café") == (std::vector<std::string>{"naïve", " café"}));
  BOOST_TEST(t.pre_tokenize("日本語、テスト") == (std::vector<std::string>{"日本語", "、", "テスト"}));
  BOOST_TEST(t.pre_tokenize("x٣y") == (std::vector<std::string>{"x", "٣", "y"}));  // Arabic-Indic digit
  for (const std::string s : {"hello world", "  leading and trailing  ", "tabs\tand\r\nnewlines\n",
                              "emoji 😀👍🏽 and ünïcödé — “quotes”", "numbers 3.14159 and 1,000,000", "bytes \x80\xbf",
                              "line\u2028separator", "<|im_start|>", "<|endoftext|>x"})
    BOOST_TEST(round_trip(s) == s);
  // Bytes without a token are dropped, as `tokenizers` does ("\x04a" gives [81] there, as "a" does).
  BOOST_TEST(t.dropped_bytes().size() == 21u);
  BOOST_TEST(t.encode("\x04" "a\xff") == t.encode("a"));
  // Well-known ids of SmolLM2 (GPT-2-style vocabulary): "\n" is Ċ (198).
  BOOST_TEST(t.encode("\n") == ids{198});
  BOOST_TEST(t.token_text(198) == "Ċ");
}

// A vocabulary built in memory (test/support/gguf_writer.hpp, also the fuzzing target's): merges by
// rank, special tokens, and every byte round-tripping; runs without the model file.
BOOST_AUTO_TEST_CASE(tiny_vocabulary) {
  blockpilot::testing::gguf_writer w;
  blockpilot::testing::add_tiny_tokenizer(w);
  const auto file = w.serialize();
  const auto t = bp::bpe_tokenizer::from_gguf(bp::io::gguf_file::parse(file, "tiny"));
  const auto id = [&](const std::string& text) {
    for (std::size_t i = 0; i < t.vocab_size(); ++i)
      if (t.token_text(static_cast<bp::token_id>(i)) == text) return static_cast<bp::token_id>(i);
    BOOST_FAIL("no token " << text);
    return bp::token_id{-1};
  };
  BOOST_TEST(t.dropped_bytes().empty());
  BOOST_TEST(t.merge_count() == 14u);
  BOOST_TEST(t.encode(" the") == ids{id("Ġthe")});
  BOOST_TEST(t.encode("reading and") == (ids{id("re"), id("a"), id("d"), id("ing"), id("Ġand")}));
  BOOST_TEST(t.encode("<|im_end|>x") == (ids{2, id("x")}));
  BOOST_TEST(t.eos_id() == 2);
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  for (const std::string& text : {every_byte, std::string("<|im_start|>user\n12 345  \n\n<|im_end"), std::string()}) {
    BOOST_TEST(t.decode(t.encode(text)) == text);
    BOOST_TEST(t.decode(t.encode_chat(text)) == bp::bpe_tokenizer::apply_chat_template(text));
  }
}

BOOST_AUTO_TEST_CASE(configuration_errors) {
  // A GGUF without tokenizer metadata names the file and the field.
  const fs::path path = fs::temp_directory_path() / "blockpilot_test_tokenizer_empty.gguf";
  {
    std::ofstream out(path, std::ios::binary);
    const unsigned char header[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
  }
  try {
    (void)bp::bpe_tokenizer::from_gguf(bp::io::gguf_file::open(path));
    BOOST_ERROR("expected blockpilot::error");
  } catch (const bp::error& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find(path.string()) != std::string::npos, what);
    BOOST_TEST(what.find("tokenizer.ggml.model") != std::string::npos, what);
  }
  fs::remove(path);
}
