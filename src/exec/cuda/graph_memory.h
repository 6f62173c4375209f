// Memory of a stream-ordered allocation made inside a CUDA graph capture (a graph's memory allocation node): what
// cudaMallocAsync returns while its stream is being captured, e.g. PyTorch's cudaMallocAsync backend inside
// torch.cuda.graph. Its address belongs to the graph and is mapped only while the graph runs, so the driver's pointer
// query knows nothing of it at capture time (it reads as plain host memory). Calls captured into the same graph may
// use it like any device memory; no other process can map it.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "exec/cuda/ipc_import_table.h"

namespace conccl::exec {

// When `stream` is being captured and `ptr` lies in one of the capture's memory allocation nodes: that allocation,
// as device memory of its device (base and size from the node; no buffer id: it has none before the graph runs).
// nullopt otherwise. Walks the capture's nodes: called only for a pointer the driver's query does not know.
std::optional<PointerInfo> capturedAllocationOf(cudaStream_t stream, const void* ptr);

}  // namespace conccl::exec
