// Attention of a head's query rows over the KV cache, in two products around the softmax (which the
// caller computes on each score row): scores against keys stored in blocks of 64 positions, each block
// transposed (dimension by dimension, its 64 positions contiguous), then the probability-weighted sum of
// the values (position by position). Each key or value vector loaded serves a tile of queries
// (the rows of a scored block), and each result is one FMA chain in a fixed order, so that a row's
// result is the same whichever rows share its pass (attention.inl). Compiled for generic / AVX2 /
// AVX-512 in target regions and chosen at run time, as the weight products are.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "blockpilot/status.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"

namespace blockpilot::cpu_kernels {

constexpr int attention_block = 64;  ///< positions of a block of keys

/// s[j][t] = scale Σ_dd q[j][dd] k[t][dd] for j < queries and t below `total` rounded up to the variant's
/// vector (at most 16 positions; the keys' blocks and the score rows hold `attention_columns(total)`).
struct attention_scores_args {
  const float* q = nullptr;     ///< query j at q + j ldq, head_dim floats
  std::ptrdiff_t ldq = 0;
  int queries = 0;
  int head_dim = 0;             ///< a multiple of 16
  const float* keys = nullptr;  ///< key element (t, dd) at keys + (t / 64) ldb + 64 dd + t % 64
  std::ptrdiff_t ldb = 0;
  std::int64_t total = 0;         ///< positions scored
  float scale = 1.0f;
  float* scores = nullptr;        ///< score (j, t) at scores + j lds + t
  std::ptrdiff_t lds = 0;
};

/// o[j][dd] = Σ_{t < visible[j]} p[j][t] v[t][dd] for j < queries, positions in order.
struct attention_output_args {
  const float* probabilities = nullptr;  ///< p (j, t) at probabilities + j ldp + t
  std::ptrdiff_t ldp = 0;
  const std::int64_t* visible = nullptr;  ///< positions query j sees
  int queries = 0;
  int head_dim = 0;                        ///< a multiple of 16
  const float* values = nullptr;           ///< value element (t, dd) at values + t ldv + dd
  std::ptrdiff_t ldv = 0;
  float* out = nullptr;                    ///< output (j, dd) at out + j ldo + dd
  std::ptrdiff_t ldo = 0;
};

/// Positions the score passes cover for `total` (the keys' blocks and score rows must hold this many).
[[nodiscard]] constexpr std::int64_t attention_columns(std::int64_t total) {
  return (total + attention_block - 1) / attention_block * attention_block;
}

/// Whether the kernels take heads of `head_dim` dimensions.
[[nodiscard]] constexpr bool attention_supports(int head_dim) { return head_dim > 0 && head_dim % 16 == 0; }

#define BLOCKPILOT_VARIANT_KERNELS "blockpilot_workbench/models/kernels/attention.inl"
#include "blockpilot_workbench/models/kernels/fp32_variants.inl"

namespace attention_detail {
inline void check(int head_dim) {
  if (!attention_supports(head_dim))
    throw error("attention: heads of " + std::to_string(head_dim) + " dimensions are not supported (a multiple of 16)");
}
}  // namespace attention_detail

/// The scores of `a`, with the kernels of `isa` (`best`: the detected one).
inline void attention_scores(cpu_isa isa, const attention_scores_args& a) {
  attention_detail::check(a.head_dim);
  if (isa == cpu_isa::best) isa = detected_cpu_isa();
#if defined(BLOCKPILOT_X86_KERNELS)
  if (isa >= cpu_isa::avx512) return avx512::scores(a);
  if (isa == cpu_isa::avx2) return avx2::scores(a);
#endif
  (void)isa;
  generic::scores(a);
}

/// The outputs of `a`, with the kernels of `isa` (`best`: the detected one).
inline void attention_output(cpu_isa isa, const attention_output_args& a) {
  attention_detail::check(a.head_dim);
  if (isa == cpu_isa::best) isa = detected_cpu_isa();
#if defined(BLOCKPILOT_X86_KERNELS)
  if (isa >= cpu_isa::avx512) return avx512::output(a);
  if (isa == cpu_isa::avx2) return avx2::output(a);
#endif
  (void)isa;
  generic::output(a);
}

}  // namespace blockpilot::cpu_kernels
