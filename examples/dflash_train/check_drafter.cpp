// Checks a trained drafter with the library's own loader and decode loop: loads FOLDER (config.json +
// model.safetensors) with blockpilot::dflash_model, and with the target GGUF present decodes a few chat
// prompts greedily with the DFlash drafter at each block size b given, checking that the output equals
// plain greedy decoding (lossless) and printing tau; with --min-tau X it also fails when the mean tau at
// some b is below X (a trained drafter must draft something the target accepts).
//
//   build/examples/dflash_check_drafter FOLDER [GGUF] [--min-tau X] [b ...]   (GGUF: the SmolLM2 file; b: 4 8 16)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "blockpilot/blockpilot.hpp"
#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot_workbench/models/bpe_tokenizer.hpp"
#include "blockpilot_workbench/models/dflash_drafter.hpp"
#include "blockpilot_workbench/models/llama.hpp"

namespace bp = blockpilot;

namespace {

/// Plain greedy decoding, one token per score call, ending after a stop token.
std::vector<bp::token_id> plain_greedy(bp::llama_verifier& v, std::span<const bp::token_id> prompt, int max_new,
                                       bp::token_id stop) {
  bp::matrix_view<const float> logits;
  bp::token_id t = 0;
  if (v.prefill(prompt, logits) != bp::status::success || bp::cpu_detail::argmax_row(logits.row(0), t) != bp::status::success)
    throw bp::error("plain decoding: prefill failed");
  std::vector<bp::token_id> out = {t};
  while (static_cast<int>(out.size()) < max_new && out.back() != stop) {
    if (v.score(std::span(out).last(1), logits) != bp::status::success || v.commit(1) != bp::status::success ||
        bp::cpu_detail::argmax_row(logits.row(0), t) != bp::status::success)
      throw bp::error("plain decoding: a step failed");
    out.push_back(t);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FOLDER [GGUF] [--min-tau X] [b ...]\n", argv[0]);
    return 2;
  }
  const auto draft = bp::dflash_model::load(argv[1]);
  const auto& c = draft.config();
  std::printf("loaded %s: %d layers, hidden %d, block_size %d, mask token %d, target layers [", argv[1], c.layers,
              c.hidden, c.block_size, static_cast<int>(c.mask_token));
  for (std::size_t i = 0; i < c.target_layer_ids.size(); ++i) std::printf("%s%d", i ? ", " : "", c.target_layer_ids[i]);
  std::printf("]\n");
  if (argc < 3) {
    std::printf("no target GGUF given: load check only\n");
    return 0;
  }
  if (!std::filesystem::is_regular_file(argv[2])) {
    std::fprintf(stderr, "%s: no such file (the target's GGUF: scripts/fetch-smollm2.sh)\n", argv[2]);
    return 2;
  }
  std::vector<int> sizes;
  double min_tau = 0.0;
  for (int i = 3; i < argc; ++i) {
    if (std::string(argv[i]) == "--min-tau" && i + 1 < argc) {
      min_tau = std::atof(argv[++i]);
    } else {
      sizes.push_back(std::atoi(argv[i]));
      if (sizes.back() < 1 || sizes.back() > 64) throw bp::error(std::string("block size '") + argv[i] + "' is not in [1, 64]");
    }
  }
  if (sizes.empty()) sizes = {4, 8, 16};

  const auto file = bp::io::gguf_file::open(argv[2]);
  const auto tokenizer = bp::bpe_tokenizer::from_gguf(file);
  const auto target_model = bp::llama_model::load(file);
  bp::llama_verifier_options vo;
  vo.max_positions = 1024;
  vo.max_block = 64;
  vo.feature_layers = c.target_layer_ids;
  bp::llama_verifier target(target_model, vo);
  bp::llama_verifier_options plain_options = vo;
  plain_options.feature_layers = {};
  bp::llama_verifier plain(target_model, plain_options);
  bp::dflash_options dopt;
  dopt.max_positions = 1024;
  dopt.max_draft_rows = 63;
  dopt.threads = 1;
  bp::dflash_drafter drafter(draft, target_model, dopt);

  const char* const messages[] = {"Write a short poem about the sea.", "What is the capital of France?",
                                  "Explain what a Python list comprehension is."};
  bp::generation_config gc;
  gc.max_new_tokens = 64;
  gc.stop_tokens = {tokenizer.eos_id()};
  bool lossless = true, enough = true;
  for (int b : sizes) {
    bp::speculative_decoder<bp::dflash_drafter, bp::llama_verifier, bp::runtime_block_size> decoder(
        drafter, target, bp::runtime_block_size{b});
    double sum = 0;
    for (const char* m : messages) {
      const auto prompt = tokenizer.encode_chat(m);
      bp::generation_result r;
      if (decoder.generate(prompt, gc, r) != bp::status::success) throw bp::error("decode failed at b = " + std::to_string(b));
      lossless = lossless && r.tokens == plain_greedy(plain, prompt, gc.max_new_tokens, tokenizer.eos_id());
      sum += r.stats.tau();
    }
    const double tau = sum / static_cast<double>(std::size(messages));
    std::printf("b = %2d: mean tau %.3f over %zu prompts%s\n", b, tau, std::size(messages),
                b > 1 && tau < min_tau ? " (below --min-tau)" : "");
    enough = enough && (b == 1 || tau >= min_tau);
  }
  std::printf("greedy output equals plain greedy decoding: %s\n", lossless ? "yes" : "NO");
  return lossless && enough ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
