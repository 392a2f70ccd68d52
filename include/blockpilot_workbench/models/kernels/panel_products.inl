// The fp32 panel products of one instruction-set variant; included by panel_products.hpp inside the
// variant's namespace and target region, after weight_products.hpp's primitives.
//
// For each column k the panel's 16 weights are one or more vectors, multiplied with input row i's x[k]
// in every lane: each output (row o, input i) is one FMA chain over k in order, in o's lane, so an input
// row's result does not depend on the rows beside it. A tile keeps G groups × R input rows of
// accumulators in registers; each weight vector loaded serves the R rows.

constexpr int panel_vectors = panel_rows / lanes;                          ///< vectors of one column of a panel
constexpr int panel_groups = max_accumulators >= 16 ? 2 : 1;               ///< panels a tile reads together
constexpr int panel_tile_rows = max_accumulators / (panel_groups * panel_vectors);  ///< input rows of a tile

/// y rows i0..i0+R (+)= panels g..g+G of w times x, lanes [lo, hi) of the G·16 outputs stored. Asks
/// the cache for each panel's columns panel_prefetch(R) ahead, running on past the panel's end into the
/// panel G further on (the one in its place in the next tile), so that no panel starts unasked; or,
/// given `next` (the following panels, G of them), for their column k with column k of these.
template <int G, int R>
[[gnu::always_inline]] inline void panel_tile(const f32_panels& w, std::int64_t g, const float* x, std::ptrdiff_t ldx,
                                              int i0, float* y, std::ptrdiff_t ldy, bool accumulate, int lo, int hi,
                                              const float* next) {
  constexpr int V = panel_vectors;
  const std::int64_t cols = w.cols();
  const float* p[G];
#pragma GCC unroll 2
  for (int h = 0; h < G; ++h) p[h] = w.panel(g + h);
  vec acc[G][V][R];
#pragma GCC unroll 2
  for (int h = 0; h < G; ++h)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[h][v][i] = zero();
  for (std::int64_t k = 0; k < cols; ++k) {
    const std::int64_t ahead = k + panel_prefetch(R), column = ahead < cols ? ahead : ahead + (G - 1) * cols;
    vec wv[G][V];
#pragma GCC unroll 2
    for (int h = 0; h < G; ++h) {
      __builtin_prefetch(next != nullptr ? next + (h * cols + k) * panel_rows : p[h] + column * panel_rows, 0, 2);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        wv[h][v] = load(p[h] + k * panel_rows + v * lanes);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        asm("" : "+x"(wv[h][v]));  // in a register: loaded once for the R rows, not again by each FMA
#endif
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const vec xv = splat(x[(i0 + i) * ldx + k]);
#pragma GCC unroll 2
      for (int h = 0; h < G; ++h)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[h][v][i] = fmadd(wv[h][v], xv, acc[h][v][i]);
    }
  }
  float out[G * panel_rows];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int h = 0; h < G; ++h)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) store(out + h * panel_rows + v * lanes, acc[h][v][i]);
    float* row = y + (i0 + i) * ldy + g * panel_rows;
    for (int o = lo; o < hi; ++o) row[o] = accumulate ? row[o] + out[o] : out[o];
  }
}

template <int G, int... R>
inline void panel_dispatch(int r, const f32_panels& w, std::int64_t g, const float* x, std::ptrdiff_t ldx, int i0, float* y,
                           std::ptrdiff_t ldy, bool accumulate, int lo, int hi, const float* next,
                           std::integer_sequence<int, R...>) {
  (void)((r == R + 1 ? (panel_tile<G, R + 1>(w, g, x, ldx, i0, y, ldy, accumulate, lo, hi, next), true) : false) || ...);
}

inline void multiply_panels(const f32_panels& w, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t first,
                            std::int64_t count, float* y, std::ptrdiff_t ldy, bool accumulate) {
  constexpr auto tiles = std::make_integer_sequence<int, panel_tile_rows>{};
  const std::int64_t end = first + count;
  for (std::int64_t g = first / panel_rows; g * panel_rows < end;) {
    // G panels together where both lie inside [first, end); one otherwise
    const bool pair = panel_groups == 2 && (g + 2) * panel_rows <= end && g * panel_rows >= first;
    const int span = pair ? 2 : 1;
    const auto lo = static_cast<int>(std::max<std::int64_t>(first - g * panel_rows, 0));
    const auto hi = static_cast<int>(std::min<std::int64_t>(end - g * panel_rows, span * panel_rows));
    // With several passes over these panels, the last asks for the next ones, which then stream in
    // while it computes from the cache (the first pass's own prefetches cover only these panels).
    const bool next_exists = (g + span + panel_groups) * panel_rows <= end;
    for (int i0 = 0; i0 < rows; i0 += panel_tile_rows) {
      const int r = std::min(panel_tile_rows, rows - i0);
      const float* next = i0 > 0 && i0 + r == rows && next_exists ? w.panel(g + span) : nullptr;
      if (pair)
        panel_dispatch<panel_groups>(r, w, g, x, ldx, i0, y, ldy, accumulate, lo, hi, next, tiles);
      else
        panel_dispatch<1>(r, w, g, x, ldx, i0, y, ldy, accumulate, lo, hi, next, tiles);
    }
    g += span;
  }
}
