// The x86-64 instruction-set levels that the CPU weight products are compiled for, and the one this
// CPU runs, found at run time: a program built for any x86-64 level picks its kernels on the machine
// that runs it, never at compile time.
#pragma once

#include <string>
#include <string_view>

#include "blockpilot/cpu/isa.hpp"
#include "blockpilot/status.hpp"

namespace blockpilot {

/// A compiled variant of the weight products, in increasing order of the CPU features it needs.
enum class cpu_isa {
  generic,  ///< the compiler's target for the translation unit (baseline x86-64, or any other CPU)
  avx2,     ///< AVX2 + FMA + F16C (x86-64-v3: Intel Haswell and later, AMD Zen and later)
  avx512,   ///< AVX-512 F/BW/VL/DQ + the above (x86-64-v4: Intel Skylake-SP and later, AMD Zen 4)
  avx512_vnni,  ///< avx512 + VNNI's int8 dot products (Intel Ice Lake and later, AMD Zen 4); the fp32
                ///< products run the avx512 kernels
  best,     ///< as an option: the highest variant this CPU runs
};

[[nodiscard]] inline std::string_view to_string(cpu_isa isa) {
  switch (isa) {
    case cpu_isa::generic: return "generic";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx512: return "avx512";
    case cpu_isa::avx512_vnni: return "avx512_vnni";
    case cpu_isa::best: return "best";
  }
  return "?";
}

/// The variant named `name` ("generic", "avx2", "avx512", "avx512_vnni", "best"); throws `error` otherwise.
[[nodiscard]] inline cpu_isa parse_cpu_isa(std::string_view name) {
  for (cpu_isa isa : {cpu_isa::generic, cpu_isa::avx2, cpu_isa::avx512, cpu_isa::avx512_vnni, cpu_isa::best})
    if (to_string(isa) == name) return isa;
  throw error("cpu_isa: '" + std::string(name) + "' is not one of generic, avx2, avx512, avx512_vnni, best");
}

/// The highest variant this CPU runs (cpu/isa.hpp).
[[nodiscard]] inline cpu_isa detected_cpu_isa() {
  const cpu_features& f = detected_cpu_features();
  return f.avx512_vnni ? cpu_isa::avx512_vnni : f.avx512 ? cpu_isa::avx512 : f.avx2 ? cpu_isa::avx2 : cpu_isa::generic;
}

/// `requested` made concrete: `best` becomes the detected variant; a variant this CPU cannot run
/// throws `error` naming both.
[[nodiscard]] inline cpu_isa resolve_cpu_isa(cpu_isa requested) {
  const cpu_isa found = detected_cpu_isa();
  if (requested == cpu_isa::best) return found;
  if (requested > found)
    throw error("cpu_isa: the " + std::string(to_string(requested)) + " kernels need instructions this CPU lacks (it runs " +
                std::string(to_string(found)) + ")");
  return requested;
}

}  // namespace blockpilot
