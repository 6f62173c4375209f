// conccl::ops::MatmulReduceScatter: C_shard = reduce_scatter(A @ B_shard), a GEMM feeding a reduce-scatter piece by
// piece (tensor parallelism's row-parallel output, issue 15 item 2). Header-only, so that libconccl itself does not
// depend on cuBLAS: include it and link cuBLASLt (CUDA::cublasLt).
//
// How: every rank holds A [m, kShard] (its K-columns) and B_shard [kShard, n] (its K-rows), so its partial product
// P = A @ B_shard is [m, n], and rank q's result is rows [q*mShard, (q+1)*mShard) of the sum of every rank's P. The
// GEMM runs on the op's stream in pieces: slicesPerBlock row slices of each destination block, slice by slice, the
// peers' blocks before the rank's own, and records one event per piece. concclReduceScatterChunked, enqueued on the
// caller's stream right away, pushes each piece to its owner on copy engines as soon as its event fires, so the
// transfers run while the GEMM computes the next pieces and the GEMM keeps the SMs; each owner reduces a slice of
// its block once every rank's piece of it has arrived. Row-major throughout.
//
// Status: tests/gpu/test_gpu_matmul_reduce_scatter.cc (against the unfused computation) passed on one H200 with ranks
// sharing the GPU (2026-12-01); not yet run across GPUs. bf16 and fp16 with fp32 accumulation in the GEMM, the sum in
// the same type; fp8 e4m3 with B given as [n, kShard] and unit scales (partial products and result in bf16).
#pragma once

#include <conccl/conccl.h>
#include <conccl/ops/detail/op_rank.hpp>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace conccl::ops {

struct MatmulReduceScatterArgs {
  const void* a = nullptr;  // [nranks * mShard, kShard] row-major: this rank's K-columns of A
  const void* b = nullptr;  // [kShard, n] row-major (or [n, kShard] with bTransposed): this rank's K-rows of B
  void* partial = nullptr;  // [nranks * mShard, n] row-major: workspace receiving this rank's partial product
  void* c = nullptr;        // [mShard, n] row-major: this rank's rows of the sum over ranks of the partials
  int64_t mShard = 0, n = 0, kShard = 0;
  // concclBfloat16 or concclFloat16, or concclFloat8e4m3 with bTransposed (unit scales; partial and c in bf16, the
  // reduction in bf16); fp32 accumulation in the GEMM.
  concclDataType_t type = concclBfloat16;
  bool bTransposed = false;  // b is [n, kShard], as nn.Linear stores its weight (cuBLASLt's fp8 kernels need it)
  // GEMM pieces per destination block, 1..64; lowered to the largest divisor of mShard not above it, so that every
  // piece is whole rows (the reduce-scatter's pieces must be exactly the GEMM's).
  int slicesPerBlock = 4;
};

// One per rank of a communicator (not thread-safe; a rank's calls come from one thread). Owns the piece events, the
// GEMM stream and the cuBLASLt state on the rank's device.
class MatmulReduceScatter {
 public:
  explicit MatmulReduceScatter(concclComm_t comm, size_t workspaceBytes = size_t{32} << 20)
      : rank_(comm, workspaceBytes) {}
  ~MatmulReduceScatter() {
    detail::DeviceScope scope(rank_.device());
    for (auto e : events_) cudaEventDestroy(e);
  }
  MatmulReduceScatter(const MatmulReduceScatter&) = delete;
  MatmulReduceScatter& operator=(const MatmulReduceScatter&) = delete;

  // Whether the op could create its CUDA / cuBLASLt resources (every call fails with concclSystemError otherwise).
  bool ok() const { return rank_.ok(); }

  // multiply() then reduceScatter(): for a thread per rank. `stream` ends after the result is in c. Returns
  // concclSuccess, or an error with *error saying why (arguments, a CUDA or cuBLASLt call, the collective).
  concclResult_t run(const MatmulReduceScatterArgs& a, cudaStream_t stream, std::string* error) {
    concclResult_t res = multiply(a, stream, error);
    return res != concclSuccess ? res : reduceScatter(a, stream, error);
  }

  // The GEMM pieces on the op's stream (after `stream`'s earlier work), one event per piece. One thread driving
  // several ranks calls multiply() for every rank, then concclGroupStart(), reduceScatter() for every rank and
  // concclGroupEnd().
  concclResult_t multiply(const MatmulReduceScatterArgs& a, cudaStream_t stream, std::string* error) {
    if (concclResult_t res = check(a, error); res != concclSuccess) return res;
    detail::DeviceScope scope(rank_.device());
    std::string why;
    const int slices = slicesFor(a);
    bool good = ensureEvents(slices) && rank_.gemmStreamFollows(stream);
    const int64_t sliceRows = a.mShard / slices;
    const size_t es = concclTypeSize(a.type), outEs = concclTypeSize(detail::gemmOutputType(a.type));
    // Slice by slice, the peers' blocks first (their pieces travel while the GEMM goes on), the own block last.
    const int n = rank_.nranks();
    for (int s = 0; s < slices && good; ++s) {
      for (int o = 1; o <= n && good; ++o) {
        const int q = (rank_.rank() + o) % n;
        const int64_t row = static_cast<int64_t>(q) * a.mShard + s * sliceRows;
        const auto* aRows = static_cast<const char*>(a.a) + static_cast<size_t>(row * a.kShard) * es;
        auto* out = static_cast<char*>(a.partial) + static_cast<size_t>(row * a.n) * outEs;
        good = rank_.gemm().run(a.type, a.bTransposed, aRows, a.kShard, a.b, a.bTransposed ? a.kShard : a.n, out, a.n,
                                sliceRows, a.n, a.kShard, rank_.gemmStream(), &why) &&
               cudaEventRecord(events_[static_cast<size_t>(q * slices + s)], rank_.gemmStream()) == cudaSuccess;
      }
    }
    if (!good) return fail(error, concclUnhandledCudaError, why.empty() ? "a CUDA call failed" : why);
    recordedSlices_ = slices;
    return concclSuccess;
  }

  // The reduce-scatter of the partial product into c, each piece sent once its event fired. Call after multiply().
  concclResult_t reduceScatter(const MatmulReduceScatterArgs& a, cudaStream_t stream, std::string* error) {
    if (concclResult_t res = check(a, error); res != concclSuccess) return res;
    if (recordedSlices_ != slicesFor(a)) {
      return fail(error, concclInvalidUsage, "call multiply() with these arguments first");
    }
    const size_t recvcount = static_cast<size_t>(a.mShard) * static_cast<size_t>(a.n);
    concclResult_t res = concclReduceScatterChunked(a.partial, a.c, recvcount, detail::gemmOutputType(a.type),
                                                    concclSum, rank_.comm(), stream,
                                                    recordedSlices_, events_.data());
    if (res != concclSuccess) {
      return fail(error, res, std::string("concclReduceScatterChunked: ") + concclGetLastError(rank_.comm()));
    }
    return concclSuccess;
  }

 private:
  int slicesFor(const MatmulReduceScatterArgs& a) const {
    int slices = a.slicesPerBlock;
    while (slices > 1 && a.mShard % slices != 0) --slices;
    return slices;
  }

  bool ensureEvents(int slices) {
    const size_t want = static_cast<size_t>(rank_.nranks()) * static_cast<size_t>(slices);
    while (events_.size() < want) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return false;
      events_.push_back(e);
    }
    return true;
  }

  concclResult_t check(const MatmulReduceScatterArgs& a, std::string* error) const {
    if (!ok()) return fail(error, concclSystemError, "the op could not create its CUDA / cuBLASLt resources");
    if (a.a == nullptr || a.b == nullptr || a.partial == nullptr || a.c == nullptr) {
      return fail(error, concclInvalidArgument, "a NULL buffer");
    }
    if (a.mShard <= 0 || a.n <= 0 || a.kShard <= 0) {
      return fail(error, concclInvalidArgument, "mShard, n and kShard must be > 0");
    }
    if (a.slicesPerBlock < 1 || a.slicesPerBlock > 64) {
      return fail(error, concclInvalidArgument,
                  "slicesPerBlock = " + std::to_string(a.slicesPerBlock) + " is outside 1..64");
    }
    if (!detail::gemmSupports(a.type, a.bTransposed)) {
      return fail(error, concclNotSupported,
                  "type must be concclBfloat16 or concclFloat16, or concclFloat8e4m3 with bTransposed");
    }
    return concclSuccess;
  }

  static concclResult_t fail(std::string* error, concclResult_t code, const std::string& why) {
    if (error != nullptr) *error = "conccl::ops::MatmulReduceScatter: " + why;
    return code;
  }

  detail::OpRank rank_;
  int recordedSlices_ = 0;  // slices of the last multiply(): what reduceScatter() hands to the collective
  std::vector<cudaEvent_t> events_;  // [block * slices + slice]
};

}  // namespace conccl::ops
