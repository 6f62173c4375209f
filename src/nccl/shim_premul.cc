// ncclRedOpCreatePreMulSum / ncclRedOpDestroy and the collectives that use such an op, on conccl communicators:
// sum over ranks of (scalar * x_r), pre-multiplied exactly as NCCL does (premul_ops.h says why it is not a sum
// followed by one multiplication). The multiplication runs on the caller's stream into per-communicator scratch
// memory (premul_scale.cu); conccl then sums the scratch. No host synchronisation, capturable.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "nccl/nccl_abi.h"
#include "nccl/premul_ops.h"
#include "nccl/premul_scale.h"
#include "nccl/shim_comm.h"
#include "nccl/type_map.h"

namespace conccl::nccl {

struct PreMulState {
  std::mutex mutex;
  PreMulOpTable ops;
  bool hostBackend = false;
  int device = -1;  // the communicator's CUDA device: scratch is allocated and the kernel launched there
  ScratchArenas scratch;
  PreMulState(bool host, int dev)
      : hostBackend(host),
        device(dev),
        scratch(host ? ScratchArenas::Alloc([](size_t n) { return std::malloc(n); })
                     : ScratchArenas::Alloc(&allocDevice),
                host ? ScratchArenas::Free([](void* p) { std::free(p); }) : ScratchArenas::Free(&freeDevice)) {}

  // cudaMalloc, not cudaMallocAsync: conccl shares buffers with other processes through CUDA IPC, which pool
  // memory cannot do (conccl.h, concclCommInitRank). Relaxed capture mode for the call: cudaMalloc is not
  // captured (it runs now) and must not invalidate a capture under way on this or another thread.
  static void* allocDevice(size_t bytes) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  // Called after concclCommDestroy waited for the communicator's work (ncclCommDestroy), never after an abort.
  static void freeDevice(void* p) { cudaFree(p); }
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
  comm->premul.reset(new PreMulState(config.backend == concclBackendHost, device));
  return comm->premul.get();
}

std::mutex& stateCreationMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

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
  PreMulOp p;
  p.ncclType = type;
  p.onDevice = residence == ncclScalarDevice;
  if (p.onDevice) {
    p.devScalar = scalar;  // read by the kernel when the collective runs, as NCCL does
  } else {
    std::memcpy(&p.scalarBits, scalar, ncclTypeBytes(type));  // read now (HostImmediate)
  }
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
  if (s->hostBackend && (type == kFloat16 || type == kBfloat16)) {
    return fail(comm, ncclInvalidArgument,
                std::string("ncclRedOpCreatePreMulSum: the host backend (tests only) does not pre-multiply ") +
                    ncclTypeName(type));
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
    std::lock_guard<std::mutex> lock(comm->premul->mutex);
    comm->premul->scratch.forget();
  }
}

ncclResult_t stageInput(ncclComm_t comm, const void* sendbuff, size_t bytes, cudaStream_t stream, const char* call,
                        const void** staged) {
  PreMulState* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(stateCreationMutex());
    std::string error;
    s = stateOf(comm, &error);
    if (s == nullptr) return fail(comm, ncclInternalError, std::string(call) + ": " + error);
  }
  std::optional<CudaDeviceGuard> guard;
  bool capturing = false;
  if (!s->hostBackend) {
    guard.emplace(s->device);
    if (!guard->ok()) {
      return fail(comm, ncclUnhandledCudaError,
                  std::string(call) + ": cudaSetDevice(" + std::to_string(s->device) + ") failed");
    }
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
      cudaGetLastError();
      return fail(comm, ncclUnhandledCudaError, std::string(call) + ": cudaStreamIsCapturing failed");
    }
    capturing = status == cudaStreamCaptureStatusActive;
  }
  void* scratch = nullptr;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    scratch = s->scratch.acquire(stream, bytes, groupEpoch(), capturing);
  }
  if (scratch == nullptr) {
    return fail(comm, ncclSystemError,
                std::string(call) + ": no memory to stage the in-place input (" + std::to_string(bytes) + " bytes)");
  }
  if (s->hostBackend) {
    std::memcpy(scratch, sendbuff, bytes);
  } else if (cudaError_t e = cudaMemcpyAsync(scratch, sendbuff, bytes, cudaMemcpyDeviceToDevice, stream);
             e != cudaSuccess) {
    cudaGetLastError();
    return fail(comm, ncclUnhandledCudaError,
                std::string(call) + ": staging the in-place input failed: " + cudaGetErrorString(e));
  }
  *staged = scratch;
  return ncclSuccess;
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
    if (p.ncclType != type) {
      return fail(comm, ncclInvalidArgument,
                  std::string(call) + ": the op was made for " + ncclTypeName(p.ncclType) + ", the call passes " +
                      ncclTypeName(type));
    }
    if (inputCount > 0 && sendbuff == nullptr) {
      return fail(comm, ncclInvalidArgument, std::string(call) + ": sendbuff is NULL");
    }
    if (inputCount > 0) {
      bool capturing = false;
      if (!s->hostBackend) {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
          cudaGetLastError();
          return fail(comm, ncclUnhandledCudaError, std::string(call) + ": cudaStreamIsCapturing failed");
        }
        capturing = status == cudaStreamCaptureStatusActive;
      }
      scratch = s->scratch.acquire(stream, inputCount * ncclTypeBytes(type), groupEpoch(), capturing);
      if (scratch == nullptr) {
        return fail(comm, ncclSystemError,
                    std::string(call) + ": no memory for the pre-multiplied input (" +
                        std::to_string(inputCount * ncclTypeBytes(type)) + " bytes)");
      }
    }
  }
  if (inputCount > 0) {
    if (s->hostBackend) {
      if (!preMultiplyOnHost(scratch, sendbuff, inputCount, type, p.scalarBits)) {
        return fail(comm, ncclInvalidArgument, std::string(call) + ": the host backend does not pre-multiply " +
                                                   ncclTypeName(type));
      }
    } else {
      cudaError_t e = launchPreMultiply(scratch, sendbuff, inputCount, type, p.scalarBits,
                                        p.onDevice ? p.devScalar : nullptr, stream);
      if (e != cudaSuccess) {
        return fail(comm, ncclUnhandledCudaError,
                    std::string(call) + ": the pre-multiply kernel did not launch: " + cudaGetErrorString(e));
      }
    }
  }
  const void* in = inputCount > 0 ? scratch : sendbuff;
  concclDataType_t t = *toConcclType(type);
  switch (coll) {
    case Coll::kAllReduce:
      return fromConccl(comm, concclAllReduce(in, recvbuff, count, t, concclSum, comm->conccl, stream), call);
    case Coll::kReduce:
      return fromConccl(comm, concclReduce(in, recvbuff, count, t, concclSum, root, comm->conccl, stream), call);
    case Coll::kReduceScatter:
      return fromConccl(comm, concclReduceScatter(in, recvbuff, count, t, concclSum, comm->conccl, stream), call);
    default:
      return fail(comm, ncclInvalidArgument, std::string(call) + ": a PreMulSum op on a call without a reduction");
  }
}

}  // namespace conccl::nccl
