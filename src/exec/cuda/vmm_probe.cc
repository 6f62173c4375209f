// The communicator's init check of the VMM export (vmm_export.h, probeVmmExport): a buffer across two mapped pieces
// exported by every process and mapped by every other, before any call depends on it.
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

// Two granules of VMM memory created shareable (a POSIX descriptor), two allocations mapped side by side in one
// reservation and exported as the unit of a buffer that starts inside the first and ends inside the second: what
// PyTorch's expandable segments hand out, in miniature. It checks what the owner's side relies on, that the driver
// names each mapped piece (not the whole reservation) for an address in it, and the peers then import and map both
// pieces. Released (withdrawn, unmapped, freed) by the destructor.
class ProbeBuffer {
 public:
  explicit ProbeBuffer(int device) : device_(device) {}
  ~ProbeBuffer() {
    const DriverApi& api = driverApi();
    if (unit_) {
      VmmHandleServer::instance().withdraw(unit_->id);
      releaseVmmUnit(*unit_);
    }
    for (size_t i = 0; i < kPieces; ++i) {
      if (mapped_[i]) api.memUnmap(base_ + i * granule_, granule_);
      if (handles_[i] != 0) api.memRelease(handles_[i]);
    }
    if (base_ != 0) api.memAddressFree(base_, kPieces * granule_);
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
    CUresult r = api.memGetAllocationGranularity(&granule_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) return failed("cuMemGetAllocationGranularity", r, why);
    for (CUmemGenericAllocationHandle& h : handles_) {
      if ((r = api.memCreate(&h, granule_, &prop, 0)) != CUDA_SUCCESS) {
        h = 0;
        return failed("cuMemCreate", r, why);
      }
    }
    if ((r = api.memAddressReserve(&base_, kPieces * granule_, 0, 0, 0)) != CUDA_SUCCESS) {
      base_ = 0;
      return failed("cuMemAddressReserve", r, why);
    }
    for (size_t i = 0; i < kPieces; ++i) {
      if ((r = api.memMap(base_ + i * granule_, granule_, 0, handles_[i], 0)) != CUDA_SUCCESS) {
        return failed("cuMemMap", r, why);
      }
      mapped_[i] = true;
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = api.memSetAccess(base_, kPieces * granule_, &access, 1)) != CUDA_SUCCESS) {
      return failed("cuMemSetAccess", r, why);
    }
    unit_ = makeVmmUnit(reinterpret_cast<void*>(base_ + granule_ / 2), granule_, device_, why);
    if (!unit_) return false;
    if (!unitIsTheMappedPieces(why)) return false;
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
    e.offset = granule_ / 2;
    return e;
  }

 private:
  static constexpr size_t kPieces = 2;

  static bool failed(const char* call, CUresult r, std::string* why) {
    *why = std::string(call) + ": " + cuText(r);
    return false;
  }
  // The unit must be the two mappings, each with the handle mapped there. A driver that named the whole reservation
  // for an address would give one piece of two granules, which no peer could map from the first allocation; one that
  // retained a handle under another value than the one mapped would make every call's check (vmmUnitStillMapped)
  // see replaced memory.
  bool unitIsTheMappedPieces(std::string* why) {
    bool extents = unit_->pieces.size() == kPieces, handles = extents;
    for (size_t i = 0; extents && i < kPieces; ++i) {
      extents = unit_->pieces[i].va == base_ + i * granule_ && unit_->pieces[i].bytes == granule_;
      handles = handles && unit_->pieces[i].handle == handles_[i];
    }
    if (extents && handles) return true;
    *why = !extents ? "the driver does not name each mapped piece of a reservation (" +
                          std::to_string(unit_->pieces.size()) + " piece(s) found for a buffer across two mappings of " +
                          std::to_string(granule_) + " bytes)"
                    : std::string("the driver retains a mapped piece's handle under another value than the one mapped");
    releaseVmmUnit(*unit_);
    unit_.reset();
    return false;
  }
  int device_;
  size_t granule_ = 0;
  CUmemGenericAllocationHandle handles_[kPieces] = {};
  CUdeviceptr base_ = 0;
  bool mapped_[kPieces] = {};
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
  // Tagged: 'E' and the export, or '!' and the reason.
  if (mine.make(&reason)) {
    const BufferExport e = mine.exported();
    blob = "E" + std::string(reinterpret_cast<const char*>(&e), sizeof(e));
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
    if (theirs.size() != 1 + sizeof(BufferExport) || theirs[0] != 'E') {
      verdict = "rank " + std::to_string(r) + " could not export one (" + theirs.substr(theirs.empty() ? 0 : 1) + ")";
      continue;
    }
    BufferExport e;
    std::memcpy(&e, theirs.data() + 1, sizeof(e));
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
