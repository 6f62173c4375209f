// CHECK_CUDA for the kernel-bench tools (programs, not the library: a failed CUDA call ends the run with a message).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                                  \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)
