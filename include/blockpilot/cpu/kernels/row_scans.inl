// Whole-row scans of one variant of the CPU row kernels (included by cpu/row_kernels.hpp after
// exp.inl): the validated maximum of the acceptance rules, and the full-row feature pass's maximum and
// softmax sum.

/// Maximum of a row. NaN or +inf anywhere, or no finite value at all, is `non_finite_logits`;
/// -inf entries are masked tokens. Also returns the first index of the maximum (ties to the smaller id).
/// Four vector accumulators; NaN tracked apart from the maximum, which is exact either way.
[[nodiscard]] inline status checked_max(std::span<const float> row, float& max_value, token_id& argmax) noexcept {
  if (row.empty()) return status::non_finite_logits;
  vfloat m[4] = {vfloat{} + row[0], vfloat{} + row[0], vfloat{} + row[0], vfloat{} + row[0]};
  vmask bad{};
  const std::size_t step = 4 * static_cast<std::size_t>(lanes);
  const std::size_t whole = row.size() - row.size() % step;
  for (std::size_t i = 0; i < whole; i += step)
    for (std::size_t k = 0; k < 4; ++k) {
      const vfloat x = load(row.data() + i + k * static_cast<std::size_t>(lanes));
      m[k] = max_of(x, m[k]);
      bad |= x != x;
    }
  float best = row[0];
  for (const vfloat v : m)
    for (int l = 0; l < lanes; ++l) best = lane(v, l) > best ? lane(v, l) : best;
  bool nan = any_lane(bad);
  for (std::size_t i = whole; i < row.size(); ++i) {
    best = row[i] > best ? row[i] : best;
    nan = nan || row[i] != row[i];
  }
  if (nan || !std::isfinite(best)) return status::non_finite_logits;
  max_value = best;
  argmax = static_cast<token_id>(std::find(row.begin(), row.end(), best) - row.begin());
  return status::success;
}

/// Largest value of `row` in `max`; non_finite_logits when the row holds NaN or +inf or has no finite
/// value. Max and min reductions of order keys.
[[nodiscard]] inline status row_max(std::span<const float> row, float& max) noexcept {
  vuint hi_v = vuint{}, lo_v = vuint{} + ~0u;
  const std::size_t body = row.size() - row.size() % lanes;
  for (std::size_t i = 0; i < body; i += lanes) {
    const vuint k = order_key(bits_as<vuint>(load(row.data() + i)));
    hi_v = max_of(k, hi_v);
    lo_v = k < lo_v ? k : lo_v;
  }
  std::uint32_t hi = 0, lo = ~0u;
  for (int l = 0; l < lanes; ++l) {
    hi = std::max<std::uint32_t>(hi, lane(hi_v, l));
    lo = std::min<std::uint32_t>(lo, lane(lo_v, l));
  }
  for (std::size_t i = body; i < row.size(); ++i) {
    const std::uint32_t k = order_key(std::bit_cast<std::uint32_t>(row[i]));
    hi = std::max(hi, k);
    lo = std::min(lo, k);
  }
  max = std::bit_cast<float>(hi ^ ((hi & 0x80000000u) ? 0x80000000u : ~0u));
  const bool nan = hi > order_key(std::bit_cast<std::uint32_t>(infinity)) || lo < order_key(std::bit_cast<std::uint32_t>(-infinity));
  return nan || !std::isfinite(max) ? status::non_finite_logits : status::success;
}

/// Float sums per lane for the hot loops, folded into double lanes by flush().
template <int N>
struct lane_sums {
  std::array<vfloat, static_cast<std::size_t>(N)> hot{};
  std::array<std::array<double, lane_count>, static_cast<std::size_t>(N)> total{};

  void flush() noexcept {
    for (std::size_t k = 0; k < hot.size(); ++k) {
      const auto h = to_array(hot[k]);
      for (std::size_t l = 0; l < lane_count; ++l) total[k][l] += h[l];
      hot[k] = vfloat{};
    }
  }
  /// Sum over lanes of sum k (after flush()).
  [[nodiscard]] double sum(int k) const noexcept {
    double r = 0.0;
    for (const double v : total[static_cast<std::size_t>(k)]) r += v;
    return r;
  }
};

/// sum_i e^(row_i / T - ref), ref = max / T for the row's max (row_max() checks the row); stores each
/// term in terms[i] (terms.size() == row.size()).
[[nodiscard]] inline double sum_exp(std::span<const float> row, float inv_t, float ref, std::span<float> terms) noexcept {
  lane_sums<1> acc;
  const std::size_t body = row.size() - row.size() % lanes;
  for (std::size_t i = 0; i < body; i += lanes) {
    const vfloat e = exp_poly5(scaled(load(row.data() + i), inv_t, ref));
    store(terms.data() + i, e);
    acc.hot[0] += e;
    if ((i / lanes + 1) % 128 == 0) acc.flush();  // at most 128 float terms per lane
  }
  acc.flush();
  double z = acc.sum(0);
  for (std::size_t i = body; i < row.size(); ++i) z += terms[i] = exp_poly5(scaled(row[i], inv_t, ref));
  return z;
}
