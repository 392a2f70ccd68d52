// An engine loop with continuous batching: requests arrive over time, join the batch between steps,
// stream their tokens, and leave when they finish — each with its own block size and seed, all
// verified with one batched target call per step. A client disconnects mid-request (cancellation).
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <stop_token>

#include "blockpilot/engine/batched_decoder.hpp"
#include "blockpilot_workbench/models/synthetic.hpp"
#include "blockpilot/policy/fixed.hpp"

using namespace blockpilot;

namespace {

/// The engine's target: one sequence of a shared model per request. `score_batch` is where an engine
/// runs its single forward pass over the blocks of all requests (here the synthetic model, row by row).
class sequence : public synthetic_target {
 public:
  using synthetic_target::synthetic_target;
  static status score_batch(std::span<sequence* const> sequences, std::span<const std::span<const token_id>> blocks,
                            std::span<matrix_view<const float>> logits) {
    for (std::size_t i = 0; i < sequences.size(); ++i)
      if (const status s = sequences[i]->score(blocks[i], logits[i]); s != status::success) return s;
    return status::success;
  }
};

/// What the engine keeps per request: the models' per-request state and the client's cancel switch.
struct session {
  session(const synthetic_world& w, int id) : drafter(w), target(w), client(id) {}
  synthetic_drafter drafter;
  sequence target;
  int client;
  std::stop_source disconnect;
  std::size_t streamed = 0;
};

}  // namespace

int main() {
  synthetic_params params;
  params.vocab = 512;
  const synthetic_world world(params);
  const auto prompts = synthetic_prompts(12, params.vocab, 4, 40, 2024);

  // Arrivals: (step, client); short and long requests, block sizes chosen per request.
  std::deque<std::pair<int, int>> arrivals = {{0, 0}, {0, 1}, {1, 2}, {3, 3}, {3, 4}, {6, 5},
                                              {10, 6}, {11, 7}, {15, 8}, {20, 9}, {21, 10}, {30, 11}};
  const int block_sizes[] = {16, 8, 4, 16, 2, 12, 16, 6, 10, 16, 3, 8};
  const int lengths[] = {120, 40, 200, 64, 90, 30, 150, 60, 80, 40, 100, 50};
  const int disconnecting_client = 6, disconnect_after = 25;

  batched_decoder<synthetic_drafter, sequence, runtime_block_size, rejection_sampling> batch;
  std::map<request_id, std::unique_ptr<session>> sessions;
  std::printf("step  active  joined  left\n");
  for (int step = 0; !arrivals.empty() || !batch.empty(); ++step) {
    int joined = 0;
    while (!arrivals.empty() && arrivals.front().first <= step) {
      const int client = arrivals.front().second;
      arrivals.pop_front();
      auto s = std::make_unique<session>(world, client);
      generation_config config;
      config.max_new_tokens = lengths[client];
      config.temperature = 1.0f;
      config.seed = 1000 + static_cast<std::uint64_t>(client);
      config.cancel = s->disconnect.get_token();
      session* raw = s.get();
      config.on_tokens = [raw, &disconnect_after](std::span<const token_id> piece) {
        raw->streamed += piece.size();  // an engine would detokenize and send the piece here
        if (raw->client == disconnecting_client && raw->streamed >= static_cast<std::size_t>(disconnect_after))
          raw->disconnect.request_stop();
      };
      const request_id id = batch.add(raw->drafter, raw->target, prompts[static_cast<std::size_t>(client)],
                                      std::move(config), runtime_block_size{block_sizes[client]});
      sessions.emplace(id, std::move(s));
      ++joined;
    }
    const std::size_t before = batch.active();
    if (!batch.empty()) batch.step();
    int left = 0;
    for (auto& done : batch.take_finished()) {
      const session& s = *sessions.at(done.id);
      const request_stats& st = done.result.stats;
      const char* how = done.result.error == status::success     ? "finished"
                        : done.result.error == status::cancelled ? "cancelled (the client left)"
                                                                 : "failed";
      std::printf("        client %2d left: %3zu tokens, b = %2d, tau %.2f, %s\n", s.client, done.result.tokens.size(),
                  st.block_size, st.tau(), how);
      sessions.erase(done.id);
      ++left;
    }
    if (joined > 0 || left > 0) std::printf("%4d  %6zu  %6d  %4d\n", step, before, joined, left);
  }
  return 0;
}
