// libconccl_ops: the C interface (include/conccl/ops/conccl_ops.h) of the header-only fused ops, for callers without
// C++ (Python ctypes). A layer on top of the public API only, like the NCCL shim: it includes no private header of
// src/ and links libconccl.so, so a communicator made through libconccl (concclCommInitAll from Python) is the one the
// ops use. Exceptions inside, result codes and a thread-local message at the boundary; never prints, never exits.
#include <conccl/conccl.h>
#include <conccl/ops/conccl_ops.h>
#include <cuda_runtime_api.h>

#include <conccl/ops/all_gather_matmul.hpp>
#include <conccl/ops/matmul_reduce_scatter.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace conccl::ops {
namespace {

// A failure on its way to the C boundary.
struct OpsError {
  concclResult_t code;
  std::string message;
};

void require(bool condition, concclResult_t code, const std::string& message) {
  if (!condition) throw OpsError{code, message};
}

thread_local std::string tlsLastError;

// Runs `body` and turns what it throws into a result code plus the thread's last-error message.
template <typename Body>
concclResult_t boundary(const char* api, Body&& body) noexcept {
  concclResult_t code = concclSuccess;
  std::string message;
  try {
    body();
    return concclSuccess;
  } catch (const OpsError& e) {
    code = e.code;
    message = e.message;
  } catch (const std::bad_alloc&) {
    code = concclSystemError;
    message = "out of host memory";
  } catch (const std::exception& e) {
    code = concclInternalError;
    message = std::string("unexpected exception: ") + e.what();
  } catch (...) {
    code = concclInternalError;
    message = "unknown exception";
  }
  try {
    tlsLastError = std::string(api) + ": " + message;
  } catch (...) {
    tlsLastError.clear();  // no memory even for the message: the code alone
  }
  return code;
}

// What a live CUDA-backend communicator says about its rank.
struct RankInfo {
  int nranks = 0, rank = 0, device = -1;
  bool operator==(const RankInfo&) const = default;
};

// comm must be a live communicator of the CUDA backend. `who` names it in messages ("comm", "comms[2]").
RankInfo cudaRankOf(concclComm_t comm, const std::string& who) {
  require(comm != nullptr, concclInvalidArgument, who + " is NULL");
  RankInfo info;
  auto query = [&](concclResult_t res) {
    // A dead communicator's own message is gone with it: conccl also keeps the thread's last failure.
    if (res != concclSuccess) throw OpsError{res, who + ": " + concclGetLastError(nullptr)};
  };
  query(concclCommCount(comm, &info.nranks));
  query(concclCommUserRank(comm, &info.rank));
  query(concclCommCuDevice(comm, &info.device));
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  query(concclCommGetConfig(comm, &config));
  require(config.backend == concclBackendCuda && info.device >= 0, concclNotSupported,
          who + " is a host-backend communicator; the fused ops run on the CUDA backend only");
  return info;
}

void checkSizes(int64_t mShard, int64_t n, int64_t k, const char* kName) {
  require(mShard > 0 && n > 0 && k > 0, concclInvalidArgument,
          "mShard, n and " + std::string(kName) + " must be > 0 (got mShard=" + std::to_string(mShard) +
              " n=" + std::to_string(n) + " " + kName + "=" + std::to_string(k) + ")");
}

// Only bf16 and fp16 have GEMMs here (fp32 accumulation); any other valid type is a request this build cannot serve.
void checkType(concclDataType_t type) {
  const int t = static_cast<int>(type);
  require(t >= 0 && t < static_cast<int>(concclNumTypes), concclInvalidArgument,
          "type " + std::to_string(t) + " is not a concclDataType_t");
  require(type == concclBfloat16 || type == concclFloat16, concclNotSupported,
          "type " + std::to_string(t) + ": only concclBfloat16 and concclFloat16 are implemented");
}

// rows x cols elements of 2 bytes (bf16 / fp16), refused when the byte count overflows what a pointer can address.
size_t matrixBytes(int64_t rows, int64_t cols, const char* name) {
  size_t elems = 0, bytes = 0;
  const bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), &elems) ||
                        __builtin_mul_overflow(elems, size_t{2}, &bytes) ||
                        bytes > static_cast<size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  require(!overflow, concclInvalidArgument,
          std::string(name) + " of " + std::to_string(rows) + " x " + std::to_string(cols) +
              " elements: the byte count overflows");
  return bytes;
}

// Rows of the full (all ranks') matrix: nranks * mShard, refused on overflow.
int64_t fullRows(int nranks, int64_t mShard) {
  int64_t rows = 0;
  require(!__builtin_mul_overflow(static_cast<int64_t>(nranks), mShard, &rows), concclInvalidArgument,
          "nranks x mShard overflows");
  return rows;
}

// `p` must be device memory of `device` (or managed memory). Catches a host pointer or a tensor on the wrong GPU
// before a GEMM reads it.
void checkDevicePointer(const void* p, const std::string& name, int device) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but clear it so that the caller's next check does not see it
    throw OpsError{concclInvalidArgument, name + " is not a CUDA pointer (" + cudaGetErrorString(e) + ")"};
  }
  if (attr.type == cudaMemoryTypeManaged) return;
  require(attr.type == cudaMemoryTypeDevice, concclInvalidArgument,
          name + " is not device memory (host or unregistered memory)");
  require(attr.device == device, concclInvalidArgument,
          name + " is memory of device " + std::to_string(attr.device) + "; the rank runs on device " +
              std::to_string(device));
}

std::string rankPrefix(size_t i) { return "comms[" + std::to_string(i) + "]: "; }

void checkGroupRanks(const std::vector<RankInfo>& infos) {
  for (size_t i = 1; i < infos.size(); ++i) {
    require(infos[i].nranks == infos[0].nranks, concclInvalidArgument,
            "comms[" + std::to_string(i) + "] has " + std::to_string(infos[i].nranks) + " ranks, comms[0] " +
                std::to_string(infos[0].nranks) + ": not one communicator's ranks");
    for (size_t j = 0; j < i; ++j) {
      require(infos[i].rank != infos[j].rank, concclInvalidArgument,
              "comms[" + std::to_string(j) + "] and comms[" + std::to_string(i) + "] are both rank " +
                  std::to_string(infos[i].rank));
    }
  }
}

// One rank's arguments are checked in two steps, cheapest first: what needs no communicator (NULLs, sizes, type),
// then what needs it (a live CUDA-backend communicator, the full matrices' sizes, the buffers on the rank's device).
// No CUDA call is made before the communicator is known to be a CUDA one. A group checks the first step for every
// rank before the second. `who` prefixes the messages of a group's entries ("comms[1]: ").
template <typename Check>
auto withPrefix(const std::string& who, Check&& check) {
  try {
    return check();
  } catch (OpsError& e) {
    e.message = who + e.message;
    throw;
  }
}

void checkArgs(concclComm_t comm, const AllGatherMatmulArgs& a, const std::string& who) {
  withPrefix(who, [&] {
    require(comm != nullptr, concclInvalidArgument, "comm is NULL");
    require(a.aShard != nullptr, concclInvalidArgument, "aShard is NULL");
    require(a.aFull != nullptr, concclInvalidArgument, "aFull is NULL");
    require(a.b != nullptr, concclInvalidArgument, "b is NULL");
    require(a.c != nullptr, concclInvalidArgument, "c is NULL");
    checkSizes(a.mShard, a.n, a.k, "k");
    checkType(a.type);
    matrixBytes(a.k, a.n, "b");
  });
}

RankInfo checkOnComm(concclComm_t comm, const AllGatherMatmulArgs& a, const std::string& who) {
  return withPrefix(who, [&] {
    const RankInfo info = cudaRankOf(comm, "comm");
    const int64_t m = fullRows(info.nranks, a.mShard);
    matrixBytes(m, a.k, "aFull");
    matrixBytes(m, a.n, "c");
    checkDevicePointer(a.aShard, "aShard", info.device);
    checkDevicePointer(a.aFull, "aFull", info.device);
    checkDevicePointer(a.b, "b", info.device);
    checkDevicePointer(a.c, "c", info.device);
    return info;
  });
}

void checkArgs(concclComm_t comm, const MatmulReduceScatterArgs& a, const std::string& who) {
  withPrefix(who, [&] {
    require(comm != nullptr, concclInvalidArgument, "comm is NULL");
    require(a.a != nullptr, concclInvalidArgument, "a is NULL");
    require(a.b != nullptr, concclInvalidArgument, "b is NULL");
    require(a.partial != nullptr, concclInvalidArgument, "partial is NULL");
    require(a.c != nullptr, concclInvalidArgument, "c is NULL");
    checkSizes(a.mShard, a.n, a.kShard, "kShard");
    checkType(a.type);
    matrixBytes(a.kShard, a.n, "b");
    matrixBytes(a.mShard, a.n, "c");
  });
}

RankInfo checkOnComm(concclComm_t comm, const MatmulReduceScatterArgs& a, const std::string& who) {
  return withPrefix(who, [&] {
    const RankInfo info = cudaRankOf(comm, "comm");
    const int64_t m = fullRows(info.nranks, a.mShard);
    matrixBytes(m, a.kShard, "a");
    matrixBytes(m, a.n, "partial");
    checkDevicePointer(a.a, "a", info.device);
    checkDevicePointer(a.b, "b", info.device);
    checkDevicePointer(a.partial, "partial", info.device);
    checkDevicePointer(a.c, "c", info.device);
    return info;
  });
}

// Both steps for the group variants: every rank's first step, then every rank's second; then the ranks must be
// distinct ranks of one rank count.
template <typename Args>
std::vector<RankInfo> checkGroup(concclComm_t* comms, const std::vector<Args>& args) {
  for (size_t i = 0; i < args.size(); ++i) checkArgs(comms[i], args[i], rankPrefix(i));
  std::vector<RankInfo> infos(args.size());
  for (size_t i = 0; i < args.size(); ++i) infos[i] = checkOnComm(comms[i], args[i], rankPrefix(i));
  checkGroupRanks(infos);
  return infos;
}

// One op object of each kind per communicator, created on first use. The lock guards the map only: a rank's calls
// come from one thread (the ops are not thread-safe per rank), and different ranks have different objects.
class OpCache {
 public:
  // Never destroyed: at process exit the CUDA runtime may already be torn down, and the op objects' destructors
  // call it. The OS reclaims the memory.
  static OpCache& instance() {
    static OpCache* cache = new OpCache;
    return *cache;
  }

  // comm's op, made on first use. Throws concclSystemError (and keeps nothing, so that the next call retries) when
  // the op could not create its CUDA / cuBLASLt resources: known before any collective is issued, so that a group
  // never starts with one rank missing (its peers would wait for it until the communicator's timeout).
  AllGatherMatmul& allGatherMatmul(concclComm_t comm, const RankInfo& info) {
    std::lock_guard<std::mutex> lock(mutex_);
    CommOps& ops = entry(comm, info);
    if (!ops.allGatherMatmul) {
      auto op = std::make_unique<AllGatherMatmul>(comm);
      require(op->ok(), concclSystemError,
              "conccl::ops::AllGatherMatmul could not create its CUDA / cuBLASLt resources");
      ops.allGatherMatmul = std::move(op);
    }
    return *ops.allGatherMatmul;
  }

  MatmulReduceScatter& matmulReduceScatter(concclComm_t comm, const RankInfo& info) {
    std::lock_guard<std::mutex> lock(mutex_);
    CommOps& ops = entry(comm, info);
    if (!ops.matmulReduceScatter) {
      auto op = std::make_unique<MatmulReduceScatter>(comm);
      require(op->ok(), concclSystemError,
              "conccl::ops::MatmulReduceScatter could not create its CUDA / cuBLASLt resources");
      ops.matmulReduceScatter = std::move(op);
    }
    return *ops.matmulReduceScatter;
  }

  // Drops comm's op objects.
  void release(concclComm_t comm) {
    CommOps dropped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = ops_.find(comm);
      if (it == ops_.end()) return;
      dropped = std::move(it->second);
      ops_.erase(it);
    }
    // Destroyed outside the lock: destroying CUDA resources may wait for the device.
  }

 private:
  struct CommOps {
    RankInfo info;
    std::unique_ptr<AllGatherMatmul> allGatherMatmul;
    std::unique_ptr<MatmulReduceScatter> matmulReduceScatter;
  };

  // comm's entry; one left by a destroyed communicator whose address was reused (not released by the caller) is
  // recognised by its rank, rank count or device and replaced. Called with the lock held.
  CommOps& entry(concclComm_t comm, const RankInfo& info) {
    auto it = ops_.find(comm);
    if (it != ops_.end() && !(it->second.info == info)) {
      ops_.erase(it);
      it = ops_.end();
    }
    if (it == ops_.end()) {
      it = ops_.emplace(comm, CommOps{}).first;
      it->second.info = info;
    }
    return it->second;
  }

  std::mutex mutex_;
  std::unordered_map<concclComm_t, CommOps> ops_;
};

// An op call's result: concclSuccess, or a throw with the op's message.
void opResult(concclResult_t res, const std::string& why) {
  if (res != concclSuccess) throw OpsError{res, why.empty() ? std::string(concclGetErrorString(res)) : why};
}

AllGatherMatmulArgs allGatherMatmulArgs(const void* aShard, void* aFull, const void* b, void* c, int64_t mShard,
                                        int64_t n, int64_t k, concclDataType_t type) {
  AllGatherMatmulArgs a;
  a.aShard = aShard;
  a.aFull = aFull;
  a.b = b;
  a.c = c;
  a.mShard = mShard;
  a.n = n;
  a.k = k;
  a.type = type;
  return a;
}

MatmulReduceScatterArgs matmulReduceScatterArgs(const void* aIn, const void* b, void* partial, void* c, int64_t mShard,
                                                int64_t n, int64_t kShard, concclDataType_t type) {
  MatmulReduceScatterArgs a;
  a.a = aIn;
  a.b = b;
  a.partial = partial;
  a.c = c;
  a.mShard = mShard;
  a.n = n;
  a.kShard = kShard;
  a.type = type;
  return a;
}

// The group variants' common checks: the arrays, nranks, and distinct communicators and ranks of one rank count.
void checkGroupArrays(int nranks, concclComm_t* comms, const std::vector<const void*>& arrays,
                      const std::vector<const char*>& names, cudaStream_t* streams) {
  require(nranks >= 1, concclInvalidArgument, "nranks must be >= 1 (got " + std::to_string(nranks) + ")");
  require(comms != nullptr, concclInvalidArgument, "comms is NULL");
  for (size_t i = 0; i < arrays.size(); ++i) {
    require(arrays[i] != nullptr, concclInvalidArgument, std::string(names[i]) + " is NULL");
  }
  require(streams != nullptr, concclInvalidArgument, "streams is NULL");
  for (int i = 0; i < nranks; ++i) {
    for (int j = 0; j < i; ++j) {
      require(comms[i] != comms[j], concclInvalidArgument,
              "comms[" + std::to_string(j) + "] and comms[" + std::to_string(i) + "] are the same communicator");
    }
  }
}

}  // namespace
}  // namespace conccl::ops

using conccl::ops::AllGatherMatmulArgs;
using conccl::ops::MatmulReduceScatterArgs;
using conccl::ops::OpCache;
using conccl::ops::OpsError;
using conccl::ops::RankInfo;
using conccl::ops::require;

extern "C" {

concclResult_t concclOpsAllGatherMatmul(concclComm_t comm, const void* aShard, void* aFull, const void* b, void* c,
                                        int64_t mShard, int64_t n, int64_t k, concclDataType_t type,
                                        cudaStream_t stream) {
  return conccl::ops::boundary("concclOpsAllGatherMatmul", [&] {
    const AllGatherMatmulArgs args = conccl::ops::allGatherMatmulArgs(aShard, aFull, b, c, mShard, n, k, type);
    conccl::ops::checkArgs(comm, args, "");
    const RankInfo info = conccl::ops::checkOnComm(comm, args, "");
    std::string why;
    conccl::ops::opResult(OpCache::instance().allGatherMatmul(comm, info).run(args, stream, &why), why);
  });
}

concclResult_t concclOpsMatmulReduceScatter(concclComm_t comm, const void* a, const void* b, void* partial, void* c,
                                            int64_t mShard, int64_t n, int64_t kShard, concclDataType_t type,
                                            cudaStream_t stream) {
  return conccl::ops::boundary("concclOpsMatmulReduceScatter", [&] {
    const MatmulReduceScatterArgs args =
        conccl::ops::matmulReduceScatterArgs(a, b, partial, c, mShard, n, kShard, type);
    conccl::ops::checkArgs(comm, args, "");
    const RankInfo info = conccl::ops::checkOnComm(comm, args, "");
    std::string why;
    conccl::ops::opResult(OpCache::instance().matmulReduceScatter(comm, info).run(args, stream, &why), why);
  });
}

concclResult_t concclOpsAllGatherMatmulGroup(int nranks, concclComm_t* comms, const void** aShard, void** aFull,
                                             const void** b, void** c, int64_t mShard, int64_t n, int64_t k,
                                             concclDataType_t type, cudaStream_t* streams) {
  return conccl::ops::boundary("concclOpsAllGatherMatmulGroup", [&] {
    conccl::ops::checkGroupArrays(nranks, comms, {aShard, aFull, b, c}, {"aShard", "aFull", "b", "c"}, streams);
    const auto count = static_cast<size_t>(nranks);
    std::vector<AllGatherMatmulArgs> args(count);
    for (size_t i = 0; i < count; ++i) {
      args[i] = conccl::ops::allGatherMatmulArgs(aShard[i], aFull[i], b[i], c[i], mShard, n, k, type);
    }
    const std::vector<RankInfo> infos = conccl::ops::checkGroup(comms, args);
    std::vector<conccl::ops::AllGatherMatmul*> rankOps(count);
    for (size_t i = 0; i < count; ++i) rankOps[i] = &OpCache::instance().allGatherMatmul(comms[i], infos[i]);

    // The all-gathers of every rank in one group (one thread cannot wait for its own other ranks), then the GEMMs:
    // the group records the shard events only at concclGroupEnd, so multiply() must come after it. Everything a
    // gather checks was checked above; should conccl still refuse one, the ranks already recorded wait for it at
    // concclGroupEnd until the communicator's timeout (concclTimeout), as for any incomplete group.
    require(concclGroupStart() == concclSuccess, concclInvalidUsage,
            std::string("concclGroupStart: ") + concclGetLastError(nullptr));
    concclResult_t first = concclSuccess;
    std::string firstWhy;
    for (size_t i = 0; i < count && first == concclSuccess; ++i) {
      std::string why;
      first = rankOps[i]->gather(args[i], streams[i], &why);
      if (first != concclSuccess) firstWhy = conccl::ops::rankPrefix(i) + why;
    }
    const concclResult_t end = concclGroupEnd();
    if (first == concclSuccess && end != concclSuccess) {
      first = end;
      firstWhy = std::string("concclGroupEnd: ") + concclGetLastError(nullptr);
    }
    require(first == concclSuccess, first, firstWhy);
    // Every rank's GEMMs, even after one failed: the gathers ran, and each rank's stream should reach its end.
    for (size_t i = 0; i < count; ++i) {
      std::string why;
      const concclResult_t res = rankOps[i]->multiply(args[i], streams[i], &why);
      if (res != concclSuccess && first == concclSuccess) {
        first = res;
        firstWhy = conccl::ops::rankPrefix(i) + why;
      }
    }
    require(first == concclSuccess, first, firstWhy);
  });
}

concclResult_t concclOpsMatmulReduceScatterGroup(int nranks, concclComm_t* comms, const void** a, const void** b,
                                                 void** partial, void** c, int64_t mShard, int64_t n, int64_t kShard,
                                                 concclDataType_t type, cudaStream_t* streams) {
  return conccl::ops::boundary("concclOpsMatmulReduceScatterGroup", [&] {
    conccl::ops::checkGroupArrays(nranks, comms, {a, b, partial, c}, {"a", "b", "partial", "c"}, streams);
    const auto count = static_cast<size_t>(nranks);
    std::vector<MatmulReduceScatterArgs> args(count);
    for (size_t i = 0; i < count; ++i) {
      args[i] = conccl::ops::matmulReduceScatterArgs(a[i], b[i], partial[i], c[i], mShard, n, kShard, type);
    }
    const std::vector<RankInfo> infos = conccl::ops::checkGroup(comms, args);
    std::vector<conccl::ops::MatmulReduceScatter*> rankOps(count);
    for (size_t i = 0; i < count; ++i) rankOps[i] = &OpCache::instance().matmulReduceScatter(comms[i], infos[i]);

    // Every rank's GEMM first (no collective has started: a failure here leaves no rank waiting for another), then
    // the reduce-scatters of every rank in one group.
    for (size_t i = 0; i < count; ++i) {
      std::string why;
      const concclResult_t res = rankOps[i]->multiply(args[i], streams[i], &why);
      if (res != concclSuccess) conccl::ops::opResult(res, conccl::ops::rankPrefix(i) + why);
    }
    require(concclGroupStart() == concclSuccess, concclInvalidUsage,
            std::string("concclGroupStart: ") + concclGetLastError(nullptr));
    concclResult_t first = concclSuccess;
    std::string firstWhy;
    for (size_t i = 0; i < count && first == concclSuccess; ++i) {
      std::string why;
      first = rankOps[i]->reduceScatter(args[i], streams[i], &why);
      if (first != concclSuccess) firstWhy = conccl::ops::rankPrefix(i) + why;
    }
    const concclResult_t end = concclGroupEnd();
    if (first == concclSuccess && end != concclSuccess) {
      first = end;
      firstWhy = std::string("concclGroupEnd: ") + concclGetLastError(nullptr);
    }
    require(first == concclSuccess, first, firstWhy);
  });
}

concclResult_t concclOpsReleaseComm(concclComm_t comm) {
  return conccl::ops::boundary("concclOpsReleaseComm", [&] {
    conccl::ops::require(comm != nullptr, concclInvalidArgument, "comm is NULL");
    OpCache::instance().release(comm);
  });
}

const char* concclOpsGetLastError(void) { return conccl::ops::tlsLastError.c_str(); }

}  // extern "C"
