// The attention products of one instruction-set variant; included by attention.hpp inside the variant's
// namespace and target region, after weight_products.hpp's primitives (vec, lanes, load, store, splat,
// fmadd, zero, max_accumulators).
//
// Every score and every output element is one chain of FMAs in a fixed order, in its own vector lane
// (a score: over the head's dimensions; an output element: over the positions), so a query's results do
// not depend on the other queries, nor on the tile or lane that computes them: a row scored in a block
// is the same bits as the row scored alone. Each key or value vector loaded serves a tile of queries.

constexpr int attention_tile = max_accumulators / 4;  ///< queries sharing each key or value vector
constexpr int attention_vectors = 4;                  ///< vectors of positions (scores) or dimensions (outputs) per pass

/// s[j][t] = scale Σ_dd q[j][dd] k[t][dd] for Q queries and the C vectors of positions from t0, which
/// lie in one block of keys (contiguous, dimension by dimension).
template <int Q, int C>
[[gnu::always_inline]] inline void score_pass(const attention_scores_args& a, int j0, std::int64_t t0) {
  const float* keys = a.keys + (t0 / attention_block) * a.ldb + t0 % attention_block;
  vec acc[Q][C];
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[j][c] = zero();
  for (int dd = 0; dd < a.head_dim; ++dd) {
    const float* k = keys + dd * attention_block;
    vec kv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) kv[c] = load(k + c * lanes);
#pragma GCC unroll 4
    for (int j = 0; j < Q; ++j) {
      const vec x = splat(a.q[(j0 + j) * a.ldq + dd]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[j][c] = fmadd(x, kv[c], acc[j][c]);
    }
  }
  const vec scale = splat(a.scale);
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) store(a.scores + (j0 + j) * a.lds + t0 + c * lanes, acc[j][c] * scale);
}

/// The scores of Q queries at every position below `total` rounded up to a vector: whole passes of
/// `attention_vectors` vectors, then the vectors the last positions need.
template <int Q, int... C>
[[gnu::always_inline]] inline void score_tile(const attention_scores_args& a, int j0, std::integer_sequence<int, C...>) {
  constexpr int whole = attention_vectors * lanes;
  std::int64_t t0 = 0;
  for (; t0 + whole <= a.total; t0 += whole) score_pass<Q, attention_vectors>(a, j0, t0);
  const auto rest = static_cast<int>((a.total - t0 + lanes - 1) / lanes);
  (void)((rest == C + 1 ? (score_pass<Q, C + 1>(a, j0, t0), true) : false) || ...);
}

/// o[j][dd] = Σ_{t < visible[j]} p[j][t] v[t][dd], positions in order, for Q queries and the C vectors
/// of dimensions from d0: the positions all Q see go once for the tile, the rest query by query.
template <int Q, int C>
[[gnu::always_inline]] inline void output_tile(const attention_output_args& a, int j0, int d0) {
  std::int64_t common = a.visible[j0];
#pragma GCC unroll 4
  for (int j = 1; j < Q; ++j) common = std::min(common, a.visible[j0 + j]);
  vec acc[Q][C];
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[j][c] = zero();
  const auto step = [&](vec* sum, const float* p, std::int64_t t, const vec* v) {
    const vec x = splat(p[t]);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sum[c] = fmadd(x, v[c], sum[c]);
  };
  for (std::int64_t t = 0; t < common; ++t) {
    vec v[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) v[c] = load(a.values + t * a.ldv + d0 + c * lanes);
#pragma GCC unroll 4
    for (int j = 0; j < Q; ++j) step(acc[j], a.probabilities + (j0 + j) * a.ldp, t, v);
  }
#pragma GCC unroll 4
  for (int j = 0; j < Q; ++j) {
    for (std::int64_t t = common; t < a.visible[j0 + j]; ++t) {
      vec v[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) v[c] = load(a.values + t * a.ldv + d0 + c * lanes);
      step(acc[j], a.probabilities + (j0 + j) * a.ldp, t, v);
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) store(a.out + (j0 + j) * a.ldo + d0 + c * lanes, acc[j][c]);
  }
}

template <int... Q>
inline void scores(const attention_scores_args& a, std::integer_sequence<int, Q...>) {
  for (int j0 = 0; j0 < a.queries; j0 += attention_tile) {
    const int q = std::min(attention_tile, a.queries - j0);
    (void)((q == Q + 1 ? (score_tile<Q + 1>(a, j0, std::make_integer_sequence<int, attention_vectors>{}), true) : false) || ...);
  }
}

template <int... Q>
inline void output(const attention_output_args& a, std::integer_sequence<int, Q...>) {
  const bool wide = a.head_dim % (attention_vectors * lanes) == 0;
  for (int j0 = 0; j0 < a.queries; j0 += attention_tile) {
    const int q = std::min(attention_tile, a.queries - j0);
    if (wide)
      for (int d0 = 0; d0 < a.head_dim; d0 += attention_vectors * lanes)
        (void)((q == Q + 1 ? (output_tile<Q + 1, attention_vectors>(a, j0, d0), true) : false) || ...);
    else
      for (int d0 = 0; d0 < a.head_dim; d0 += lanes)
        (void)((q == Q + 1 ? (output_tile<Q + 1, 1>(a, j0, d0), true) : false) || ...);
  }
}

inline void scores(const attention_scores_args& a) { scores(a, std::make_integer_sequence<int, attention_tile>{}); }
inline void output(const attention_output_args& a) { output(a, std::make_integer_sequence<int, attention_tile>{}); }
