// TEMPORARY, removed when include/conccl/ops/matmul_reduce_scatter.hpp lands on main (being written there now): the
// interface of conccl::ops::MatmulReduceScatter as agreed, so that conccl_ops.cc compiles before the merge. Every
// call fails with concclNotSupported; nothing here is the op itself.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace conccl::ops {

struct MatmulReduceScatterArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* partial = nullptr;
  void* c = nullptr;
  int64_t mShard = 0, n = 0, kShard = 0;
  concclDataType_t type = concclBfloat16;
  int slicesPerBlock = 4;
};

class MatmulReduceScatter {
 public:
  explicit MatmulReduceScatter(concclComm_t /*comm*/, size_t /*workspaceBytes*/ = size_t{32} << 20) {}
  concclResult_t run(const MatmulReduceScatterArgs& a, cudaStream_t stream, std::string* error) {
    return pending(a, stream, error);
  }
  concclResult_t multiply(const MatmulReduceScatterArgs& a, cudaStream_t stream, std::string* error) {
    return pending(a, stream, error);
  }
  concclResult_t reduceScatter(const MatmulReduceScatterArgs& a, cudaStream_t stream, std::string* error) {
    return pending(a, stream, error);
  }

 private:
  static concclResult_t pending(const MatmulReduceScatterArgs& /*a*/, cudaStream_t /*stream*/, std::string* error) {
    if (error != nullptr) *error = "conccl::ops::MatmulReduceScatter: not in this build yet (merge pending)";
    return concclNotSupported;
  }
};

}  // namespace conccl::ops
