// conccl::ops::AllGatherMatmul: C = allgather(A_shard) @ B, the all-gather feeding a GEMM chunk by chunk
// (tensor parallelism's column-parallel input, issue 15 item 2). Header-only, so that libconccl itself does not
// depend on cuBLAS: include it and link cuBLASLt (CUDA::cublasLt).
//
// How: concclAllGatherChunked moves the shards on copy engines and records one event per shard as it lands; a GEMM
// stream multiplies each shard by B as soon as its event fires (the rank's own shard first), one cuBLASLt matmul
// per shard, so the GEMM keeps the SMs while the copy engines bring the next shards. The caller's stream waits for
// the last GEMM. Row-major throughout: shard r of A is rows [r*mShard, (r+1)*mShard) of the gathered A, and its
// product is the same rows of C.
//
// Status: its GPU test passed on one H200 (2 and 3 ranks sharing the GPU, 2026-12-01); not yet run across GPUs. bf16
// and fp16 with fp32 accumulation; fp8 e4m3 with B given as [n, k] and unit scales (C in bf16).
#pragma once

#include <conccl/conccl.h>
#include <conccl/ops/detail/op_rank.hpp>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace conccl::ops {

struct AllGatherMatmulArgs {
  const void* aShard = nullptr;  // [mShard, k] row-major: this rank's rows of A
  void* aFull = nullptr;         // [nranks * mShard, k]: receives the gathered A (aShard may lie in it, in place)
  const void* b = nullptr;       // [k, n] row-major (or [n, k] with bTransposed), the same on every rank
  void* c = nullptr;             // [nranks * mShard, n] row-major: the product (bf16 when type is fp8)
  int64_t mShard = 0, n = 0, k = 0;
  // concclBfloat16 or concclFloat16, or concclFloat8e4m3 with bTransposed (unit scales; c in bf16); fp32 accumulation.
  concclDataType_t type = concclBfloat16;
  bool bTransposed = false;  // b is [n, k], as nn.Linear stores its weight (cuBLASLt's fp8 kernels need it)
};

// One per rank of a communicator (not thread-safe; a rank's calls come from one thread). Owns the shard events, the
// GEMM stream, the cuBLASLt handle and a workspace on the rank's device.
class AllGatherMatmul {
 public:
  explicit AllGatherMatmul(concclComm_t comm, size_t workspaceBytes = size_t{32} << 20) : rank_(comm, workspaceBytes) {
    if (!rank_.ok()) return;
    detail::DeviceScope scope(rank_.device());
    events_.resize(static_cast<size_t>(rank_.nranks()), nullptr);
    eventsOk_ = true;
    for (auto& e : events_) {
      eventsOk_ = eventsOk_ && cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess;
    }
  }
  ~AllGatherMatmul() {
    detail::DeviceScope scope(rank_.device());
    for (auto e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  AllGatherMatmul(const AllGatherMatmul&) = delete;
  AllGatherMatmul& operator=(const AllGatherMatmul&) = delete;

  // Whether the op could create its CUDA / cuBLASLt resources (every call fails with concclSystemError otherwise).
  bool ok() const { return rank_.ok() && eventsOk_; }

  // Enqueues the all-gather and the per-shard GEMMs; `stream` waits for all of them. Returns concclSuccess, or an
  // error with *error saying why (arguments, the collective, a CUDA or cuBLASLt call). For a thread per rank. One
  // thread driving several ranks must call gather() for every rank inside concclGroupStart/End, then multiply() for
  // every rank after concclGroupEnd (a group records the shard events only at its end).
  concclResult_t run(const AllGatherMatmulArgs& a, cudaStream_t stream, std::string* error) {
    concclResult_t res = gather(a, stream, error);
    return res != concclSuccess ? res : multiply(a, stream, error);
  }

  // The all-gather part: concclAllGatherChunked of the shards, recording this op's shard events.
  concclResult_t gather(const AllGatherMatmulArgs& a, cudaStream_t stream, std::string* error) {
    if (concclResult_t res = check(a, error); res != concclSuccess) return res;
    const size_t shardElems = static_cast<size_t>(a.mShard) * static_cast<size_t>(a.k);
    concclResult_t res =
        concclAllGatherChunked(a.aShard, a.aFull, shardElems, a.type, rank_.comm(), stream, events_.data());
    if (res != concclSuccess) {
      return fail(error, res, std::string("concclAllGatherChunked: ") + concclGetLastError(rank_.comm()));
    }
    return concclSuccess;
  }

  // The GEMM part: each shard's GEMM on the op's stream once the shard's event fired; `stream` waits for the last.
  concclResult_t multiply(const AllGatherMatmulArgs& a, cudaStream_t stream, std::string* error) {
    if (concclResult_t res = check(a, error); res != concclSuccess) return res;
    const size_t es = concclTypeSize(a.type), outEs = concclTypeSize(detail::gemmOutputType(a.type));
    const auto shardElems = static_cast<size_t>(a.mShard) * static_cast<size_t>(a.k);
    detail::DeviceScope scope(rank_.device());
    std::string why;
    // The GEMM stream starts after the caller's earlier work (B and C may have been written on `stream`).
    bool good = rank_.gemmStreamFollows(stream);
    // The own shard first (in place it is ready at once), then the peers in the order their "done" arrives.
    const int n = rank_.nranks();
    for (int i = 0; i < n && good; ++i) {
      const int r = (rank_.rank() + i) % n;
      const auto* shard = static_cast<const char*>(a.aFull) + static_cast<size_t>(r) * shardElems * es;
      auto* out = static_cast<char*>(a.c) + static_cast<size_t>(r) * static_cast<size_t>(a.mShard) *
                                              static_cast<size_t>(a.n) * outEs;
      good = cudaStreamWaitEvent(rank_.gemmStream(), events_[static_cast<size_t>(r)], 0) == cudaSuccess &&
             shardGemm(a, shard, out, &why);
    }
    good = good && rank_.streamJoinsGemm(stream);
    if (!good) return fail(error, concclUnhandledCudaError, why.empty() ? "a CUDA call failed" : why);
    return concclSuccess;
  }

 private:
  concclResult_t check(const AllGatherMatmulArgs& a, std::string* error) const {
    if (!ok()) return fail(error, concclSystemError, "the op could not create its CUDA / cuBLASLt resources");
    if (a.aShard == nullptr || a.aFull == nullptr || a.b == nullptr || a.c == nullptr) {
      return fail(error, concclInvalidArgument, "a NULL buffer");
    }
    if (a.mShard <= 0 || a.n <= 0 || a.k <= 0) return fail(error, concclInvalidArgument, "mShard, n and k must be > 0");
    if (!detail::gemmSupports(a.type, a.bTransposed)) {
      return fail(error, concclNotSupported,
                  "type must be concclBfloat16 or concclFloat16, or concclFloat8e4m3 with bTransposed");
    }
    return concclSuccess;
  }

  static concclResult_t fail(std::string* error, concclResult_t code, const std::string& why) {
    if (error != nullptr) *error = "conccl::ops::AllGatherMatmul: " + why;
    return code;
  }

  // out[mShard, n] = shard[mShard, k] @ B[k, n], row-major, on the op's stream.
  bool shardGemm(const AllGatherMatmulArgs& a, const void* shard, void* out, std::string* why) {
    return rank_.gemm().run(a.type, a.bTransposed, shard, a.k, a.b, a.bTransposed ? a.k : a.n, out, a.n, a.mShard, a.n,
                            a.k, rank_.gemmStream(), why);
  }

  detail::OpRank rank_;
  bool eventsOk_ = false;
  std::vector<cudaEvent_t> events_;  // [shard]: recorded by the chunked all-gather when the shard landed
};

}  // namespace conccl::ops
