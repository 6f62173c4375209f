// See vmm_export.h.
#include "exec/cuda/vmm_export.h"

#include <cuda_runtime_api.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "base/peer_socket.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/executor.h"

namespace conccl::exec {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kVmmWireMagic = 0x564d4d31u;  // "VMM1"; bump the digit when the messages change
// A connection's whole exchange must fit in this (the server serves one connection at a time).
constexpr auto kServeDeadline = std::chrono::seconds(2);

struct VmmRequest {
  uint32_t magic = kVmmWireMagic;
  uint32_t reserved = 0;
  uint64_t unitId = 0;
};
enum VmmStatus : uint32_t { kServed = 0, kUnknownUnit = 1, kNotExported = 2 };
// First message of a reply; kServed is followed by the pieces, kMaxFdsPerMessage per message, then nothing.
struct VmmReplyHeader {
  uint32_t magic = kVmmWireMagic;
  uint32_t status = kServed;
  uint32_t handleType = 0;  // CUmemAllocationHandleType
  uint32_t pieces = 0;
  uint64_t bytes = 0;
};
// One piece in a reply: its extent in the unit and, for fabric handles, the handle (POSIX descriptors travel beside
// the message, in order).
struct VmmWirePiece {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  CUmemFabricHandle fabric{};
};

constexpr unsigned kShareableTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC;

std::string cuText(CUresult r) {
  const char* name = nullptr;
  if (driverApi().getErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return "CUresult " + std::to_string(r);
  return name;
}

template <typename T>
std::string asBytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

// The mapped piece holding `va`, and its allocation handle (retained: the caller releases it). False when nothing is
// mapped there.
bool pieceAt(CUdeviceptr va, VmmPiece* out) {
  const DriverApi& api = driverApi();
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (api.memGetAddressRange(&base, &bytes, va) != CUDA_SUCCESS || bytes == 0) return false;
  CUmemGenericAllocationHandle h = 0;
  if (api.memRetainAllocationHandle(&h, reinterpret_cast<void*>(va)) != CUDA_SUCCESS) return false;
  *out = VmmPiece{base, bytes, h};
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
    CUresult r;
    if (u.handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
      int fd = -1;
      r = api.memExportToShareableHandle(&fd, p.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (r == CUDA_SUCCESS) ::close(fd);
    } else {
      CUmemFabricHandle fabric{};
      r = api.memExportToShareableHandle(&fabric, p.handle, CU_MEM_HANDLE_TYPE_FABRIC, 0);
    }
    if (r != CUDA_SUCCESS) return fail("the driver does not export its handles (" + cuText(r) + ")");
  }
  u.base = u.pieces.front().va;
  u.bytes = u.pieces.back().va + u.pieces.back().bytes - u.base;
  static std::atomic<uint64_t> nextId{1};
  u.id = kVmmUnitIdBit | nextId.fetch_add(1, std::memory_order_relaxed);
  return u;
}

bool vmmUnitStillMapped(const VmmUnit& u) {
  // The unit's own reference keeps each piece's handle alive, so no other allocation can have its value: the same
  // handle at the same address is the same memory (its extent cannot change under a handle that is not unmapped).
  const DriverApi& api = driverApi();
  for (const VmmPiece& p : u.pieces) {
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

// ------------------------------------------------------------------------------------------------------------------
// The owner's side: the handle server.

VmmHandleServer& VmmHandleServer::instance() {
  static VmmHandleServer* server = new VmmHandleServer;  // never destroyed: its thread lives as long as the process
  return *server;
}

std::string VmmHandleServer::socketName(int64_t pid) { return "conccl-vmm-" + std::to_string(pid); }

bool VmmHandleServer::serve(const VmmUnit& u, int device, std::string* why) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t me = static_cast<int64_t>(::getpid());
  if (listeningPid_ != me) {
    // First export of this process (or of a forked child, whose parent's thread did not come along).
    peersock::OwnedFd listener;
    try {
      listener = peersock::listenAbstract(socketName(me), 64);
    } catch (const Error& e) {
      *why = std::string("the handle server cannot listen (") + e.what() + ")";
      return false;
    }
    const int fd = listener.release();
    std::thread([this, fd] { loop(fd); }).detach();
    listeningPid_ = me;
  }
  units_[u.id] = Served{device, u.handleType, u.bytes, u.pieces};
  return true;
}

void VmmHandleServer::withdraw(uint64_t unitId) {
  std::lock_guard<std::mutex> lock(mutex_);
  units_.erase(unitId);
}

void VmmHandleServer::allowPeers(const std::vector<int64_t>& pids) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int64_t p : pids) ++allowed_[p];
}

void VmmHandleServer::disallowPeers(const std::vector<int64_t>& pids) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int64_t p : pids) {
    auto it = allowed_.find(p);
    if (it != allowed_.end() && --it->second == 0) allowed_.erase(it);
  }
}

void VmmHandleServer::loop(int listenFd) {
  // Its driver calls (exports) belong to no capture: relaxed, so that they never disturb one on another thread.
  relaxCaptureModeOfThisThread();
  peersock::OwnedFd listener(listenFd);
  for (;;) {
    pollfd p{listener.get(), POLLIN, 0};
    if (::poll(&p, 1, -1) <= 0) continue;
    peersock::OwnedFd c = peersock::acceptPending(listener.get());
    if (c.get() < 0) continue;
    try {
      answer(c.get());
    } catch (const std::exception& e) {
      CONCCL_WARN(-1, -1, std::string("VMM handle server: a request failed: ") + e.what());
    }
  }
}

void VmmHandleServer::answer(int fd) {
  const auto deadline = Clock::now() + kServeDeadline;
  // Who connected, by the kernel's word: this user, and a process some communicator of ours has as a peer.
  const peersock::PeerCred cred = peersock::peerCredOf(fd);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cred.uid != static_cast<uint32_t>(::getuid()) || allowed_.count(cred.pid) == 0) {
      CONCCL_WARN(-1, -1, "VMM handle server: refused a connection from pid " + std::to_string(cred.pid) + " (uid " +
                              std::to_string(cred.uid) + "): not a process of a communicator of this one");
      return;  // closed unanswered: it learns nothing
    }
  }
  std::vector<peersock::OwnedFd> none;
  const std::string raw = peersock::recvMessage(fd, sizeof(VmmRequest), 0, &none, deadline);
  VmmRequest req;
  if (raw.size() != sizeof(req)) CONCCL_THROW(concclSystemError, "a request of the wrong size");
  std::memcpy(&req, raw.data(), sizeof(req));
  if (req.magic != kVmmWireMagic) CONCCL_THROW(concclSystemError, "a request with the wrong magic");
  std::vector<std::vector<peersock::OwnedFd>> fds;
  const std::vector<std::string> messages = reply(req.unitId, &fds);
  for (size_t m = 0; m < messages.size(); ++m) {
    std::vector<int> attached;
    for (const peersock::OwnedFd& f : fds[m]) attached.push_back(f.get());
    peersock::sendMessage(fd, messages[m], attached, deadline);
  }
}

std::vector<std::string> VmmHandleServer::reply(uint64_t unitId, std::vector<std::vector<peersock::OwnedFd>>* fds) {
  std::lock_guard<std::mutex> lock(mutex_);
  VmmReplyHeader h;
  auto it = units_.find(unitId);
  if (it == units_.end()) {
    h.status = kUnknownUnit;
    fds->clear();
    fds->emplace_back();
    return {asBytes(h)};
  }
  const Served& s = it->second;
  h.handleType = static_cast<uint32_t>(s.handleType);
  h.pieces = static_cast<uint32_t>(s.pieces.size());
  h.bytes = s.bytes;
  std::vector<std::string> messages{asBytes(h)};
  fds->clear();
  fds->emplace_back();
  DeviceGuard guard(s.device);
  const CUdeviceptr base = s.pieces.front().va;
  for (size_t i = 0; i < s.pieces.size(); ++i) {
    if (i % peersock::kMaxFdsPerMessage == 0) {
      messages.emplace_back();
      fds->emplace_back();
    }
    const VmmPiece& p = s.pieces[i];
    VmmWirePiece w;
    w.offset = p.va - base;
    w.bytes = p.bytes;
    CUresult r;
    if (s.handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
      int exported = -1;
      r = driverApi().memExportToShareableHandle(&exported, p.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (r == CUDA_SUCCESS) fds->back().emplace_back(exported);
    } else {
      r = driverApi().memExportToShareableHandle(&w.fabric, p.handle, CU_MEM_HANDLE_TYPE_FABRIC, 0);
    }
    if (r != CUDA_SUCCESS) {
      CONCCL_WARN(-1, s.device, "VMM handle server: cuMemExportToShareableHandle failed: " + cuText(r));
      h.status = kNotExported;
      fds->clear();
      fds->emplace_back();
      return {asBytes(h)};
    }
    messages.back() += asBytes(w);
  }
  return messages;
}

// ------------------------------------------------------------------------------------------------------------------
// The importer's side.

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

ReceivedUnit askOwnerOnce(int64_t pid, uint64_t unitId, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  peersock::OwnedFd c = peersock::connectAbstract(VmmHandleServer::socketName(pid), deadline);
  // The kernel's word that the owner listens there, not a process that took its name first.
  const peersock::PeerCred cred = peersock::peerCredOf(c.get());
  if (cred.pid != pid || cred.uid != static_cast<uint32_t>(::getuid())) {
    importFailed(pid, unitId, "the socket " + VmmHandleServer::socketName(pid) + " is held by pid " +
                                  std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")");
  }
  VmmRequest req;
  req.unitId = unitId;
  peersock::sendMessage(c.get(), asBytes(req), {}, deadline);
  ReceivedUnit got;
  std::vector<peersock::OwnedFd> none;
  const std::string head = peersock::recvMessage(c.get(), sizeof(VmmReplyHeader), 0, &none, deadline);
  if (head.size() != sizeof(got.header)) importFailed(pid, unitId, "a reply of the wrong size");
  std::memcpy(&got.header, head.data(), sizeof(got.header));
  if (got.header.magic != kVmmWireMagic) importFailed(pid, unitId, "a reply with the wrong magic");
  if (got.header.status == kUnknownUnit) importFailed(pid, unitId, "the owner no longer exports it");
  if (got.header.status != kServed) importFailed(pid, unitId, "the owner could not export its handles");
  const bool posix = got.header.handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  while (got.pieces.size() < got.header.pieces) {
    const size_t batch = std::min<size_t>(peersock::kMaxFdsPerMessage, got.header.pieces - got.pieces.size());
    const std::string body =
        peersock::recvMessage(c.get(), batch * sizeof(VmmWirePiece), posix ? batch : 0, &got.fds, deadline);
    if (body.size() != batch * sizeof(VmmWirePiece) || (posix && got.fds.size() != got.pieces.size() + batch)) {
      importFailed(pid, unitId, "a reply with the wrong number of pieces or descriptors");
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
    if (std::string(e.what()).find("mapping VMM buffer") != std::string::npos) throw;
    importFailed(pid, unitId, e.what());  // the socket's own failure, with what was being done
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
