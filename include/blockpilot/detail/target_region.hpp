// A region of functions compiled for named instruction-set extensions (GCC's push_options / target,
// clang's attribute push), whatever the translation unit's own target: the CPU kernels' variants live
// in such regions and are chosen at run time (cpu/isa.hpp). Inside a region GCC 12's false
// -W(maybe-)uninitialized on its AVX-512 intrinsics (_mm512_undefined_*, `__m512i __Y = __Y`) is silenced.
// A region adds its extensions to the translation unit's own: built with -march=native on an AVX-512
// machine, an AVX2 region may use AVX-512 too (which is why such a build belongs to its machine).
//   BLOCKPILOT_TARGET_BEGIN("avx2,fma,f16c")  ...functions...  BLOCKPILOT_TARGET_END
#pragma once

#define BLOCKPILOT_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define BLOCKPILOT_TARGET_BEGIN(features) \
  BLOCKPILOT_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define BLOCKPILOT_TARGET_END BLOCKPILOT_PRAGMA(clang attribute pop)
#else
#define BLOCKPILOT_TARGET_BEGIN(features)                                              \
  BLOCKPILOT_PRAGMA(GCC push_options) BLOCKPILOT_PRAGMA(GCC target(features))          \
  BLOCKPILOT_PRAGMA(GCC diagnostic push) BLOCKPILOT_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized") \
  BLOCKPILOT_PRAGMA(GCC diagnostic ignored "-Wuninitialized")
#define BLOCKPILOT_TARGET_END BLOCKPILOT_PRAGMA(GCC diagnostic pop) BLOCKPILOT_PRAGMA(GCC pop_options)
#endif
