// Small helpers the scenario files of conccl_mp_worker share: CUDA and conccl result checks that throw, a bounded
// stream wait, and a device buffer.
#pragma once

#include <conccl/conccl.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace conccl::mpworker {

inline void cudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline void ok(concclResult_t r, concclComm_t comm, const char* what) {
  if (r != concclSuccess) {
    throw std::runtime_error(std::string(what) + " -> " + concclGetErrorString(r) + ": " + concclGetLastError(comm));
  }
}

// Waits at most `seconds` for the stream: a hang fails the scenario instead of stalling it.
inline void syncBounded(cudaStream_t s, const char* what, int seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  cudaError_t e;
  while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error(std::string(what) + ": stream hangs");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cudaOk(e, what);
}

// VMM memory as PyTorch's expandable segments map it: cuMemCreate + cuMemMap + cuMemSetAccess. By default one piece
// with no shareable handle type (CUDA IPC cannot share it; conccl stages calls on it). `shareable`: the pieces are
// created with a POSIX descriptor handle type, as PyTorch creates them when the device has no fabric handles, and
// the buffer is mapped one granule (2 MiB) at a time and starts half a granule into its first piece, so that it
// crosses pieces the way a tensor in an expandable segment does.
struct VmmBuffer {
  CUdeviceptr reserved = 0;  // the whole reservation
  size_t reservedBytes = 0;
  size_t lead = 0;           // where the buffer starts in it
  size_t granularity = 0;
  int device = 0;
  bool shareable = false;
  std::vector<CUmemGenericAllocationHandle> pieces;
  VmmBuffer(size_t want, int dev, bool shareableHandles = false) : device(dev), shareable(shareableHandles) {
    const CUmemAllocationProp prop = props();
    if (cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) {
      throw std::runtime_error("cuMemGetAllocationGranularity failed");
    }
    lead = shareable ? granularity / 2 : 0;
    reservedBytes = (lead + want + granularity - 1) / granularity * granularity;
    if (cuMemAddressReserve(&reserved, reservedBytes, 0, 0, 0) != CUDA_SUCCESS) {
      throw std::runtime_error("cuMemAddressReserve");
    }
    const size_t pieceBytes = shareable ? granularity : reservedBytes;
    for (size_t at = 0; at < reservedBytes; at += pieceBytes) pieces.push_back(mapPiece(at, pieceBytes));
  }
  ~VmmBuffer() {
    const size_t pieceBytes = shareable ? granularity : reservedBytes;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == 0) continue;
      cuMemUnmap(reserved + i * pieceBytes, pieceBytes);
      cuMemRelease(pieces[i]);
    }
    cuMemAddressFree(reserved, reservedBytes);
  }
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;
  void* p() const { return reinterpret_cast<void*>(reserved + lead); }
  // Replaces piece `i` with new memory at the same address (what PyTorch's allocator does after empty_cache): its
  // contents are gone; anything that kept the old piece must not be used for this address any more.
  void remapPiece(size_t i) {
    const size_t pieceBytes = shareable ? granularity : reservedBytes;
    if (cuMemUnmap(reserved + i * pieceBytes, pieceBytes) != CUDA_SUCCESS) throw std::runtime_error("cuMemUnmap");
    cuMemRelease(pieces[i]);
    pieces[i] = 0;  // neither mapped nor held, should mapPiece throw (the destructor skips it)
    pieces[i] = mapPiece(i * pieceBytes, pieceBytes);
  }

 private:
  CUmemAllocationProp props() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    if (shareable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }
  CUmemGenericAllocationHandle mapPiece(size_t offset, size_t bytes) {
    const CUmemAllocationProp prop = props();
    CUmemGenericAllocationHandle h = 0;
    if (cuMemCreate(&h, bytes, &prop, 0) != CUDA_SUCCESS) throw std::runtime_error("cuMemCreate failed");
    if (cuMemMap(reserved + offset, bytes, 0, h, 0) != CUDA_SUCCESS) throw std::runtime_error("cuMemMap failed");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemSetAccess(reserved + offset, bytes, &access, 1) != CUDA_SUCCESS) {
      throw std::runtime_error("cuMemSetAccess failed");
    }
    return h;
  }
};

// Where a Buf's memory comes from: cudaMalloc (CUDA IPC can share it), or the kinds it cannot: the VMM API (PyTorch's
// expandable segments; kVmmShareable: created with a POSIX descriptor handle type and crossing pieces, which conccl
// exports itself with CONCCL_VMM_EXPORT=1) and a cudaMallocAsync pool.
enum class BufKind { kMalloc, kVmm, kVmmShareable, kPool };
inline const char* bufKindName(BufKind k) {
  switch (k) {
    case BufKind::kMalloc: return "cudaMalloc";
    case BufKind::kVmm: return "VMM";
    case BufKind::kVmmShareable: return "shareable VMM";
    case BufKind::kPool: return "pool";
  }
  return "?";
}

struct Buf {
  void* p = nullptr;
  std::unique_ptr<VmmBuffer> vmm;
  explicit Buf(size_t bytes, BufKind kind = BufKind::kMalloc) {
    bytes = bytes == 0 ? 1 : bytes;
    if (kind == BufKind::kVmm || kind == BufKind::kVmmShareable) {
      int device = 0;
      cudaOk(cudaGetDevice(&device), "cudaGetDevice");
      vmm = std::make_unique<VmmBuffer>(bytes, device, kind == BufKind::kVmmShareable);
      p = vmm->p();
    } else if (kind == BufKind::kPool) {
      cudaOk(cudaMallocAsync(&p, bytes, cudaStreamLegacy), "cudaMallocAsync");
      cudaOk(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
    } else {
      cudaOk(cudaMalloc(&p, bytes), "cudaMalloc");
    }
  }
  ~Buf() {
    if (!vmm) cudaFree(p);  // cudaFree takes pool memory too (it waits for the device)
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* c() const { return static_cast<char*>(p); }
};

// A second communicator of the same ranks ("B"), its unique id broadcast from rank 0 on `comm` ("A").
inline concclComm_t secondCommunicator(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  concclUniqueId id{};
  if (rank == 0) ok(concclGetUniqueId(&id), nullptr, "concclGetUniqueId");
  {
    Buf idBuf(sizeof(id));
    cudaOk(cudaMemcpyAsync(idBuf.p, &id, sizeof(id), cudaMemcpyHostToDevice, stream), "h2d");
    ok(concclBroadcast(idBuf.p, idBuf.p, sizeof(id), concclUint8, 0, comm, stream), comm, "Broadcast of B's id");
    cudaOk(cudaMemcpyAsync(&id, idBuf.p, sizeof(id), cudaMemcpyDeviceToHost, stream), "d2h");
    syncBounded(stream, "Broadcast of B's id");
  }
  concclComm_t second = nullptr;
  ok(concclCommInitRank(&second, nranks, id, rank), nullptr, "concclCommInitRank (B)");
  return second;
}

}  // namespace conccl::mpworker
