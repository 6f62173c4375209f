// The importer's side of sharing VMM memory (vmm_export.h): ask the owner's handle server for a unit's pieces, import
// them and map them in order in a range of this process.
#include <unistd.h>

#include <algorithm>
#include <cstring>

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

// The pieces of the unit as the owner's server sent them (descriptors owned here until imported).
struct ReceivedUnit {
  VmmReplyHeader header;
  std::vector<VmmWirePiece> pieces;
  std::vector<peersock::OwnedFd> fds;
};

// Throws plain Error(concclSystemError) with the reason; askOwner says what was being done.
ReceivedUnit askOwnerOnce(int64_t pid, uint64_t unitId, std::chrono::milliseconds timeout) {
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
  ReceivedUnit got;
  std::vector<peersock::OwnedFd> none;
  const std::string head = peersock::recvMessage(c.get(), sizeof(VmmReplyHeader), 0, &none, deadline);
  if (head.size() != sizeof(got.header)) CONCCL_THROW(concclSystemError, "a reply of the wrong size");
  std::memcpy(&got.header, head.data(), sizeof(got.header));
  if (got.header.magic != kVmmWireMagic) CONCCL_THROW(concclSystemError, "a reply with the wrong magic");
  if (got.header.status == kUnknownUnit) CONCCL_THROW(concclSystemError, "the owner no longer exports it");
  if (got.header.status != kServed) CONCCL_THROW(concclSystemError, "the owner could not export its handles");
  const bool posix = got.header.handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  while (got.pieces.size() < got.header.pieces) {
    const size_t batch = std::min<size_t>(peersock::kMaxFdsPerMessage, got.header.pieces - got.pieces.size());
    const std::string body =
        peersock::recvMessage(c.get(), batch * sizeof(VmmWirePiece), posix ? batch : 0, &got.fds, deadline);
    if (body.size() != batch * sizeof(VmmWirePiece) || (posix && got.fds.size() != got.pieces.size() + batch)) {
      CONCCL_THROW(concclSystemError, "a reply with the wrong number of pieces or descriptors");
    }
    for (size_t i = 0; i < batch; ++i) {
      VmmWirePiece w;
      std::memcpy(&w, body.data() + i * sizeof(w), sizeof(w));
      got.pieces.push_back(w);
    }
  }
  return got;
}

ReceivedUnit askOwner(int64_t pid, uint64_t unitId, std::chrono::milliseconds timeout) {
  try {
    return askOwnerOnce(pid, unitId, timeout);
  } catch (const Error& e) {
    importFailed(pid, unitId, e.message());
  }
}

}  // namespace

VmmImport importVmmUnit(int64_t pid, uint64_t unitId, size_t bytes, int device, std::chrono::milliseconds timeout) {
  ReceivedUnit got = askOwner(pid, unitId, timeout);
  if (got.header.bytes != bytes) importFailed(pid, unitId, "the owner describes it with another size");
  const DriverApi& api = driverApi();
  DeviceGuard guard(device);
  VmmImport m;
  m.bytes = bytes;
  auto undo = [&](const std::string& why) {
    unmapVmmImport(m);
    importFailed(pid, unitId, why);
  };
  size_t expectOffset = 0;
  for (size_t i = 0; i < got.pieces.size(); ++i) {
    const VmmWirePiece& w = got.pieces[i];
    if (w.offset != expectOffset || w.bytes == 0 || w.bytes > bytes - w.offset) undo("its pieces do not tile it");
    expectOffset += w.bytes;
    VmmImport::Piece p{w.offset, w.bytes, 0, false};
    CUresult r;
    if (got.header.handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
      void* osHandle = reinterpret_cast<void*>(static_cast<uintptr_t>(got.fds[i].get()));
      r = api.memImportFromShareableHandle(&p.handle, osHandle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      got.fds[i].reset();  // the imported handle holds the memory now
    } else {
      r = api.memImportFromShareableHandle(&p.handle, &got.pieces[i].fabric, CU_MEM_HANDLE_TYPE_FABRIC);
    }
    if (r != CUDA_SUCCESS) undo("cuMemImportFromShareableHandle: " + cuText(r));
    m.pieces.push_back(p);
  }
  if (expectOffset != bytes) undo("its pieces do not tile it");
  CUdeviceptr base = 0;
  CUresult r = api.memAddressReserve(&base, bytes, 0, 0, 0);
  if (r != CUDA_SUCCESS) undo("cuMemAddressReserve of " + std::to_string(bytes) + " bytes: " + cuText(r));
  m.base = base;
  for (VmmImport::Piece& p : m.pieces) {
    r = api.memMap(m.base + p.offset, p.bytes, 0, p.handle, 0);
    if (r != CUDA_SUCCESS) undo("cuMemMap: " + cuText(r));
    p.mapped = true;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = api.memSetAccess(m.base, bytes, &access, 1);
  if (r != CUDA_SUCCESS) undo("cuMemSetAccess for device " + std::to_string(device) + ": " + cuText(r));
  return m;
}

void unmapVmmImport(const VmmImport& m) {
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
