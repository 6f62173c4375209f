// See graph_memory.h.
#include "exec/cuda/graph_memory.h"

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "exec/cuda/cuda_check.h"

namespace conccl::exec {

std::optional<PointerInfo> capturedAllocationOf(cudaStream_t stream, const void* ptr) {
  if (stream == nullptr) return std::nullopt;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph));
  if (status != cudaStreamCaptureStatusActive || graph == nullptr) return std::nullopt;
  size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemAlloc) continue;
    cudaMemAllocNodeParams params{};
    CUDA_CHECK(cudaGraphMemAllocNodeGetParams(node, &params));
    const auto base = reinterpret_cast<uintptr_t>(params.dptr);
    if (address < base || address - base >= params.bytesize) continue;
    PointerInfo info;
    info.memoryType = CU_MEMORYTYPE_DEVICE;
    info.device = params.poolProps.location.id;
    info.base = static_cast<CUdeviceptr>(base);
    info.size = params.bytesize;
    info.graphMemory = true;
    return info;
  }
  return std::nullopt;
}

}  // namespace conccl::exec
