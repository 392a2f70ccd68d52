// Plugging an engine's own models into the decoder: a verifier and a drafter are plain classes
// that model the concepts; nothing to inherit, nothing to register.
#include <cstdio>
#include <vector>

#include "blockpilot/blockpilot.hpp"

using namespace blockpilot;

/// A toy target: the next token after t is (3t + 1) mod V, with logits peaked there.
struct my_verifier {
  std::int64_t vocab = 64;
  std::vector<float> rows;
  std::int64_t vocab_size() const { return vocab; }
  status prefill(std::span<const token_id> prompt, matrix_view<const float>& logits) {
    return score(prompt.last(1), logits);  // a real engine runs its forward pass and keeps the KV cache
  }
  status score(std::span<const token_id> block, matrix_view<const float>& logits) {
    rows.assign(block.size() * vocab, 0.0f);
    for (std::size_t j = 0; j < block.size(); ++j) rows[j * vocab + (3 * block[j] + 1) % vocab] = 5.0f;
    logits = {rows.data(), static_cast<std::int64_t>(block.size()), vocab};
    return status::success;
  }
  status commit(int) { return status::success; }  // crop the KV cache to the accepted prefix
};

/// A toy drafter that guesses the same rule but is wrong after every 5th position.
struct my_drafter {
  std::int64_t vocab_size() const { return 64; }
  int max_draft_rows() const { return 31; }
  status begin(std::span<const token_id>) { return status::success; }
  status draft(const draft_request& r, std::span<token_id> out) {
    token_id t = r.context.back();
    for (int j = 0; j + 1 < r.block_size; ++j) out[j] = t = (3 * t + 1 + (j % 5 == 4)) % 64;
    return status::success;
  }
  status commit(int) { return status::success; }
};

int main() {
  my_drafter drafter;
  my_verifier verifier;
  // DFlash's fixed block size; swap fixed_block_size<16> for another policy type to change policy.
  speculative_decoder<my_drafter, my_verifier, fixed_block_size<16>> decoder(drafter, verifier);
  generation_config config;
  config.max_new_tokens = 40;
  generation_result result;
  const std::vector<token_id> prompt = {7, 11, 13};
  if (decoder.generate(prompt, config, result) != status::success) {
    std::printf("failed in %s: %s\n", result.failed_stage.data(), to_string(result.error).data());
    return 1;
  }
  std::printf("%zu tokens in %lld target calls, tau %.2f\n", result.tokens.size(),
              static_cast<long long>(result.stats.target_calls()), result.stats.tau());
}
