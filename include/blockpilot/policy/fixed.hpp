// Fixed block-size policies: the DFlash default (a compile-time size) and a size chosen at run time.
#pragma once

#include "blockpilot/concepts.hpp"

namespace blockpilot {

/// Always `B` (DFlash drafts with its training size, B = 16).
template <int B>
struct fixed_block_size {
  static_assert(B >= 1, "fixed_block_size<B> needs B >= 1 (B = 1 is plain autoregressive decoding)");
  using logits_backend = void;  ///< reads no logits: runs on every backend
  [[nodiscard]] static constexpr int max_block_size() { return B; }
  [[nodiscard]] static constexpr block_size_choice choose(const request_features&) { return {B, false}; }
};

/// Always the size given at construction; for sweeps and command-line choices.
struct runtime_block_size {
  using logits_backend = void;  ///< reads no logits: runs on every backend
  int size = 16;
  [[nodiscard]] int max_block_size() const { return size; }
  [[nodiscard]] block_size_choice choose(const request_features&) const { return {size, false}; }
};

}  // namespace blockpilot
