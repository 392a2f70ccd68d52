// The compact feature pass of one variant of the CPU row kernels (included by cpu/row_kernels.hpp
// after row_scans.inl): exp moments against a lazily moved reference and a filtered top-k, reading the
// row once. With BLOCKPILOT_AVX2_COMPRESS defined (the AVX2 variant), candidates are left-packed with
// AVX2 permutes.

static_assert(chunk % lanes == 0);

/// Sorts data[0, n) in descending order, using data[n, 2n) as scratch: an LSD radix sort (4 passes of
/// 8 bits) of the complemented order keys. Branch-free, where a comparison sort of fresh random values
/// mispredicts about every other comparison.
inline void sort_descending(float* data, std::size_t n) noexcept {
  const auto key = [](float v) { return ~order_key(std::bit_cast<std::uint32_t>(v)); };
  float* from = data;
  float* to = data + n;
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<std::uint32_t, 256> offset{};
    for (std::size_t i = 0; i < n; ++i) ++offset[(key(from[i]) >> shift) & 255u];
    std::uint32_t sum = 0;
    for (std::uint32_t& o : offset) sum += std::exchange(o, sum);
    for (std::size_t i = 0; i < n; ++i) to[offset[(key(from[i]) >> shift) & 255u]++] = from[i];
    std::swap(from, to);
  }
}

/// Values above the k-th best seen so far, in the caller's workspace. append() offers a chunk; values
/// not above the threshold are dropped (every later value equal to it is not needed either: `keep`
/// values >= it are already held). When the next chunk might not fit, compact() keeps between `keep` and
/// 2 keep of the best values and raises the threshold below them.
struct top_candidates {
  float* data;
  std::size_t keep;
  std::size_t capacity;  ///< >= 3 keep + chunk
  std::size_t count = 0;
  float threshold = -infinity;

  /// Offers the elements of one chunk, column by column (x[j * lanes + l] for lane l), skipping the
  /// columns whose largest y (see block_moments) is below d_threshold, the threshold in the same units
  /// (with AVX2: value by value, see below).
  /// Branch-free within a column: every value is stored, and the count advances past those above.
  void append(const float* x, const std::array<float, lanes>& d_max, float d_threshold) noexcept {
    if (count + chunk > capacity) compact(2 * keep);
#if defined(BLOCKPILOT_AVX2_COMPRESS)
    // Branch-free left-pack of the values above the threshold, 8 at a time; every store is a full vector
    // at data + count, within the capacity since count + chunk <= capacity on entry. (d_max is not needed:
    // the per-value test subsumes the per-column one.)
    (void)d_max, (void)d_threshold;
    const __m256 th = _mm256_set1_ps(threshold);
    for (int j = 0; j < chunk; j += 8) {
      const __m256 v = _mm256_loadu_ps(x + j);
      const int bits = _mm256_movemask_ps(_mm256_cmp_ps(v, th, _CMP_GT_OQ));  // false for NaN
      const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(compress_table[static_cast<std::size_t>(bits)].data()));
      _mm256_storeu_ps(data + count, _mm256_permutevar8x32_ps(v, perm));
      count += static_cast<std::size_t>(std::popcount(static_cast<unsigned>(bits)));
    }
    return;
#endif
    for (std::size_t l = 0; l < lane_count; ++l) {
      if (d_max[l] < d_threshold) continue;
      for (int j = static_cast<int>(l); j < chunk; j += lanes) {
        data[count] = x[j];
        count += x[j] > threshold;
      }
    }
  }

  /// Keeps between keep and `limit` of the best values: a pivot from a strided sample of 64 values,
  /// placed so that about (keep + limit) / 2 values lie above it, then one counting pass and one
  /// branch-free partition. nth_element (exactly keep values) only when the sample misjudged, or for
  /// ties at the pivot. (nth_element alone is slow here: the front of the buffer is already
  /// partitioned, which drives introselect to its heap fallback.)
  void compact(std::size_t limit) noexcept {
    std::array<float, 64> sample;
    for (std::size_t i = 0; i < sample.size(); ++i) sample[i] = data[i * count / sample.size()];
    const std::size_t rank = std::min<std::size_t>(sample.size() - 1, sample.size() * (keep + limit) / (2 * count));
    std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(rank), sample.end(), std::greater<>());
    const float pivot = sample[rank];
    std::size_t above = 0;
    for (std::size_t i = 0; i < count; ++i) above += data[i] > pivot;
    if (above >= keep && above <= limit) {
      std::size_t n = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const float v = data[i];
        data[n] = v;
        n += v > pivot;
      }
      count = n;
      threshold = pivot;
    } else {
      std::nth_element(data, data + keep - 1, data + count, std::greater<>());
      threshold = data[keep - 1];
      count = keep;
    }
  }

  /// Sorts the best min(count, keep) values in descending order to the front; returns their number.
  std::size_t finish() noexcept {
    if (2 * count > 3 * keep) compact(keep + keep / 2);
    sort_descending(data, count);  // count <= 1.5 keep: the scratch fits in the capacity
    return std::min(count, keep);
  }
};

/// Largest of the lane values.
[[nodiscard]] inline float lane_max(const std::array<float, lanes>& m) noexcept {
  float r = m[0];
  for (const float v : m) r = v > r ? v : r;
  return r;
}

/// Exp moments of a block in base 2 (see exp2_poly4): with y = x * a - ref2 (a = log2(e) / T) and
/// t = max(y, -127), per lane z = sum 2^t, s = sum 2^t t, q = sum 2^t t^2 (2^t = 0 for masked tokens;
/// NaN in x makes them NaN). Two accumulator sets (even and odd vectors of a chunk) halve the add
/// dependency chains; the caller adds them.
struct block_moments {
  /// Floats ahead of the current chunk to prefetch.
  static constexpr int prefetch_distance = 2048;
  std::array<vfloat, 2> z{}, s{}, q{};

  /// Adds one chunk; returns its largest y per lane (NaN never wins).
  vfloat add(const float* x, float a, float ref2) noexcept {
    static_assert(chunk % (2 * lanes) == 0);
    vfloat y_max = vfloat{} - infinity;
    const vfloat lo = exp2_clamp_vector();
#if defined(__GNUC__)
    // Software prefetch a few blocks ahead (the row streams from memory at large batch; a hint past the
    // end of the row is harmless: prefetches do not fault).
    // (Integer arithmetic on the address: a pointer past the end of the row would be undefined.)
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(x) + prefetch_distance * sizeof(float);
    for (int j = 0; j < chunk; j += 16) __builtin_prefetch(reinterpret_cast<const void*>(ahead + static_cast<std::size_t>(j) * sizeof(float)));
#endif
    // With few lanes (the scalar build: 512 terms per float sum and block), chunk sums first, then added
    // to the block's, which bounds the float rounding of the sums; with 8 lanes or more a lane sums at
    // most 64 terms per block anyway, and the hot loop accumulates into the block's sums directly.
    constexpr bool chunk_sums = lanes < 8;
    std::array<vfloat, 2> chunk_z{}, chunk_s{}, chunk_q{};
    std::array<vfloat, 2>&cz = chunk_sums ? chunk_z : z, &cs = chunk_sums ? chunk_s : s, &cq = chunk_sums ? chunk_q : q;
    for (int j = 0; j < chunk; j += 2 * lanes) {
      for (std::size_t u = 0; u < 2; ++u) {
        const vfloat y = scaled(load(x + j + static_cast<int>(u) * lanes), a, ref2);
        y_max = max_of(y, y_max);
        const vfloat t = clamp_exp2_arg(y, lo), e = exp2_poly4(t), et = e * t;
        cz[u] += e;
        cs[u] += et;
        cq[u] += et * t;
      }
    }
    for (std::size_t u = 0; u < 2 && chunk_sums; ++u) {
      z[u] += cz[u];
      s[u] += cs[u];
      q[u] += cq[u];
    }
    return y_max;
  }
};

/// The compact feature pass (layout documented at blockpilot::compact_statistic), reading the row once.
/// Sums are taken in base 2 (see block_moments) against a reference ref2 (in units of y) that starts at
/// the max of the first chunk holding a finite value and moves only when a block holds a value more
/// than rebase_margin2 above it; then the double sums move with it: with delta = old ref2 - new ref2 and
/// c = 2^delta, z' = c z, s' = c (s + delta z), q' = c (q + 2 delta s + delta^2 z), and the block is
/// redone. Per block of 16 chunks the vectorised exp loop runs first; then each chunk whose largest y
/// reaches the top-k threshold feeds the candidate buffer. Everything downstream uses the same a and
/// ref2 (and the same exp2_poly4), so the float rounding of ref2 cancels: with d = y ln 2 (nats),
/// log Z = ref2 ln 2 + log z, H = log z - ln 2 s / z, var = ln^2 2 (q / z - (s / z)^2), p_i = 2^y_i / z.
/// Preconditions (checked by compact_features::extract): 1 <= top_k <= row.size(), inv_t finite > 0,
/// workspace.size() >= compact_workspace_size(top_k), out.size() == top_k + compact_statistics.
[[nodiscard]] inline status compact_pass(std::span<const float> row, int top_k, float inv_t,
                                         std::span<float> workspace, std::span<float> out) noexcept {
  constexpr double ln2 = 0.693147180559945309;
  const std::size_t keep = static_cast<std::size_t>(std::max(top_k, 2));  // 2: the margin needs the top two
  top_candidates top{workspace.data(), keep, compact_workspace_size(top_k)};
  lane_sums<3> acc;
  vmask nan{};
  std::array<float, chunk> tail;
  const std::size_t chunks = (row.size() + chunk - 1) / chunk;
  const float a = detail::log2e_over_temperature(inv_t);  // y = x a

  std::size_t first = 0;  // the first chunk with a finite value; the masked chunks before it add nothing
  float first_max = -infinity;
  for (;; ++first) {
    if (first == chunks) return status::non_finite_logits;
    const float* x = chunk_at(row, first, tail);
    for (int j = 0; j < chunk; j += lanes) nan = nan | (load(x + j) != load(x + j));
    first_max = chunk_max(x);
    if (first_max != -infinity) break;
  }
  if (first_max == infinity) return status::non_finite_logits;
  float ref2 = first_max * a, y_threshold = -infinity;

  std::array<const float*, block_chunks> xs;
  std::array<std::array<float, lanes>, block_chunks> y_maxes;
  static_assert(block_chunks <= 32);
  for (std::size_t b = first; b < chunks; b += block_chunks) {
    const std::size_t n = std::min<std::size_t>(block_chunks, chunks - b);
    for (std::size_t i = 0; i < n; ++i) xs[i] = chunk_at(row, b + i, tail);
    std::uint32_t candidates = 0;  // bit i: chunk i of the block reaches the threshold in some lane
    for (;;) {  // the exp work of the block, redone once after a move of the reference
      block_moments m;
      vfloat block_max = vfloat{} - infinity;
      vbits hits{};
      for (std::size_t i = 0; i < n; ++i) {
        const vfloat y_max = m.add(xs[i], a, ref2);
        block_max = max_of(y_max, block_max);
        hits = hits | (y_max >= y_threshold ? vbits{} + static_cast<decltype(lane(vbits{}, 0))>(1u << i) : vbits{});  // a true lane is -1 or 1
        y_maxes[i] = to_array(y_max);
      }
      const float y_max = lane_max(to_array(block_max));
      if (y_max <= rebase_margin2) {
        acc.hot = {m.z[0] + m.z[1], m.s[0] + m.s[1], m.q[0] + m.q[1]};
        candidates = or_lanes(hits);
        break;
      }
      // NaN in a first lane, or +inf: x a - ref2 overflowed, in a row past detail::max_scaled_logit
      if (!(y_max < infinity)) return status::non_finite_logits;
      float new_ref2 = ref2 + y_max;
      // Where the reference's spacing exceeds the margin, y_max can be its rounding alone, which the sum
      // rounds away: the reference moves one step up (such a row fails below unless it came from a
      // more negative start).
      if (!(new_ref2 > ref2)) new_ref2 = std::nextafter(ref2, infinity);
      const double delta = static_cast<double>(ref2) - new_ref2, c = std::exp2(delta);
      for (std::size_t l = 0; l < lane_count; ++l) {
        const double z0 = acc.total[0][l], s0 = acc.total[1][l];
        acc.total[0][l] = c * z0;
        acc.total[1][l] = c * (s0 + delta * z0);
        acc.total[2][l] = c * (acc.total[2][l] + 2.0 * delta * s0 + delta * delta * z0);
      }
      ref2 = new_ref2;
      y_threshold = scaled(top.threshold, a, ref2);
    }
    acc.flush();
    for (; candidates != 0; candidates &= candidates - 1) {
      const auto i = static_cast<std::size_t>(std::countr_zero(candidates));
      top.append(xs[i], y_maxes[i], y_threshold);
      y_threshold = scaled(top.threshold, a, ref2);
    }
  }
  const double z = acc.sum(0), s = acc.sum(1), q = acc.sum(2);
  if (any_lane(nan) || !std::isfinite(z) || !std::isfinite(s) || !std::isfinite(q)) return status::non_finite_logits;

  const std::size_t found = top.finish();  // >= 1: the max is a candidate
  if (!detail::scaled_max_in_range(top.data[0], inv_t)) return status::non_finite_logits;
  const std::size_t k = static_cast<std::size_t>(top_k);
  double mass = 0.0;
  std::size_t near_max = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const float y = i < found ? scaled(top.data[i], a, ref2) : -infinity;
    const double p = exp2_poly4(clamp_exp2_arg(y)) / z;
    out[i] = static_cast<float>(p);
    mass += p;
    near_max += i < found && (static_cast<double>(top.data[i]) - top.data[0]) * inv_t >= -2.0;
  }
  const double log_z = std::log(z);
  const bool finite = detail::compact_statistics(
      detail::compact_row_moments{
          .log_z = log_z,
          .mean_d = ln2 * s / z,
          .mean_d2 = ln2 * ln2 * q / z,
          .log_sum_exp = static_cast<double>(ref2) * ln2 + log_z,
          .max_y = static_cast<double>(top.data[0]) * inv_t,
          .margin = found >= 2 ? (static_cast<double>(top.data[0]) - top.data[1]) * inv_t : 88.0,
          .top_k_mass = mass,
          .near_max = static_cast<double>(near_max),
          .vocab = static_cast<double>(row.size())},
      out.data() + k);
  return finite ? status::success : status::non_finite_logits;
}
