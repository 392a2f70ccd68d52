// The CPU's vectorised passes over a logits row: the validated maximum behind every acceptance rule
// (row_ops.hpp), and the feature extractors' passes, a vectorised exp and the single streaming pass
// behind compact_features (exp moments against a lazily moved reference, filtered top-k).
//
// Each pass is compiled once per variant: `generic` (16-byte vectors, any CPU the translation unit
// targets), and on x86-64 `avx2` (32-byte, AVX2 + FMA) and `avx512` (64-byte, AVX-512), each in a target
// region (detail/target_region.hpp) so that no -m flag is needed; the call runs the widest variant this
// CPU runs (cpu/isa.hpp), whatever the flags the program was built with. As with any header, compile
// every file that includes it with flags the CPUs that run the program have (the regions add to them).
// nvcc's host pass compiles the generic variant alone (its front end cannot take the regions); the
// dispatch finds the wide variants through pointers that the other files set at start-up
// (`wide_variants`), so it reads the same in every file, and an executable or shared library that links
// .cu and .cpp files runs them in all of its files.
//
// Accuracy: exp_poly5 (full_row_features) has relative error < 2.5e-7; the compact pass uses the cheaper
// base-2 exp2_poly4, relative error < 3e-6 (see there), so its top-k probabilities carry < 8e-6 relative
// error and entropy / log-sum-exp about 3e-6 absolute on top of the float rounding of the inputs. The
// variants sum in different orders, so their sums differ by float rounding; maxima are exact in all.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "blockpilot/cpu/isa.hpp"
#include "blockpilot/detail/compact_statistics.hpp"
#include "blockpilot/detail/target_region.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

#if defined(__GNUC__) && !defined(BLOCKPILOT_SCALAR_KERNELS)
#define BLOCKPILOT_VECTOR_TYPES 1  // GCC/Clang vector types; plain scalars otherwise
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__CUDACC__)
#include <immintrin.h>
#define BLOCKPILOT_CPU_VARIANTS 1  // the avx2 and avx512 variants are compiled (not in nvcc's host pass)
#endif
#endif

namespace blockpilot::cpu_detail::row_kernels {

inline constexpr float infinity = std::numeric_limits<float>::infinity();
/// Elements per chunk: the unit of the top-k threshold test and of the padded tail.
inline constexpr int chunk = 64;
/// Chunks per block: float lane sums cover one block (1024 elements) before they are folded into double
/// lanes, and the top-k work of a block runs after its exp work, away from the vectorised loop.
inline constexpr int block_chunks = 16;
/// The exp clamps its argument here: round(-88 / ln2) = -127 puts 0 in the exponent bits, so every
/// argument below about -87.7 (masked tokens included) gives exactly 0.
inline constexpr float exp_min_arg = -88.0f;
/// The compact pass works in base 2: y = x log2(e) / T - ref2, so that one FMA gives the exp argument
/// and no Cody-Waite reduction is needed. Below this y, 2^y is exactly 0 (-127 puts 0 in the exponent
/// bits; the same cut as exp_min_arg: -88 nats = -126.96).
inline constexpr float exp2_min_arg = -127.0f;
/// The streaming pass moves its reference only when a value exceeds it by more than this many base-2
/// units (64 nats = 92.3): 2^92 times 2^18 terms stays far below the float range.
inline constexpr float rebase_margin2 = 92.0f;

/// Number of statistics compact_pass writes after the top-k probabilities.
inline constexpr int compact_statistics = detail::compact_statistic_count;

/// Floats of workspace compact_pass needs: a candidate buffer of 3 * max(top_k, 2) + chunk values.
[[nodiscard]] constexpr std::size_t compact_workspace_size(int top_k) noexcept {
  return 3 * static_cast<std::size_t>(std::max(top_k, 2)) + chunk;
}

#if defined(BLOCKPILOT_CPU_VARIANTS)
/// Row m: the indices of the set bits of m in ascending order, then zeros (a permutation that left-packs
/// the lanes selected by movemask m).
alignas(32) inline constexpr auto compress_table = [] {
  std::array<std::array<std::uint32_t, 8>, 256> t{};
  for (std::uint32_t m = 0; m < 256; ++m) {
    int n = 0;
    for (std::uint32_t l = 0; l < 8; ++l)
      if (m >> l & 1u) t[m][static_cast<std::size_t>(n++)] = l;
  }
  return t;
}();
#endif

/// Largest element of one chunk, ignoring NaN.
[[nodiscard]] inline float chunk_max(const float* x) noexcept {
  float m = -infinity;
  for (int i = 0; i < chunk; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

/// The chunk at index c of the row: a pointer into it, or for a last partial chunk a copy in `tail`
/// padded with masked tokens (-inf).
[[nodiscard]] inline const float* chunk_at(std::span<const float> row, std::size_t c, std::array<float, chunk>& tail) noexcept {
  const std::size_t i = c * chunk, n = std::min<std::size_t>(chunk, row.size() - i);
  if (n == chunk) return row.data() + i;
  tail.fill(-infinity);
  std::copy_n(row.data() + i, n, tail.begin());
  return tail.data();
}

namespace generic {
inline constexpr int vector_bytes = 16;
#include "blockpilot/cpu/kernels/variant.inl"
}  // namespace generic

#if defined(BLOCKPILOT_CPU_VARIANTS)
BLOCKPILOT_TARGET_BEGIN("avx2,fma,f16c")
namespace avx2 {
inline constexpr int vector_bytes = 32;
#define BLOCKPILOT_AVX2_COMPRESS 1
#include "blockpilot/cpu/kernels/variant.inl"
#undef BLOCKPILOT_AVX2_COMPRESS
}  // namespace avx2
BLOCKPILOT_TARGET_END

BLOCKPILOT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace avx512 {
inline constexpr int vector_bytes = 64;
#include "blockpilot/cpu/kernels/variant.inl"
}  // namespace avx512
BLOCKPILOT_TARGET_END
static_assert(generic::lanes == 4 && avx2::lanes == 8 && avx512::lanes == 16);
#endif

/// A compiled variant of the row kernels, in increasing order of the CPU features it needs.
enum class vector_variant { generic, avx2, avx512 };

/// The passes of one variant.
struct variant_passes {
  status (*checked_max)(std::span<const float>, float&, token_id&) noexcept;
  status (*row_max)(std::span<const float>, float&) noexcept;
  double (*sum_exp)(std::span<const float>, float, float, std::span<float>) noexcept;
  status (*compact_pass)(std::span<const float>, int, float, std::span<float>, std::span<float>) noexcept;
};

/// The avx2 and avx512 variants' passes, set at start-up by every translation unit that compiles them:
/// all but nvcc's host pass, whose front end cannot take their target regions. The dispatch below reads
/// them here, so it is one definition in every translation unit, nvcc's included, and a program runs
/// the wide variants when any of its host files includes this header; one whose CPU passes nvcc alone
/// compiled runs the generic variant, as does a call made before start-up ends (from another file's
/// static initialiser). One table per executable or shared library (hidden), so that no module holds
/// pointers into another's code, which could be unloaded.
#if defined(__GNUC__)
#define BLOCKPILOT_MODULE_LOCAL [[gnu::visibility("hidden")]]
#else
#define BLOCKPILOT_MODULE_LOCAL
#endif
BLOCKPILOT_MODULE_LOCAL inline std::atomic<const variant_passes*> wide_variants[2]{};

#if defined(BLOCKPILOT_CPU_VARIANTS)
inline constexpr variant_passes avx2_passes{&avx2::checked_max, &avx2::row_max, &avx2::sum_exp, &avx2::compact_pass};
inline constexpr variant_passes avx512_passes{&avx512::checked_max, &avx512::row_max, &avx512::sum_exp, &avx512::compact_pass};
BLOCKPILOT_MODULE_LOCAL inline const bool wide_variants_registered = [] {
  wide_variants[0].store(&avx2_passes, std::memory_order_relaxed);
  wide_variants[1].store(&avx512_passes, std::memory_order_relaxed);
  return true;
}();
#endif

/// The passes of a wide variant this program compiled (null for generic, or for one it lacks).
[[nodiscard]] inline const variant_passes* compiled_passes(vector_variant v) noexcept {
  return v == vector_variant::generic ? nullptr : wide_variants[static_cast<int>(v) - 1].load(std::memory_order_relaxed);
}

/// Whether this program has `v` and this CPU runs it.
[[nodiscard]] inline bool runs(vector_variant v) noexcept {
  const cpu_features& f = detected_cpu_features();
  return v == vector_variant::generic ||
         (compiled_passes(v) != nullptr && (v == vector_variant::avx2 ? f.avx2 : f.avx512));
}

/// The widest variant this CPU runs.
[[nodiscard]] inline vector_variant best_vector_variant() noexcept {
  return runs(vector_variant::avx512) ? vector_variant::avx512 : runs(vector_variant::avx2) ? vector_variant::avx2 : vector_variant::generic;
}

// The passes, run by variant `v` (default: the widest this CPU runs; any other must satisfy runs(v)).
#define BLOCKPILOT_ROW_KERNEL(v, pass, ...)                       \
  const variant_passes* const passes = compiled_passes(v);       \
  return passes != nullptr ? passes->pass(__VA_ARGS__) : generic::pass(__VA_ARGS__);

/// Maximum of a row and the first index holding it; non_finite_logits for NaN, +inf, or no finite value.
[[nodiscard]] inline status checked_max(std::span<const float> row, float& max_value, token_id& argmax,
                                        vector_variant v = best_vector_variant()) noexcept {
  BLOCKPILOT_ROW_KERNEL(v, checked_max, row, max_value, argmax)
}
/// Maximum of a row; non_finite_logits for NaN, +inf, or no finite value.
[[nodiscard]] inline status row_max(std::span<const float> row, float& max, vector_variant v = best_vector_variant()) noexcept {
  BLOCKPILOT_ROW_KERNEL(v, row_max, row, max)
}
/// sum_i e^(row_i / T - ref) with each term in terms[i] (terms.size() == row.size()).
[[nodiscard]] inline double sum_exp(std::span<const float> row, float inv_t, float ref, std::span<float> terms,
                                    vector_variant v = best_vector_variant()) noexcept {
  BLOCKPILOT_ROW_KERNEL(v, sum_exp, row, inv_t, ref, terms)
}
/// The compact feature pass (generic::compact_pass documents it and its preconditions).
[[nodiscard]] inline status compact_pass(std::span<const float> row, int top_k, float inv_t, std::span<float> workspace,
                                         std::span<float> out, vector_variant v = best_vector_variant()) noexcept {
  BLOCKPILOT_ROW_KERNEL(v, compact_pass, row, top_k, inv_t, workspace, out)
}
#undef BLOCKPILOT_ROW_KERNEL
#undef BLOCKPILOT_MODULE_LOCAL

}  // namespace blockpilot::cpu_detail::row_kernels
