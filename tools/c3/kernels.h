// Small CUDA kernels of conccl-c3: random fill, an SM copy kernel (the SM-collective proxy on one GPU) and
// the start gate that releases all streams of a measurement at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace conccl::c3 {

// elemKind: 0 = bf16, 1 = fp16, 2 = fp8 e4m3, 3 = fp32. Values uniform in [-1, 1) from a hash of the index,
// so GEMM inputs are random but never overflow (fp8 e4m3 tops out at 448).
cudaError_t launchFillRandom(void* data, size_t elems, int elemKind, unsigned seed, cudaStream_t stream);

// Copies `bytes` (a multiple of 16, 16-byte aligned) with exactly `ctas` CTAs of 512 threads.
cudaError_t launchSmCopy(void* dst, const void* src, size_t bytes, int ctas, cudaStream_t stream);

// One thread that spins until *flag != 0 (host-mapped memory) or ~10 s have passed, so that every stream
// queued behind it starts together once the host has finished enqueuing (launch skew is not measured).
cudaError_t launchGate(const volatile int* flag, cudaStream_t stream);

}  // namespace conccl::c3
