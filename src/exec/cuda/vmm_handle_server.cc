// The process's VMM handle server (vmm_export.h): one thread, one request at a time, answering only the peers of its
// communicators, exporting each piece of a unit when asked.
#include <cuda_runtime_api.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/vmm_export.h"
#include "exec/cuda/vmm_wire.h"
#include "exec/executor.h"

namespace conccl::exec {

using namespace vmmwire;
using Clock = std::chrono::steady_clock;

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
    try {
      std::thread([this, fd = listener.get()] { loop(fd); }).detach();
    } catch (const std::system_error& e) {
      *why = std::string("the handle server's thread cannot start (") + e.what() + ")";
      return false;  // the listener closes with `listener`
    }
    (void)listener.release();  // the thread's now
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
  bool acceptFailedBefore = false;
  for (;;) {
    pollfd p{listener.get(), POLLIN, 0};
    if (::poll(&p, 1, -1) <= 0) continue;
    peersock::OwnedFd c;
    try {
      c = peersock::acceptPending(listener.get());
    } catch (const std::exception& e) {
      // Out of descriptors or memory (a process with many open files): the thread must not end the process. The
      // connection stays pending (the listener stays readable), so wait before trying again; the asker's own
      // deadline bounds its wait.
      if (!acceptFailedBefore) CONCCL_WARN(-1, -1, std::string("VMM handle server: accept failed: ") + e.what());
      acceptFailedBefore = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
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
  // The header, then the pieces a batch at a time, each batch's descriptors closed once sent: a unit of hundreds of
  // pieces never holds more than one batch of descriptors open on either side (the importer imports each batch as
  // it comes). The first batch is exported before the header, so an export the driver refuses is answered as such.
  size_t pieces = 0;
  std::vector<peersock::OwnedFd> fds;
  std::string batch;
  const VmmReplyHeader h = exportBatch(req.unitId, 0, &pieces, &batch, &fds);
  peersock::sendMessage(fd, asBytes(h), {}, deadline);
  if (h.status != kServed) return;
  for (size_t first = 0;;) {
    std::vector<int> attached;
    for (const peersock::OwnedFd& f : fds) attached.push_back(f.get());
    peersock::sendMessage(fd, batch, attached, deadline);
    fds.clear();
    first += peersock::kMaxFdsPerMessage;
    if (first >= pieces) return;
    // Withdrawn or refused meanwhile: the connection closes short and the importer fails its call.
    if (exportBatch(req.unitId, first, &pieces, &batch, &fds).status != kServed) return;
  }
}

VmmReplyHeader VmmHandleServer::exportBatch(uint64_t unitId, size_t first, size_t* pieces, std::string* batch,
                                            std::vector<peersock::OwnedFd>* fds) {
  std::lock_guard<std::mutex> lock(mutex_);
  VmmReplyHeader h;
  batch->clear();
  fds->clear();
  auto it = units_.find(unitId);
  if (it == units_.end() || (first > 0 && it->second.pieces.size() != *pieces)) {
    h.status = kUnknownUnit;
    return h;
  }
  const Served& s = it->second;
  h.handleType = static_cast<uint32_t>(s.handleType);
  h.pieces = static_cast<uint32_t>(s.pieces.size());
  h.bytes = s.bytes;
  *pieces = s.pieces.size();
  DeviceGuard guard(s.device);
  const CUdeviceptr base = s.pieces.front().va;
  const size_t end = std::min(s.pieces.size(), first + peersock::kMaxFdsPerMessage);
  for (size_t i = first; i < end; ++i) {
    const VmmPiece& p = s.pieces[i];
    VmmWirePiece w;
    w.offset = p.va - base;
    w.bytes = p.bytes;
    int exported = -1;
    const CUresult r = exportPiece(p.handle, s.handleType, &exported, &w.fabric);
    if (r == CUDA_SUCCESS && exported >= 0) fds->emplace_back(exported);  // a failed export created none
    if (r != CUDA_SUCCESS) {
      CONCCL_WARN(-1, s.device, "VMM handle server: cuMemExportToShareableHandle failed: " + cuText(r));
      h.status = kNotExported;
      batch->clear();
      fds->clear();
      return h;
    }
    *batch += asBytes(w);
  }
  return h;
}

}  // namespace conccl::exec
