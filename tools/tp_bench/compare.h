// The GPU half of --check: the largest |got - ref| and the largest |ref| over two bf16 tensors, in one pass on the
// tensors' device (copying 100s of MiB per rank to the host would dominate the run).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace conccl::tp {

// result[0] = max |got[i] - ref[i]|, result[1] = max |ref[i]|, as float bits (non-negative floats order like their
// bits, so atomicMax on the bits is a float max; a NaN difference, as from a NaN-poisoned output that was never
// written, has larger bits than any number and wins). `result` (2 x uint32, device memory) must be zeroed first.
cudaError_t launchBf16MaxDiff(const void* got, const void* ref, size_t elems, unsigned* result, cudaStream_t stream);

}  // namespace conccl::tp
