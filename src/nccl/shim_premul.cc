// ncclRedOpCreatePreMulSum / ncclRedOpDestroy and the collectives that use such an op, on conccl communicators:
// sum over ranks of (scalar * x_r), pre-multiplied exactly as NCCL does (premul_ops.h says why it is not a sum
// followed by one multiplication). The multiplication runs on the caller's stream into per-communicator scratch
// memory (premul_scale.cu); conccl then sums the scratch. No host synchronisation, capturable.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nccl/nccl_abi.h"
#include "nccl/premul_ops.h"
#include "nccl/premul_scale.h"
#include "nccl/shim_comm.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

// The pool's device on conccl's CUDA backend. Scratch is cudaMalloc memory, not cudaMallocAsync: conccl shares
// buffers with other processes through CUDA IPC, which pool memory cannot do (conccl.h, concclCommInitRank).
// Allocation, freeing, event creation and queries and the user-object calls run in relaxed capture mode: they are not stream work, and
// must not invalidate a capture under way on this or another thread.
class CudaScratchDevice final : public ScratchDevice {
 public:
  void* alloc(size_t bytes) override {
    RelaxedCapture relaxed;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  // Called when conccl waited for the communicator's work (ncclCommDestroy), never after an abort, and at the limit
  // for idle blocks whose fence completed.
  void free(void* block) override {
    RelaxedCapture relaxed;
    cudaFree(block);
  }
  void* createFence() override {
    RelaxedCapture relaxed;
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return e;
  }
  void destroyFence(void* fence) override { cudaEventDestroy(static_cast<cudaEvent_t>(fence)); }
  bool recordFence(void* fence, const void* stream) override {
    // A stream that began capturing after the block was acquired would put the record into the graph: refuse (the
    // pool then never reuses the block).
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(toStream(stream), &status) != cudaSuccess || status != cudaStreamCaptureStatusNone) {
      cudaGetLastError();
      return false;
    }
    if (cudaEventRecord(static_cast<cudaEvent_t>(fence), toStream(stream)) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return true;
  }
  bool fenceDone(void* fence) override {
    // An event query is an unsafe call under a global-mode capture (PyTorch's default): without relaxed mode it
    // fails and invalidates the caller's capture (workloads.py graphs, one H200, 2026-12-03).
    RelaxedCapture relaxed;
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(fence));
    if (e == cudaSuccess) return true;
    cudaGetLastError();  // cudaErrorNotReady, or a failure: not done either way
    return false;
  }
  bool waitFence(const void* stream, void* fence) override {
    if (cudaStreamWaitEvent(toStream(stream), static_cast<cudaEvent_t>(fence), 0) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return true;
  }
  // The block's flag travels in a CUDA user object owned by the graph being captured; CUDA runs the destructor once
  // the graph and every executable graph instantiated from it are destroyed and their launches completed (the same
  // mechanism NCCL uses to reclaim its persistent plans). The destructor may not call CUDA: it only sets the flag,
  // which outlives the pool (shared), so a graph destroyed after its communicator touches nothing freed.
  bool attachToCapture(const void* stream, std::shared_ptr<std::atomic<bool>> released) override {
    RelaxedCapture relaxed;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaGraph_t graph = nullptr;
    if (cudaStreamGetCaptureInfo(toStream(stream), &status, nullptr, &graph) != cudaSuccess ||
        status != cudaStreamCaptureStatusActive || graph == nullptr) {
      cudaGetLastError();
      return false;
    }
    auto* payload = new GraphPayload{std::move(released)};
    cudaUserObject_t object = nullptr;
    if (cudaUserObjectCreate(&object, payload, &GraphPayload::onRelease, 1, cudaUserObjectNoDestructorSync) !=
        cudaSuccess) {
      cudaGetLastError();
      delete payload;
      return false;
    }
    if (cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove) != cudaSuccess) {
      cudaGetLastError();
      payload->released.reset();  // the release below runs the destructor: it must not hand the block back
      cudaUserObjectRelease(object, 1);
      return false;
    }
    return true;
  }

 private:
  struct RelaxedCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
    ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode); }
  };
  struct GraphPayload {
    std::shared_ptr<std::atomic<bool>> released;
    static void CUDART_CB onRelease(void* p) {
      auto* payload = static_cast<GraphPayload*>(p);
      if (payload->released) payload->released->store(true, std::memory_order_release);
      delete payload;
    }
  };
  static cudaStream_t toStream(const void* s) { return static_cast<cudaStream_t>(const_cast<void*>(s)); }
};

// conccl's host backend (the CPU tests): calls complete before they return, so every fence is done at once.
class HostScratchDevice final : public ScratchDevice {
 public:
  void* alloc(size_t bytes) override { return std::malloc(bytes); }
  void free(void* block) override { std::free(block); }
  void* createFence() override { return this; }  // never dereferenced
  void destroyFence(void*) override {}
  bool recordFence(void*, const void*) override { return true; }
  bool fenceDone(void*) override { return true; }
  bool waitFence(const void*, void*) override { return true; }
  bool attachToCapture(const void*, std::shared_ptr<std::atomic<bool>>) override { return false; }
};

}  // namespace

// The communicator's scratch, shared with the group bookkeeping below (a group may end after the communicator was
// destroyed: conccl then dropped its calls, and the group finds the pool gone).
struct PreMulScratch {
  std::mutex mutex;
  ScratchPool pool;
  PreMulScratch(bool host, size_t maxBytes)
      : pool(host ? std::unique_ptr<ScratchDevice>(new HostScratchDevice)
                  : std::unique_ptr<ScratchDevice>(new CudaScratchDevice),
             maxBytes) {}
};

struct PreMulState {
  std::mutex mutex;  // the op table
  PreMulOpTable ops;
  bool hostBackend = false;
  int device = -1;  // the communicator's CUDA device: scratch is allocated and the kernel launched there
  std::shared_ptr<PreMulScratch> scratch;
  PreMulState(bool host, int dev, size_t maxBytes)
      : hostBackend(host), device(dev), scratch(std::make_shared<PreMulScratch>(host, maxBytes)) {}
};

void PreMulStateDeleter::operator()(PreMulState* state) const { delete state; }

namespace {

PreMulState* stateOf(ncclComm_t comm, std::string* error) {
  if (comm->premul) return comm->premul.get();
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  if (concclCommGetConfig(comm->conccl, &config) != concclSuccess) {
    *error = std::string("concclCommGetConfig failed: ") + concclGetLastError(comm->conccl);
    return nullptr;
  }
  int device = -1;
  if (concclCommCuDevice(comm->conccl, &device) != concclSuccess) {
    *error = std::string("concclCommCuDevice failed: ") + concclGetLastError(comm->conccl);
    return nullptr;
  }
  comm->premul.reset(new PreMulState(config.backend == concclBackendHost, device,
                                     static_cast<size_t>(shim().env.scratchMaxBytes)));
  return comm->premul.get();
}

std::mutex& stateCreationMutex() {
  static std::mutex m;
  return m;
}

// The pools whose blocks the calling thread's open group holds (released at its end, once the collectives are
// launched or dropped).
thread_local std::vector<std::weak_ptr<PreMulScratch>> tlsGroupScratch;

// A region of the communicator's scratch for one call on `stream`; *block to hand back with releaseScratch.
ncclResult_t acquireScratch(ncclComm_t comm, PreMulState* s, cudaStream_t stream, size_t bytes, const char* call,
                            const char* what, void** region, int* block) {
  bool capturing = false;
  if (!s->hostBackend) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
      cudaGetLastError();
      return fail(comm, ncclUnhandledCudaError, std::string(call) + ": cudaStreamIsCapturing failed");
    }
    capturing = status == cudaStreamCaptureStatusActive;
  }
  const uint64_t epoch = groupEpoch();
  ScratchGrant g;
  {
    std::lock_guard<std::mutex> lock(s->scratch->mutex);
    g = s->scratch->pool.acquire(stream, bytes, capturing, epoch);
  }
  if (g.ptr == nullptr) return fail(comm, ncclSystemError, std::string(call) + ": " + what + ": " + g.error);
  if (epoch != 0) {
    bool known = false;
    for (const auto& w : tlsGroupScratch) known = known || w.lock() == s->scratch;
    if (!known) tlsGroupScratch.push_back(s->scratch);
  }
  *region = g.ptr;
  *block = g.block;
  return ncclSuccess;
}

// Outside groups the call's collective is enqueued when this runs: the block is fenced on its stream and reusable.
// Inside a group it stays held until the group ends (releaseGroupScratch).
void releaseScratch(PreMulState* s, int block) {
  if (groupEpoch() != 0) return;
  std::lock_guard<std::mutex> lock(s->scratch->mutex);
  s->scratch->pool.release(block);
}

}  // namespace

void releaseGroupScratch(uint64_t epoch) {
  std::vector<std::weak_ptr<PreMulScratch>> pools;
  pools.swap(tlsGroupScratch);
  for (auto& w : pools) {
    if (std::shared_ptr<PreMulScratch> p = w.lock()) {
      std::lock_guard<std::mutex> lock(p->mutex);
      p->pool.releaseGroup(epoch);
    }
  }
}

ncclResult_t createPreMulSum(ncclComm_t comm, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                             ncclScalarResidence_t residence) {
  if (op == nullptr || scalar == nullptr) {
    return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL");
  }
  const int type = static_cast<int>(datatype);
  if (!concclCanReduce(type, kSum)) {
    return fail(comm, ncclInvalidArgument,
                std::string("ncclRedOpCreatePreMulSum: conccl does not sum ") + ncclTypeName(type));
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    return fail(comm, ncclInvalidArgument,
                "ncclRedOpCreatePreMulSum: residence " + std::to_string(static_cast<int>(residence)) + " is not one");
  }
  if (comm->conccl == nullptr) {
    return fail(comm, ncclInvalidUsage, "ncclRedOpCreatePreMulSum: the communicator's init failed or waits for "
                                        "ncclGroupEnd");
  }
  // HostImmediate: ncclTypeBytes(type) bytes read now; Device: read by the kernel when the collective runs (NCCL).
  PreMulOp p = makePreMulOp(type, scalar, residence == ncclScalarDevice);
  std::string error;
  PreMulState* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(stateCreationMutex());
    s = stateOf(comm, &error);
  }
  if (s == nullptr) return fail(comm, ncclInternalError, "ncclRedOpCreatePreMulSum: " + error);
  if (p.onDevice && s->hostBackend) {
    return fail(comm, ncclInvalidArgument,
                "ncclRedOpCreatePreMulSum: a device scalar on a host-backend communicator (CONCCL_BACKEND=host)");
  }
  std::lock_guard<std::mutex> lock(s->mutex);
  *op = static_cast<ncclRedOp_t>(s->ops.create(p));
  return ncclSuccess;
}

ncclResult_t destroyPreMulSum(ncclComm_t comm, ncclRedOp_t op) {
  // Safe right after the collective call returned: the call already enqueued the multiplication with the scalar
  // (or its device address) as a kernel argument, which is what NCCL allows too (PyTorch destroys the op then).
  PreMulState* s = comm->premul.get();
  bool destroyed = false;
  if (s != nullptr) {
    std::lock_guard<std::mutex> lock(s->mutex);
    destroyed = s->ops.destroy(static_cast<int>(op));
  }
  if (!destroyed) {
    return fail(comm, ncclInvalidArgument,
                "ncclRedOpDestroy: op " + std::to_string(static_cast<int>(op)) +
                    " was not made by ncclRedOpCreatePreMulSum on this communicator (or is destroyed already)");
  }
  return ncclSuccess;
}

void forgetPreMulScratch(ncclComm_t comm) {
  if (comm->premul) {
    std::lock_guard<std::mutex> lock(comm->premul->scratch->mutex);
    comm->premul->scratch->pool.forget();
  }
}

ncclResult_t runWithStagedInput(ncclComm_t comm, const void* sendbuff, size_t bytes, cudaStream_t stream,
                                const char* call, const std::function<ncclResult_t(const void* staged)>& run) {
  PreMulState* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(stateCreationMutex());
    std::string error;
    s = stateOf(comm, &error);
    if (s == nullptr) return fail(comm, ncclInternalError, std::string(call) + ": " + error);
  }
  std::optional<CudaDeviceGuard> guard;
  if (!s->hostBackend) {
    guard.emplace(s->device);
    if (!guard->ok()) {
      return fail(comm, ncclUnhandledCudaError,
                  std::string(call) + ": cudaSetDevice(" + std::to_string(s->device) + ") failed");
    }
  }
  void* scratch = nullptr;
  int block = -1;
  if (ncclResult_t r = acquireScratch(comm, s, stream, bytes, call, "staging the in-place input", &scratch, &block);
      r != ncclSuccess) {
    return r;
  }
  ncclResult_t r = ncclSuccess;
  if (s->hostBackend) {
    std::memcpy(scratch, sendbuff, bytes);
  } else if (cudaError_t e = cudaMemcpyAsync(scratch, sendbuff, bytes, cudaMemcpyDeviceToDevice, stream);
             e != cudaSuccess) {
    cudaGetLastError();
    r = fail(comm, ncclUnhandledCudaError,
             std::string(call) + ": staging the in-place input failed: " + cudaGetErrorString(e));
  }
  if (r == ncclSuccess) r = run(scratch);
  releaseScratch(s, block);
  return r;
}

ncclResult_t runPreMulSum(ncclComm_t comm, Coll coll, const void* sendbuff, void* recvbuff, size_t count,
                          size_t inputCount, ncclDataType_t datatype, ncclRedOp_t op, int root, cudaStream_t stream,
                          const char* call) {
  const int type = static_cast<int>(datatype);
  // The same checks as a built-in sum (CONCCL_NCCL_COLLS, the type), then the op's own.
  Decision d = routeCall(shim().env, Path::kConccl, coll, type, kSum);
  if (d.path != Path::kConccl) return fail(comm, ncclInvalidArgument, std::string(call) + ": " + d.reason);
  PreMulState* s = comm->premul.get();
  if (s == nullptr) {
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": op " + std::to_string(static_cast<int>(op)) +
                    " was not made by ncclRedOpCreatePreMulSum on this communicator");
  }
  void* scratch = nullptr;
  int block = -1;
  PreMulOp p;
  std::optional<CudaDeviceGuard> guard;
  if (!s->hostBackend) {
    guard.emplace(s->device);
    if (!guard->ok()) {
      return fail(comm, ncclUnhandledCudaError,
                  std::string(call) + ": cudaSetDevice(" + std::to_string(s->device) + ") failed");
    }
  }
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    std::optional<PreMulOp> found = s->ops.find(static_cast<int>(op));
    if (!found) {
      return fail(comm, ncclInvalidArgument,
                  std::string(call) + ": op " + std::to_string(static_cast<int>(op)) +
                      " was not made by ncclRedOpCreatePreMulSum on this communicator (or was destroyed)");
    }
    p = *found;
  }
  if (p.ncclType != type) {
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": the op was made for " + ncclTypeName(p.ncclType) + ", the call passes " +
                    ncclTypeName(type));
  }
  if (inputCount > 0 && sendbuff == nullptr) {
    return fail(comm, ncclInvalidArgument, std::string(call) + ": sendbuff is NULL");
  }
  if (inputCount > 0) {
    if (ncclResult_t r = acquireScratch(comm, s, stream, inputCount * ncclTypeBytes(type), call,
                                        "the pre-multiplied input", &scratch, &block);
        r != ncclSuccess) {
      return r;
    }
    ncclResult_t r = ncclSuccess;
    if (s->hostBackend) {
      if (!preMultiplyOnHost(scratch, sendbuff, inputCount, type, p.scalarBits)) {
        r = fail(comm, ncclInvalidArgument,
                 std::string(call) + ": the host backend does not pre-multiply " + ncclTypeName(type));
      }
    } else {
      cudaError_t e = launchPreMultiply(scratch, sendbuff, inputCount, type, p.scalarBits,
                                        p.onDevice ? p.devScalar : nullptr, stream);
      if (e != cudaSuccess) {
        r = fail(comm, ncclUnhandledCudaError,
                 std::string(call) + ": the pre-multiply kernel did not launch: " + cudaGetErrorString(e));
      }
    }
    if (r != ncclSuccess) {
      releaseScratch(s, block);
      return r;
    }
  }
  const void* in = inputCount > 0 ? scratch : sendbuff;
  concclDataType_t t = *toConcclType(type);
  concclResult_t cr = concclInvalidArgument;
  switch (coll) {
    case Coll::kAllReduce:
      cr = concclAllReduce(in, recvbuff, count, t, concclSum, comm->conccl, stream);
      break;
    case Coll::kReduce:
      cr = concclReduce(in, recvbuff, count, t, concclSum, root, comm->conccl, stream);
      break;
    case Coll::kReduceScatter:
      cr = concclReduceScatter(in, recvbuff, count, t, concclSum, comm->conccl, stream);
      break;
    default:
      if (inputCount > 0) releaseScratch(s, block);
      return fail(comm, ncclInvalidArgument, std::string(call) + ": a PreMulSum op on a call without a reduction");
  }
  if (inputCount > 0) releaseScratch(s, block);
  return fromConccl(comm, cr, call);
}

}  // namespace conccl::nccl
