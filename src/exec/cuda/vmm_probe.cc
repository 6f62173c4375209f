// The communicator's init check of the VMM export (vmm_export.h, probeVmmExport): one granule exported by every
// process and mapped by every other, before any call depends on it.
#include <unistd.h>

#include <cstring>

#include "base/error.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/vmm_export.h"
#include "exec/cuda/vmm_wire.h"
#include "exec/executor.h"

namespace conccl::exec {
namespace {

using vmmwire::cuText;

// One granule of VMM memory created shareable (a POSIX descriptor), mapped and exported as a unit: what PyTorch's
// expandable segments hand out, in miniature. Released (withdrawn, unmapped, freed) by the destructor.
class ProbeBuffer {
 public:
  explicit ProbeBuffer(int device) : device_(device) {}
  ~ProbeBuffer() {
    const DriverApi& api = driverApi();
    if (unit_) {
      VmmHandleServer::instance().withdraw(unit_->id);
      releaseVmmUnit(*unit_);
    }
    if (mapped_) api.memUnmap(base_, bytes_);
    if (handle_ != 0) api.memRelease(handle_);
    if (base_ != 0) api.memAddressFree(base_, bytes_);
  }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;

  // Allocates, maps and serves it; false with `why` at the first step that fails.
  bool make(std::string* why) {
    const DriverApi& api = driverApi();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUresult r = api.memGetAllocationGranularity(&bytes_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return failed("cuMemGetAllocationGranularity", r, why);
    if ((r = api.memCreate(&handle_, bytes_, &prop, 0)) != CUDA_SUCCESS) return failed("cuMemCreate", r, why);
    if ((r = api.memAddressReserve(&base_, bytes_, 0, 0, 0)) != CUDA_SUCCESS) {
      base_ = 0;
      return failed("cuMemAddressReserve", r, why);
    }
    if ((r = api.memMap(base_, bytes_, 0, handle_, 0)) != CUDA_SUCCESS) return failed("cuMemMap", r, why);
    mapped_ = true;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = api.memSetAccess(base_, bytes_, &access, 1)) != CUDA_SUCCESS) return failed("cuMemSetAccess", r, why);
    unit_ = makeVmmUnit(reinterpret_cast<void*>(base_), bytes_, device_, why);
    if (!unit_) return false;
    if (!VmmHandleServer::instance().serve(*unit_, device_, why)) {
      releaseVmmUnit(*unit_);
      unit_.reset();
      return false;
    }
    return true;
  }

  BufferExport exported() const {
    BufferExport e;
    e.kind = BufferExport::kVmm;
    e.allocId = unit_->id;
    e.base = static_cast<uint64_t>(unit_->base);
    e.allocBytes = unit_->bytes;
    e.pid = static_cast<int64_t>(::getpid());
    return e;
  }

 private:
  static bool failed(const char* call, CUresult r, std::string* why) {
    *why = std::string(call) + ": " + cuText(r);
    return false;
  }
  int device_;
  size_t bytes_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr base_ = 0;
  bool mapped_ = false;
  std::optional<VmmUnit> unit_;
};

constexpr auto kProbeImportTimeout = std::chrono::seconds(10);

}  // namespace

bool probeVmmExport(int localRank, const std::vector<int64_t>& pids, int device,
                    const std::function<std::vector<std::string>(const std::string&)>& allGather, std::string* why) {
  const int n = static_cast<int>(pids.size());
  DeviceGuard guard(device);
  // 1. Every process exports its probe (a failure is published as an empty blob with the reason).
  ProbeBuffer mine(device);
  std::string reason;
  std::string blob;
  if (mine.make(&reason)) {
    const BufferExport e = mine.exported();
    blob.assign(reinterpret_cast<const char*>(&e), sizeof(e));
  } else {
    blob = "!" + reason;
  }
  const std::vector<std::string> exports = allGather(blob);
  CONCCL_ASSERT(static_cast<int>(exports.size()) == n);
  // 2. Every process maps every other process's probe, and unmaps it.
  std::string verdict = "ok";
  for (int r = 0; r < n && verdict == "ok"; ++r) {
    const std::string& theirs = exports[static_cast<size_t>(r)];
    if (r == localRank || pids[static_cast<size_t>(r)] == pids[static_cast<size_t>(localRank)]) continue;
    if (theirs.size() != sizeof(BufferExport)) {
      verdict = "rank " + std::to_string(r) + " could not export one (" + theirs.substr(theirs.empty() ? 0 : 1) + ")";
      continue;
    }
    BufferExport e;
    std::memcpy(&e, theirs.data(), sizeof(e));
    try {
      unmapVmmImport(importVmmUnit(e.pid, e.allocId, e.allocBytes, device, kProbeImportTimeout));
    } catch (const Error& err) {
      verdict = "rank " + std::to_string(localRank) + " could not map rank " + std::to_string(r) + "'s (" +
                err.what() + ")";
    }
  }
  // 3. Agree: the export is used only if it worked between every pair (every process sees the same verdicts).
  const std::vector<std::string> verdicts = allGather(verdict);
  for (const std::string& v : verdicts) {
    if (v != "ok") {
      *why = v;
      return false;
    }
  }
  return true;
}

}  // namespace conccl::exec
