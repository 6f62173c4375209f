// The owner's side of sharing VMM memory (vmm_export.h): which memory can be shared, and the units a buffer's
// pieces make.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iterator>

#include "exec/cuda/driver_api.h"
#include "exec/cuda/vmm_export.h"
#include "exec/cuda/vmm_wire.h"

namespace conccl::exec {

using vmmwire::cuText;

std::string vmmwire::cuText(CUresult r) {
  const char* name = nullptr;
  if (driverApi().getErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return "CUresult " + std::to_string(r);
  return name;
}

CUresult vmmwire::exportPiece(CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type, int* fd,
                              CUmemFabricHandle* fabric) {
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return driverApi().memExportToShareableHandle(fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  }
  return driverApi().memExportToShareableHandle(fabric, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0);
}

namespace {

constexpr unsigned kShareableTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC;

// The id of the physical allocation mapped at `va` (0: none given). One driver call: the per-call check of every
// piece a buffer crosses (a 1 GiB tensor in PyTorch's 20 MiB pieces has 52) costs 125 ns a piece this way against
// 174 ns for retaining and releasing the handle (one H100, 2026-12-05, test_gpu_vmm_piece_check, which also shows
// that the id names the piece mapped there and changes when the piece is replaced).
uint64_t blockIdAt(CUdeviceptr va) {
  CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID;
  unsigned long long id = 0;
  void* data[] = {&id};
  if (driverApi().pointerGetAttributes(1, &attribute, data, va) != CUDA_SUCCESS) return 0;
  return id;
}

// The mapped piece holding `va`, its allocation handle (retained: the caller releases it) and block id. False when
// nothing is mapped there.
bool pieceAt(CUdeviceptr va, VmmPiece* out) {
  const DriverApi& api = driverApi();
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (api.memGetAddressRange(&base, &bytes, va) != CUDA_SUCCESS || bytes == 0) return false;
  CUmemGenericAllocationHandle h = 0;
  if (api.memRetainAllocationHandle(&h, reinterpret_cast<void*>(va)) != CUDA_SUCCESS) return false;
  *out = VmmPiece{base, bytes, h, blockIdAt(base)};
  return true;
}


}  // namespace

bool isShareableVmm(const void* ptr) {
  unsigned int legacyIpc = 0, mapped = 0;
  unsigned long long allowed = 0;
  CUmemoryPool pool = nullptr;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_MAPPED,
                                      CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
  void* data[] = {&legacyIpc, &mapped, &allowed, &pool};
  if (driverApi().pointerGetAttributes(static_cast<unsigned>(std::size(attributes)), attributes, data,
                                       reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return false;
  }
  return legacyIpc == 0 && mapped != 0 && pool == nullptr && (allowed & kShareableTypes) != 0;
}

std::optional<VmmUnit> makeVmmUnit(const void* ptr, size_t bytes, int device, std::string* why) {
  const DriverApi& api = driverApi();
  VmmUnit u;
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  const CUdeviceptr end = start + std::max<size_t>(bytes, 1);
  auto fail = [&](const std::string& text) -> std::optional<VmmUnit> {
    releaseVmmUnit(u);
    *why = text;
    return std::nullopt;
  };
  unsigned types = kShareableTypes;
  for (CUdeviceptr at = start; at < end;) {
    VmmPiece p;
    if (!pieceAt(at, &p)) return fail("nothing is mapped at byte " + std::to_string(at - start) + " of the buffer");
    if (!u.pieces.empty() && p.va != u.pieces.back().va + u.pieces.back().bytes) {
      api.memRelease(p.handle);
      return fail("its mappings are not contiguous");
    }
    u.pieces.push_back(p);
    CUmemAllocationProp prop{};
    if (api.memGetAllocationPropertiesFromHandle(&prop, p.handle) != CUDA_SUCCESS) {
      return fail("the driver did not describe one of its allocations");
    }
    if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != device) {
      return fail("one of its allocations is not memory of device " + std::to_string(device));
    }
    types &= static_cast<unsigned>(prop.requestedHandleTypes);
    at = p.va + p.bytes;
  }
  // Block ids that do not tell the pieces apart (a driver naming the whole reservation, say) cannot tell a replaced
  // piece either: the unit's checks compare handles then.
  for (size_t i = 1; i < u.pieces.size(); ++i) {
    if (u.pieces[i].blockId == 0 || u.pieces[i].blockId == u.pieces[i - 1].blockId) {
      for (VmmPiece& p : u.pieces) p.blockId = 0;
      break;
    }
  }
  // One type for every piece; a POSIX descriptor where possible (fabric handles need an IMEX channel to import).
  if ((types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0) {
    u.handleType = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  } else if ((types & CU_MEM_HANDLE_TYPE_FABRIC) != 0) {
    u.handleType = CU_MEM_HANDLE_TYPE_FABRIC;
  } else {
    return fail("its allocations were not created shareable (no POSIX descriptor or fabric handle type in common)");
  }
  // One export of each piece now, on the caller's thread, so that a handle the driver will not export (a fabric
  // handle without an IMEX channel, say) stages the call instead of failing the peers' imports later.
  for (const VmmPiece& p : u.pieces) {
    int fd = -1;
    CUmemFabricHandle fabric{};
    const CUresult r = vmmwire::exportPiece(p.handle, u.handleType, &fd, &fabric);
    if (r == CUDA_SUCCESS && fd >= 0) ::close(fd);  // a failed export created no descriptor
    if (r != CUDA_SUCCESS) return fail("the driver does not export its handles (" + cuText(r) + ")");
  }
  u.base = u.pieces.front().va;
  u.bytes = u.pieces.back().va + u.pieces.back().bytes - u.base;
  static std::atomic<uint64_t> nextId{1};
  u.id = kVmmUnitIdBit | nextId.fetch_add(1, std::memory_order_relaxed);
  return u;
}

bool vmmUnitStillMapped(const VmmUnit& u, const void* ptr, size_t bytes) {
  // The unit's own reference keeps each piece's allocation alive, so no other allocation can have its block id or
  // its handle value: the same id (or handle) at the same address is the same memory (its extent cannot change under
  // an allocation that is not unmapped).
  const DriverApi& api = driverApi();
  const auto from = reinterpret_cast<CUdeviceptr>(ptr);
  const CUdeviceptr to = bytes > UINT64_MAX - from ? UINT64_MAX : from + bytes;
  for (const VmmPiece& p : u.pieces) {
    if (p.va + p.bytes <= from || p.va >= to) continue;  // not used by this call
    if (p.blockId != 0) {
      if (blockIdAt(p.va) != p.blockId) return false;
      continue;
    }
    CUmemGenericAllocationHandle now = 0;
    if (api.memRetainAllocationHandle(&now, reinterpret_cast<void*>(p.va)) != CUDA_SUCCESS) return false;
    api.memRelease(now);
    if (now != p.handle) return false;
  }
  return true;
}

void releaseVmmUnit(VmmUnit& u) {
  for (const VmmPiece& p : u.pieces) driverApi().memRelease(p.handle);
  u.pieces.clear();
}

}  // namespace conccl::exec
