// The weight products of one instruction-set variant; included by weight_products.hpp inside the
// variant's namespace and target region, after its primitives:
//   vec, lanes (floats per vec), max_group (input rows sharing one pass over the weights),
//   weight_rows_per_pass (weight rows decoded together, each x vector loaded serving all of them),
//   max_accumulators (accumulator vectors one tile may keep in registers),
//   load(const float*), splat(float) (in every lane), fmadd(a, b, c) = a b + c, zero(), hsum(vec),
//   decode_q4_0 / decode_q4_1 / decode_q8_0(const std::byte* block, vec w[32 / lanes]):
//     the block's 32 weights as floats, element j in w[j / lanes] lane j % lanes.
// A weight row is read block by block (32 weights) and each block, decoded once into registers, is
// multiplied with up to max_group input rows held in cache: one pass over the weights serves every row.

constexpr int per_block = 32 / lanes;

inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

/// fp32 rows: a "block" is 32 floats.
struct f32_format {
  static constexpr std::size_t block_bytes = 128;
  static void decode(const std::byte* b, vec* w) {
    const auto* f = reinterpret_cast<const float*>(b);
#pragma GCC unroll 8
    for (int p = 0; p < per_block; ++p) w[p] = load(f + p * lanes);
  }
};
struct q4_0_format {
  static constexpr std::size_t block_bytes = 18;
  static void decode(const std::byte* b, vec* w) { decode_q4_0(b, w); }
};
struct q4_1_format {
  static constexpr std::size_t block_bytes = 20;
  static void decode(const std::byte* b, vec* w) { decode_q4_1(b, w); }
};
struct q8_0_format {
  static constexpr std::size_t block_bytes = 34;
  static void decode(const std::byte* b, vec* w) { decode_q8_0(b, w); }
};

/// Asks the cache (L2) for the block at p, the same block of the rows four passes on: the weights stream
/// from memory while the passes before compute. A prefetch past the matrix is harmless.
template <class Format>
[[gnu::always_inline]] inline void prefetch(const std::byte* p) {
#pragma GCC unroll 2
  for (std::size_t line = 0; line < Format::block_bytes; line += 64) __builtin_prefetch(p + line, 0, 2);
}

/// out[o][i] = Σ_k W[o][k] x[i ldx + k] for O weight rows (row o at row + o row_bytes) and R input
/// rows, over `blocks` blocks. Each (o, i) keeps C accumulators (chains of FMAs), so that few rows are
/// not bound by the latency of one chain; each x vector loaded once serves the O weight rows.
template <class Format, int O, int R, int C>
[[gnu::always_inline]] inline void dot_tile(const std::byte* row, std::size_t row_bytes, std::int64_t blocks,
                                            const float* x, std::ptrdiff_t ldx, float (*out)[max_group]) {
  vec acc[O][R][C];
#pragma GCC unroll 4
  for (int o = 0; o < O; ++o)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[o][i][c] = zero();
  for (std::int64_t k = 0; k < blocks; ++k) {
    vec w[O][per_block];
#pragma GCC unroll 4
    for (int o = 0; o < O; ++o)
      prefetch<Format>(row + (4 * O + o) * row_bytes + static_cast<std::size_t>(k) * Format::block_bytes);
#pragma GCC unroll 4
    for (int o = 0; o < O; ++o)
      Format::decode(row + o * row_bytes + static_cast<std::size_t>(k) * Format::block_bytes, w[o]);
    const float* xk = x + 32 * k;
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int p = 0; p < per_block; ++p) {
        const vec xv = load(xk + i * ldx + p * lanes);
#pragma GCC unroll 4
        for (int o = 0; o < O; ++o) acc[o][i][p % C] = fmadd(w[o][p], xv, acc[o][i][p % C]);
      }
  }
#pragma GCC unroll 4
  for (int o = 0; o < O; ++o)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      vec s = acc[o][i][0];
#pragma GCC unroll 4
      for (int c = 1; c < C; ++c) s += acc[o][i][c];
      out[o][i] = hsum(s);
    }
}

/// FMA chains per (weight row, input row): the same for every number of input rows, so that an input row's
/// sums are the same bits whichever rows share its pass (a verifier's row scored in a block equals it
/// scored alone).
constexpr int chains = per_block < 2 ? per_block : 2;

/// dot_tile for r (1..max_group) input rows, r chosen at run time. The O weight rows go one at a time
/// where O · r · chains accumulators would not fit max_accumulators (a weight row's sums do not depend on
/// the rows decoded with it).
template <class Format, int O, int... R>
inline void dot_rows(int r, const std::byte* row, std::size_t row_bytes, std::int64_t blocks, const float* x,
                     std::ptrdiff_t ldx, float (*out)[max_group], std::integer_sequence<int, R...>) {
  const auto tile = [&]<int Rows>() {
    if constexpr (O * Rows * chains <= max_accumulators)
      dot_tile<Format, O, Rows, chains>(row, row_bytes, blocks, x, ldx, out);
    else
      for (int o = 0; o < O; ++o) dot_tile<Format, 1, Rows, chains>(row + o * row_bytes, row_bytes, blocks, x, ldx, out + o);
  };
  (void)((r == R + 1 ? (tile.template operator()<R + 1>(), true) : false) || ...);
}

template <class Format>
void multiply_format(const weight_rows_view& w, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t first,
                     std::int64_t count, float* y, std::ptrdiff_t ldy, bool accumulate) {
  const std::int64_t blocks = w.cols / 32;
  constexpr auto groups = std::make_integer_sequence<int, max_group>{};
  float out[weight_rows_per_pass][max_group];
  const auto store = [&](std::int64_t o, int i0, int r, const float* v) {
    for (int i = 0; i < r; ++i) {
      float& t = y[(i0 + i) * ldy + o];
      t = accumulate ? t + v[i] : v[i];
    }
  };
  std::int64_t o = first;
  for (; o + weight_rows_per_pass <= first + count; o += weight_rows_per_pass) {
    const std::byte* row = w.data + static_cast<std::size_t>(o) * w.row_bytes;
    for (int i0 = 0; i0 < rows; i0 += max_group) {
      const int r = std::min(max_group, rows - i0);
      dot_rows<Format, weight_rows_per_pass>(r, row, w.row_bytes, blocks, x + i0 * ldx, ldx, out, groups);
      for (int j = 0; j < weight_rows_per_pass; ++j) store(o + j, i0, r, out[j]);
    }
  }
  for (; o < first + count; ++o) {
    const std::byte* row = w.data + static_cast<std::size_t>(o) * w.row_bytes;
    for (int i0 = 0; i0 < rows; i0 += max_group) {
      const int r = std::min(max_group, rows - i0);
      dot_rows<Format, 1>(r, row, w.row_bytes, blocks, x + i0 * ldx, ldx, out, groups);
      store(o, i0, r, out[0]);
    }
  }
}

inline void multiply(const weight_rows_view& w, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t first,
                     std::int64_t count, float* y, std::ptrdiff_t ldy, bool accumulate) {
  switch (w.type) {
    case io::ggml_type::f32: return multiply_format<f32_format>(w, x, ldx, rows, first, count, y, ldy, accumulate);
    case io::ggml_type::q4_0: return multiply_format<q4_0_format>(w, x, ldx, rows, first, count, y, ldy, accumulate);
    case io::ggml_type::q4_1: return multiply_format<q4_1_format>(w, x, ldx, rows, first, count, y, ldy, accumulate);
    default: return multiply_format<q8_0_format>(w, x, ldx, rows, first, count, y, ldy, accumulate);
  }
}
