// Compiler portability macros shared by host (.hpp) and device (.cuh) code.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define BLOCKPILOT_HOST_DEVICE __host__ __device__
#else
#define BLOCKPILOT_HOST_DEVICE
#endif

// Before a host/device function template that calls the callables it is given, which may be device-only.
#if defined(__CUDACC__)
#define BLOCKPILOT_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define BLOCKPILOT_EXEC_CHECK_DISABLE
#endif
