// Vector primitives of one variant of the CPU row kernels (cpu/row_kernels.hpp includes this once per
// variant, inside its namespace and target region, after defining `vector_bytes`): GCC/Clang vector
// types of that width, so that no loop depends on the auto-vectoriser, or plain scalars where the
// compiler has none. Only operators valid for both are used: arithmetic, ?: on a comparison, shifts,
// bitwise ops, bits_as.
#if defined(BLOCKPILOT_VECTOR_TYPES)
using vfloat = float __attribute__((vector_size(vector_bytes)));
using vuint = std::uint32_t __attribute__((vector_size(vector_bytes)));
#else
using vfloat = float;
using vuint = std::uint32_t;
#endif
/// Floats per vfloat.
inline constexpr int lanes = sizeof(vfloat) / sizeof(float);
inline constexpr std::size_t lane_count = lanes;  // lanes, as an array size or index
/// The result of comparing vfloats: a vector of int32 lane masks, or bool.
using vmask = decltype(vfloat{} != vfloat{});
/// The result of masking a vmask with an int: a vector of int32 lanes, or int.
using vbits = decltype(vmask{} & 1);

/// The unsigned type with the shape of V (float or vfloat).
template <class V>
using uint_of = std::conditional_t<std::is_same_v<V, float>, std::uint32_t, vuint>;

/// std::bit_cast of vectors or scalars, as a builtin: std::bit_cast is compiled for the translation unit's
/// target, and passing it a vector wider than that target's registers changes the ABI (Clang refuses it).
template <class To, class From>
[[nodiscard]] To bits_as(From v) noexcept {
  return __builtin_bit_cast(To, v);
}

[[nodiscard]] inline vfloat load(const float* p) noexcept {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vfloat v) noexcept { std::memcpy(p, &v, sizeof v); }
/// Lane l of a vector, or the scalar itself. (Subscripts rather than std::bit_cast to an array: the
/// latter makes GCC keep a loop's vector accumulators in memory.)
template <class V>
[[nodiscard]] auto lane(V v, int l) noexcept {
  if constexpr (std::is_arithmetic_v<V>) {
    return (void)l, v;
  } else {
    return v[l];
  }
}
/// The lanes of v as an array.
template <class V>
[[nodiscard]] auto to_array(V v) noexcept {
  std::array<decltype(lane(v, 0)), lane_count> a;
  for (std::size_t l = 0; l < lane_count; ++l) a[l] = lane(v, static_cast<int>(l));
  return a;
}
/// a > b ? a : b lane-wise (for floats: NaN in a never wins). GCC emits one max instruction for this
/// form when b is not a constant.
template <class V>
[[nodiscard]] V max_of(V a, V b) noexcept { return a > b ? a : b; }

/// Bitwise or of the lanes of b.
[[nodiscard]] inline std::uint32_t or_lanes(vbits b) noexcept {
  std::uint32_t r = 0;
  for (int l = 0; l < lanes; ++l) r |= static_cast<std::uint32_t>(lane(b, l));
  return r;
}

/// Whether any lane of m is set.
[[nodiscard]] inline bool any_lane(vmask m) noexcept { return or_lanes(m & 1) != 0; }
