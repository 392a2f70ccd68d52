// Compiler portability macros shared by host (.hpp) and device (.cuh) code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define BLOCKPILOT_HOST_DEVICE __host__ __device__
#else
#define BLOCKPILOT_HOST_DEVICE
#endif
