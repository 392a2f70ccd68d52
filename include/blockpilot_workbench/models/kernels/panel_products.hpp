// fp32 weights in panels of 16 rows, column by column (`f32_panels`: column k of a panel is its 16 rows'
// weights k side by side), and their products with fp32 input rows: each column's weights are loaded
// as whole vectors and multiplied with one input element in every lane, so the sums land in the output
// rows' lanes (no horizontal sums) and each weight vector serves every input row of a tile
// (panel_products.inl). Compiled for generic / AVX2 / AVX-512 in target regions and chosen at run time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "blockpilot_workbench/models/kernels/huge_pages.hpp"
#include "blockpilot_workbench/models/kernels/weight_products.hpp"

namespace blockpilot::cpu_kernels {

constexpr int panel_rows = 16;      ///< weight rows of a panel
/// Columns ahead that a pass of `rows` input rows asks the cache for: 32 (2 KB of a panel) with one or
/// two rows, 64 with more. Chosen by measurement on an AMD Zen 4 (docs/performance.md): 64 throughout
/// cost steps of one and two tokens 1.12-1.13x; with 3 rows or more it saved 6-18 % at b = 4 and 8.
constexpr int panel_prefetch(int rows) { return rows <= 2 ? 32 : 64; }

/// A [rows][cols] fp32 matrix in panels of 16 rows (the last padded with zeros), each column-major.
class f32_panels {
 public:
  f32_panels() = default;
  /// The rows of m (row o at m + o ldm), `rows` × `cols`.
  f32_panels(const float* m, std::ptrdiff_t ldm, std::int64_t rows, std::int64_t cols) : rows_(rows), cols_(cols) {
    values_.assign(static_cast<std::size_t>(groups() * cols * panel_rows), 0.0f);
    for (std::int64_t o = 0; o < rows; ++o)
      for (std::int64_t k = 0; k < cols; ++k) values_[index(o, k)] = m[o * ldm + k];
  }
  [[nodiscard]] std::int64_t rows() const { return rows_; }
  [[nodiscard]] std::int64_t cols() const { return cols_; }
  [[nodiscard]] std::int64_t groups() const { return (rows_ + panel_rows - 1) / panel_rows; }
  /// Bytes held (with the last panel's padding).
  [[nodiscard]] std::size_t bytes() const { return values_.size() * sizeof(float); }
  /// Panel g: column k's 16 weights at panel(g) + 16 k.
  [[nodiscard]] const float* panel(std::int64_t g) const { return values_.data() + static_cast<std::size_t>(g * cols_ * panel_rows); }
  /// Row r into out [cols].
  void decode(std::int64_t r, float* out) const {
    for (std::int64_t k = 0; k < cols_; ++k) out[k] = values_[index(r, k)];
  }

 private:
  [[nodiscard]] std::size_t index(std::int64_t o, std::int64_t k) const {
    return static_cast<std::size_t>(((o / panel_rows) * cols_ + k) * panel_rows + o % panel_rows);
  }
  std::int64_t rows_ = 0, cols_ = 0;
  std::vector<float, huge_page_allocator<float>> values_;
};

#define BLOCKPILOT_VARIANT_KERNELS "blockpilot_workbench/models/kernels/panel_products.inl"
#include "blockpilot_workbench/models/kernels/fp32_variants.inl"

/// y[i ldy + o] = Σ_k x[i ldx + k] W[o][k] (or += when `accumulate`) for i < rows and o in [first, first +
/// count), with the kernels of `isa` (`best`: the detected one). Each result is one FMA chain over k in
/// order: the same bits whatever rows share the pass; the variants differ by float rounding only.
inline void multiply_rows(cpu_isa isa, const f32_panels& w, const float* x, std::ptrdiff_t ldx, int rows, std::int64_t first,
                          std::int64_t count, float* y, std::ptrdiff_t ldy, bool accumulate) {
  if (isa == cpu_isa::best) isa = detected_cpu_isa();
#if defined(BLOCKPILOT_X86_KERNELS)
  if (isa >= cpu_isa::avx512) return avx512::multiply_panels(w, x, ldx, rows, first, count, y, ldy, accumulate);
  if (isa == cpu_isa::avx2) return avx2::multiply_panels(w, x, ldx, rows, first, count, y, ldy, accumulate);
#endif
  (void)isa;
  generic::multiply_panels(w, x, ldx, rows, first, count, y, ldy, accumulate);
}

}  // namespace blockpilot::cpu_kernels
