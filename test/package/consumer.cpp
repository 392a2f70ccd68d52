// The smallest engine-side use of the installed library, built by test/package.sh through each way an
// engine finds it (pkg-config, CMake, Meson subproject): the umbrella header, C++20 and Eigen through
// the package's own requirements; an engine's own models decoded one request at a time and as a batch.
#include <blockpilot/blockpilot.hpp>

#include <cstdio>
#include <vector>

namespace {
constexpr std::int64_t vocab = 8;

/// A target whose next token is always (last + 1) mod vocab.
struct counting_target {
  std::vector<float> rows;
  std::int64_t vocab_size() const { return vocab; }
  blockpilot::status fill(std::span<const blockpilot::token_id> tokens, blockpilot::matrix_view<const float>& logits) {
    rows.assign(tokens.size() * vocab, 0.0f);
    for (std::size_t j = 0; j < tokens.size(); ++j) rows[static_cast<std::size_t>(static_cast<std::int64_t>(j) * vocab + (tokens[j] + 1) % vocab)] = 1.0f;
    logits = {rows.data(), static_cast<std::int64_t>(tokens.size()), vocab};
    return blockpilot::status::success;
  }
  blockpilot::status prefill(std::span<const blockpilot::token_id> p, blockpilot::matrix_view<const float>& l) {
    return fill(p.last(1), l);
  }
  blockpilot::status score(std::span<const blockpilot::token_id> b, blockpilot::matrix_view<const float>& l) { return fill(b, l); }
  blockpilot::status commit(int) { return blockpilot::status::success; }
};

/// Drafts the same rule: every draft is accepted.
struct counting_drafter {
  std::vector<float> sure = std::vector<float>(15, 1.0f);
  std::int64_t vocab_size() const { return vocab; }
  std::span<const float> draft_confidence() const { return sure; }
  int max_draft_rows() const { return 15; }
  blockpilot::status begin(std::span<const blockpilot::token_id>) { return blockpilot::status::success; }
  blockpilot::status commit(int) { return blockpilot::status::success; }
  blockpilot::status draft(const blockpilot::draft_request& r, std::span<blockpilot::token_id> out) {
    blockpilot::token_id t = r.context.back();
    for (int j = 0; j + 1 < r.block_size; ++j) out[static_cast<std::size_t>(j)] = t = (t + 1) % vocab;
    return blockpilot::status::success;
  }
};
}  // namespace

static_assert(blockpilot::block_size_policy<blockpilot::blockpilot_policy<blockpilot::compact_features>>);

int main() {
  const std::vector<blockpilot::token_id> prompt = {3};
  blockpilot::generation_config config;
  config.max_new_tokens = 20;
  counting_drafter drafter;
  counting_target target;
  blockpilot::speculative_decoder<counting_drafter, counting_target, blockpilot::fixed_block_size<16>> decoder(drafter, target);
  blockpilot::generation_result one;
  const bool alone_ok = decoder.generate(prompt, config, one) == blockpilot::status::success && one.tokens.size() == 20 &&
                        one.tokens[19] == (3 + 20) % vocab && one.stats.steps == 2;

  blockpilot::batched_decoder<counting_drafter, counting_target, blockpilot::runtime_block_size> batch;
  counting_drafter drafters[2];
  counting_target targets[2];
  batch.add(drafters[0], targets[0], prompt, config, {4});
  batch.add(drafters[1], targets[1], prompt, config, {8});
  batch.run();
  bool batch_ok = true;
  for (const auto& f : batch.take_finished()) batch_ok = batch_ok && f.result.tokens == one.tokens;
  // The per-step speed cut-off (its step-cost fit is on Eigen) and the compact features.
  blockpilot::speculative_decoder<counting_drafter, counting_target, blockpilot::speed_cutoff> cut(
      drafter, target, blockpilot::speed_cutoff(blockpilot::step_cost_model::linear(16, 0.05)));
  blockpilot::generation_result cut_result;
  const bool cut_ok = cut.generate(prompt, config, cut_result) == blockpilot::status::success && cut_result.tokens == one.tokens;
  const blockpilot::compact_features features{4, 1.0f};
  std::vector<float> row(vocab, 0.0f), workspace(features.workspace_size(vocab)), out(static_cast<std::size_t>(features.feature_count(vocab)));
  row[2] = 1.0f;
  const bool features_ok = features.extract(row, workspace, out) == blockpilot::status::success;
  std::printf("%s\n", alone_ok && batch_ok && cut_ok && features_ok ? "success" : "wrong tokens");
  return 0;
}
