// The x86-64 vector extensions this CPU runs, asked of it at run time: the CPU kernels are compiled for
// several instruction-set levels (detail/target_region.hpp) and pick theirs on the machine that runs
// them, so that a program built for any x86-64 level runs, at full width, on any other.
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#define BLOCKPILOT_CPUID 1
#endif

namespace blockpilot {

/// What this CPU (and its operating system, which must save the vector registers) runs.
struct cpu_features {
  bool avx2 = false;         ///< AVX2 + FMA + F16C (x86-64-v3: Intel Haswell and later, AMD Zen and later)
  bool avx512 = false;       ///< AVX-512 F/BW/VL/DQ and the above (x86-64-v4: Intel Skylake-SP and later, AMD Zen 4)
  bool avx512_vnni = false;  ///< avx512 and VNNI's int8 dot products (Intel Ice Lake and later, AMD Zen 4)
};

/// This CPU's features, asked once; none on other architectures and compilers.
[[nodiscard]] inline const cpu_features& detected_cpu_features() noexcept {
#if defined(BLOCKPILOT_CPUID)
  static const cpu_features found = [] {
    __builtin_cpu_init();  // (cpu_supports checks that the operating system saves the AVX and AVX-512 state)
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;  // (not every compiler's cpu_supports knows it)
    cpu_features f;
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_vnni = f.avx512 && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11)) != 0;  // CPUID.7.0:ECX.11
    return f;
  }();
  return found;
#else
  static const cpu_features none{};
  return none;
#endif
}

}  // namespace blockpilot
