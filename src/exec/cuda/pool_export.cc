// Pool memory shared with peer processes (pool_export.h): the owner's export of
// an allocation, the importer's imports, and the shareable pool
// CONCCL_SHAREABLE_POOL makes current. The handle server's side of a pool
// request is in vmm_handle_server.cc.
#include "exec/cuda/pool_export.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/peer_socket.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/vmm_wire.h"

namespace conccl::exec {

using namespace vmmwire;

static_assert(sizeof(CUmemPoolPtrExportData) == sizeof(BufferExport{}.handle),
              "a pool pointer export must fit BufferExport::handle");

CUmemoryPool poolOfPointer(const void *ptr) {
  CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE;
  CUmemoryPool pool = nullptr;
  void *data[] = {&pool};
  // Like queryPointer: a pointer the driver does not know leaves the value
  // null.
  if (driverApi().pointerGetAttributes(1, &attribute, data, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return nullptr;
  }
  return pool;
}

std::optional<BufferExport> exportPoolAllocation(CUmemoryPool pool, uint32_t poolId, CUdeviceptr base, size_t bytes,
                                                 uint64_t bufferId, std::string *why) {
  (void)pool;  // the driver finds the pool from the pointer; kept in the
               // signature to say what is exported
  CUmemPoolPtrExportData data{};
  const CUresult r = driverApi().memPoolExportPointer(&data, base);
  if (r != CUDA_SUCCESS) {
    *why = "cuMemPoolExportPointer: " + cuText(r);
    return std::nullopt;
  }
  BufferExport e;
  e.kind = BufferExport::kPool;
  e.poolId = poolId;
  e.allocId = bufferId;
  e.base = static_cast<uint64_t>(base);
  e.allocBytes = bytes;
  std::memcpy(e.handle, &data, sizeof(data));
  return e;
}

CUmemoryPool importPeerPool(int64_t pid, uint32_t poolId, int device, std::chrono::milliseconds timeout) {
  auto failed = [&](const std::string &why) {
    CONCCL_THROW(concclSystemError, "importing pool " + std::to_string(poolId) + " of pid " + std::to_string(pid) +
                                        " failed: " + why + " (CONCCL_VMM_EXPORT=0 stages calls on pool memory)");
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  VmmRequest req;
  req.kind = kPoolRequest;
  req.unitId = poolId;
  VmmReplyHeader header;
  peersock::OwnedFd c;
  std::vector<peersock::OwnedFd> fds;
  try {
    c = askHandleServer(pid, req, deadline, &header);
    const std::string body = peersock::recvMessage(c.get(), sizeof(VmmWirePiece), 1, &fds, deadline);
    if (header.pieces != 1 || body.size() != sizeof(VmmWirePiece) || fds.size() != 1) {
      CONCCL_THROW(concclSystemError, "a reply without the pool's descriptor");
    }
  } catch (const Error &e) {
    failed(e.message());
  }
  DeviceGuard guard(device);
  const DriverApi &api = driverApi();
  CUmemoryPool pool = nullptr;
  void *osHandle = reinterpret_cast<void *>(static_cast<uintptr_t>(fds[0].get()));
  CUresult r = api.memPoolImportFromShareableHandle(&pool, osHandle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) failed("cuMemPoolImportFromShareableHandle: " + cuText(r));
  // An imported pool grants no access by itself: this process's device is given
  // read and write access to it (the same device as the owner's where processes
  // share a GPU, a peer device otherwise).
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = api.memPoolSetAccess(pool, &access, 1);
  if (r != CUDA_SUCCESS) {
    api.memPoolDestroy(pool);
    failed("cuMemPoolSetAccess for device " + std::to_string(device) + ": " + cuText(r));
  }
  return pool;
}

void *importPoolAllocation(CUmemoryPool pool, const BufferExport &b) {
  CUmemPoolPtrExportData data{};
  std::memcpy(&data, b.handle, sizeof(data));
  CUdeviceptr ptr = 0;
  const CUresult r = driverApi().memPoolImportPointer(&ptr, pool, &data);
  if (r != CUDA_SUCCESS) {
    CONCCL_THROW(concclUnhandledCudaError, "cuMemPoolImportPointer failed for allocation " + std::to_string(b.allocId) +
                                               " of pid " + std::to_string(b.pid) + " (" +
                                               std::to_string(b.allocBytes) + " B): " + cuText(r));
  }
  return reinterpret_cast<void *>(ptr);
}

void freePoolImport(void *imported) {
  const CUresult r = driverApi().memFree(reinterpret_cast<CUdeviceptr>(imported));
  if (r != CUDA_SUCCESS) CONCCL_THROW(concclUnhandledCudaError, "cuMemFree of an imported pool pointer: " + cuText(r));
}

bool makeShareablePoolCurrent(int device, std::string *why) {
  static std::mutex mutex;
  static std::map<int, std::string> done;  // device -> "" (made current) or why not
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = done.find(device); it != done.end()) {
    *why = it->second;
    return it->second.empty();
  }
  const DriverApi &api = driverApi();
  DeviceGuard guard(device);
  std::string &outcome = done[device];
  CUmemoryPool current = nullptr, fallback = nullptr;
  CUresult r = api.deviceGetMemPool(&current, device);
  if (r == CUDA_SUCCESS) r = api.deviceGetDefaultMemPool(&fallback, device);
  if (r != CUDA_SUCCESS) {
    outcome = "the device's pools: " + cuText(r);
  } else if (current != fallback) {
    // Someone chose this device's pool already (the application, or another
    // library): left as it is.
    outcome =
        "the device's current pool is not its default pool (chosen by "
        "the application): left unchanged";
  } else {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    CUmemoryPool pool = nullptr;
    r = api.memPoolCreate(&pool, &props);
    if (r != CUDA_SUCCESS) {
      outcome = "cuMemPoolCreate with a POSIX descriptor handle type: " + cuText(r);
    } else {
      cuuint64_t threshold = ~cuuint64_t{0};
      r = api.memPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
      if (r == CUDA_SUCCESS) r = api.deviceSetMemPool(device, pool);
      if (r != CUDA_SUCCESS) {
        api.memPoolDestroy(pool);
        outcome = "making the shareable pool current: " + cuText(r);
      }
    }
  }
  *why = outcome;
  return outcome.empty();
}

}  // namespace conccl::exec
