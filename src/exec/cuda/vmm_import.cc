// The importer's side of sharing VMM memory (vmm_export.h): ask the owner's handle server for a unit's pieces, import
// them and map them in order in a range of this process.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "base/error.h"
#include "base/logging.h"
#include "base/peer_socket.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/vmm_export.h"
#include "exec/cuda/vmm_wire.h"

namespace conccl::exec {

using namespace vmmwire;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void importFailed(int64_t pid, uint64_t unitId, const std::string& why) {
  CONCCL_THROW(concclSystemError, "mapping VMM buffer " + std::to_string(unitId & ~kVmmUnitIdBit) + " of pid " +
                                      std::to_string(pid) + " failed: " + why +
                                      " (CONCCL_VMM_EXPORT=0 stages calls on VMM memory instead)");
}

// A piece as it arrives: its extent, the handle type, and its descriptor (POSIX; -1 for fabric, whose handle is in
// the piece).
using TakePiece = std::function<void(const VmmWirePiece&, CUmemAllocationHandleType, peersock::OwnedFd)>;

// Asks the owner's server for the unit and hands each piece to `take` as its batch arrives (so that at most one batch
// of descriptors is open here at a time). Throws plain Error(concclSystemError) with the reason; importVmmUnit says
// what was being done.
void receivePieces(int64_t pid, uint64_t unitId, size_t bytes, std::chrono::milliseconds timeout,
                   const TakePiece& take) {
  const auto deadline = Clock::now() + timeout;
  peersock::OwnedFd c = peersock::connectAbstract(VmmHandleServer::socketName(pid), deadline);
  // The kernel's word that the owner listens there, not a process that took its name first.
  const peersock::PeerCred cred = peersock::peerCredOf(c.get());
  if (cred.pid != pid || cred.uid != static_cast<uint32_t>(::getuid())) {
    CONCCL_THROW(concclSystemError, "the socket " + VmmHandleServer::socketName(pid) + " is held by pid " +
                                        std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")");
  }
  VmmRequest req;
  req.unitId = unitId;
  peersock::sendMessage(c.get(), asBytes(req), {}, deadline);
  VmmReplyHeader header;
  std::vector<peersock::OwnedFd> none;
  const std::string head = peersock::recvMessage(c.get(), sizeof(VmmReplyHeader), 0, &none, deadline);
  if (head.size() != sizeof(header)) CONCCL_THROW(concclSystemError, "a reply of the wrong size");
  std::memcpy(&header, head.data(), sizeof(header));
  if (header.magic != kVmmWireMagic) CONCCL_THROW(concclSystemError, "a reply with the wrong magic");
  if (header.status == kUnknownUnit) CONCCL_THROW(concclSystemError, "the owner no longer exports it");
  if (header.status != kServed) CONCCL_THROW(concclSystemError, "the owner could not export its handles");
  if (header.bytes != bytes) CONCCL_THROW(concclSystemError, "the owner describes it with another size");
  const auto type = static_cast<CUmemAllocationHandleType>(header.handleType);
  const bool posix = type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  for (size_t received = 0; received < header.pieces;) {
    const size_t batch = std::min<size_t>(peersock::kMaxFdsPerMessage, header.pieces - received);
    std::vector<peersock::OwnedFd> fds;
    const std::string body =
        peersock::recvMessage(c.get(), batch * sizeof(VmmWirePiece), posix ? batch : 0, &fds, deadline);
    if (body.size() != batch * sizeof(VmmWirePiece) || (posix && fds.size() != batch)) {
      CONCCL_THROW(concclSystemError, "a reply with the wrong number of pieces or descriptors");
    }
    for (size_t i = 0; i < batch; ++i) {
      VmmWirePiece w;
      std::memcpy(&w, body.data() + i * sizeof(w), sizeof(w));
      take(w, type, posix ? std::move(fds[i]) : peersock::OwnedFd());
    }
    received += batch;
  }
}

// Imports one piece (closing its descriptor: the imported handle holds the memory now) at the end of `m`.
void importPiece(VmmImport& m, const VmmWirePiece& w, CUmemAllocationHandleType type, peersock::OwnedFd fd) {
  const size_t end = m.pieces.empty() ? 0 : m.pieces.back().offset + m.pieces.back().bytes;
  if (w.offset != end || w.bytes == 0 || w.bytes > m.bytes - w.offset) {
    CONCCL_THROW(concclSystemError, "its pieces do not tile it");
  }
  VmmImport::Piece p{w.offset, w.bytes, 0, false};
  CUresult r;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    void* osHandle = reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get()));
    r = driverApi().memImportFromShareableHandle(&p.handle, osHandle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  } else {
    CUmemFabricHandle fabric = w.fabric;
    r = driverApi().memImportFromShareableHandle(&p.handle, &fabric, CU_MEM_HANDLE_TYPE_FABRIC);
  }
  if (r != CUDA_SUCCESS) CONCCL_THROW(concclSystemError, "cuMemImportFromShareableHandle: " + cuText(r));
  m.pieces.push_back(p);
}

// Reserves a range for the imported pieces of `m`, maps them in order and opens it to `device`.
void mapImported(VmmImport& m, int device) {
  const DriverApi& api = driverApi();
  const size_t end = m.pieces.empty() ? 0 : m.pieces.back().offset + m.pieces.back().bytes;
  if (end != m.bytes) CONCCL_THROW(concclSystemError, "its pieces do not tile it");
  // Aligned as the pieces need to be mapped (their allocations' granularity), not left to the default alignment.
  CUmemAllocationProp prop{};
  size_t alignment = 0;
  CUresult r = api.memGetAllocationPropertiesFromHandle(&prop, m.pieces.front().handle);
  if (r == CUDA_SUCCESS) r = api.memGetAllocationGranularity(&alignment, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) CONCCL_THROW(concclSystemError, "the granularity of an imported piece: " + cuText(r));
  CUdeviceptr base = 0;
  r = api.memAddressReserve(&base, m.bytes, alignment, 0, 0);
  if (r != CUDA_SUCCESS) {
    CONCCL_THROW(concclSystemError, "cuMemAddressReserve of " + std::to_string(m.bytes) + " bytes: " + cuText(r));
  }
  m.base = base;
  for (VmmImport::Piece& p : m.pieces) {
    r = api.memMap(m.base + p.offset, p.bytes, 0, p.handle, 0);
    if (r != CUDA_SUCCESS) CONCCL_THROW(concclSystemError, "cuMemMap: " + cuText(r));
    p.mapped = true;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = api.memSetAccess(m.base, m.bytes, &access, 1);
  if (r != CUDA_SUCCESS) {
    CONCCL_THROW(concclSystemError, "cuMemSetAccess for device " + std::to_string(device) + ": " + cuText(r));
  }
}

}  // namespace

VmmImport importVmmUnit(int64_t pid, uint64_t unitId, size_t bytes, int device, std::chrono::milliseconds timeout) {
  VmmImport m;
  m.bytes = bytes;
  std::optional<DeviceGuard> guard;  // from the first piece on: asking the owner needs no device
  try {
    receivePieces(pid, unitId, bytes, timeout,
                  [&](const VmmWirePiece& w, CUmemAllocationHandleType type, peersock::OwnedFd fd) {
                    if (!guard) guard.emplace(device);
                    importPiece(m, w, type, std::move(fd));
                  });
    if (!guard) guard.emplace(device);
    mapImported(m, device);
  } catch (const Error& e) {
    unmapVmmImport(m);  // what was imported or mapped so far
    importFailed(pid, unitId, e.message());
  } catch (...) {
    unmapVmmImport(m);  // std::bad_alloc, say: nothing imported may stay behind
    throw;
  }
  return m;
}

void unmapVmmImport(const VmmImport& m) {
  if (m.pieces.empty() && m.base == 0) return;  // nothing imported (and maybe no driver to ask)
  const DriverApi& api = driverApi();
  for (const VmmImport::Piece& p : m.pieces) {
    // One mapping at a time: cuMemUnmap takes whole mappings.
    if (p.mapped && api.memUnmap(m.base + p.offset, p.bytes) != CUDA_SUCCESS) {
      CONCCL_WARN(-1, -1, "cuMemUnmap of a piece of a peer's VMM buffer failed");
    }
    api.memRelease(p.handle);
  }
  if (m.base != 0 && api.memAddressFree(m.base, m.bytes) != CUDA_SUCCESS) {
    CONCCL_WARN(-1, -1, "cuMemAddressFree of a peer's VMM buffer failed");
  }
}

}  // namespace conccl::exec
