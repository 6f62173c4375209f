// See shareable_pool.h.
#include "exec/cuda/shareable_pool.h"

#include <cuda.h>

#include <map>
#include <mutex>

#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/vmm_wire.h"

namespace conccl::exec {

using vmmwire::cuText;

bool makeShareablePoolCurrent(int device, std::string* why) {
  static std::mutex mutex;
  static std::map<int, std::string> done;  // device -> "" (made current) or why not
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = done.find(device); it != done.end()) {
    *why = it->second;
    return it->second.empty();
  }
  const DriverApi& api = driverApi();
  DeviceGuard guard(device);
  std::string& outcome = done[device];
  CUmemoryPool current = nullptr, fallback = nullptr;
  CUresult r = api.deviceGetMemPool(&current, device);
  if (r == CUDA_SUCCESS) r = api.deviceGetDefaultMemPool(&fallback, device);
  if (r != CUDA_SUCCESS) {
    outcome = "the device's pools: " + cuText(r);
  } else if (current != fallback) {
    // Someone chose this device's pool already (the application, or another library): left as it is.
    outcome = "the device's current pool is not its default pool (chosen by the application): left unchanged";
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
