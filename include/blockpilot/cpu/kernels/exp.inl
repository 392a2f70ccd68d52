// The exp kernels of one variant of the CPU row kernels (included by cpu/row_kernels.hpp after
// simd.inl). Templates on V = float or vfloat.

/// max(d, -88), keeping NaN (d < -88 is false for it), so that NaN reaches the sums.
template <class V>
[[nodiscard]] V clamp_exp_arg(V d) noexcept {
  const V lo = V{} + exp_min_arg;
  return d < lo ? lo : d;
}

/// e^d for d <= 88 (V = float or vfloat): t = max(d, -88) = n ln2 + r with |r| <= ln2/2 (two-constant
/// Cody-Waite), a degree-5 polynomial with c0 = 1 fitted for relative error on that range, and 2^n
/// through the exponent bits. Branch-free; relative error below 2.5e-7 for d in [-87, 88]; exactly 0
/// below about -87.7 and for -inf (a masked token has probability 0); NaN for NaN.
template <class V>
[[nodiscard]] V exp_poly5(V d) noexcept {
  // Adding 1.5 * 2^23 rounds to an integer n in the low mantissa bits; the extra 127 biases it, so that
  // shifting the bits left by 23 leaves exactly the exponent field of 2^n (the bits above fall off).
  constexpr float round_magic = 12582912.0f + 127.0f;
  const V t = clamp_exp_arg(d);
  const V shifted = t * 1.44269504088896341f + round_magic;
  const V n = shifted - round_magic;
  const V r = (t - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = r * 8.290302940e-3f + 4.189792275e-2f;
  p = p * r + 1.666763574e-1f;
  p = p * r + 4.999915063e-1f;
  p = p * r + 9.999997020e-1f;
  p = p * r + 1.0f;
  return p * bits_as<V>(bits_as<uint_of<V>>(shifted) << 23);
}

/// max(y, -127), keeping NaN (see clamp_exp_arg).
template <class V>
[[nodiscard]] V clamp_exp2_arg(V y) noexcept {
  return y < V{} + exp2_min_arg ? V{} + exp2_min_arg : y;
}

/// clamp_exp2_arg for the hot loop, given lo = exp2_min_arg in every lane: lo > y ? lo : y is one x86 max
/// instruction (which returns its second operand, y, when either is NaN), but GCC emits it only when lo
/// is not a known constant, hence the empty asm that hides its value.
[[nodiscard]] inline vfloat clamp_exp2_arg(vfloat y, vfloat lo) noexcept { return max_of(lo, y); }
[[nodiscard]] inline vfloat exp2_clamp_vector() noexcept {
  vfloat lo = vfloat{} + exp2_min_arg;
#if defined(BLOCKPILOT_VECTOR_TYPES) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(lo));
#endif
  return lo;
}

/// 2^t for t = clamp_exp2_arg(y), y <= 127 (V = float or vfloat): t = n + f with n = round(t) and
/// |f| <= 1/2 exact (no range-reduction error), a degree-4 polynomial with c0 = 1 fitted (Lawson
/// minimax) for relative error on that range, and 2^n through the exponent bits. Branch-free. Relative
/// error below 3e-6 for t in [-126, 127] (2.9e-6 measured in float arithmetic against 2^f in double;
/// degree 5 would give 1.8e-7 at one FMA more, degree 3 1e-4). The features feed an MLP, for which 3e-6
/// is far below the noise of the logits themselves; the moments are sums of positive terms, so their
/// relative error is also below 3e-6 (plus the float rounding of y, 0.5 ulp(|y|), shared with any float
/// argument). Exactly 0 for t = -127 (y below -126.5, masked tokens included); NaN for NaN.
template <class V>
[[nodiscard]] V exp2_poly4(V t) noexcept {
  constexpr float round_magic = 12582912.0f + 127.0f;  // see exp_poly5
  const V shifted = t + round_magic;
  const V f = t - (shifted - round_magic);
  V p = f * 9.582829662e-3f + 5.590640008e-2f;
  p = p * f + 2.402409911e-1f;
  p = p * f + 6.931241751e-1f;
  p = p * f + 1.0f;
  return p * bits_as<V>(bits_as<uint_of<V>>(shifted) << 23);
}

/// x / T relative to a reference: x * inv_t - ref (one FMA where the target has it).
template <class V>
[[nodiscard]] V scaled(V x, float inv_t, float ref) noexcept { return x * inv_t - ref; }

/// A key whose unsigned order is the float order: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
template <class U>
[[nodiscard]] U order_key(U bits) noexcept { return bits ^ ((0u - (bits >> 31)) | 0x80000000u); }
