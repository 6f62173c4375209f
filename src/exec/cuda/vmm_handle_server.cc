// The process's VMM handle server (vmm_export.h): one thread, one request at a time, answering only the peers of its
// communicators, exporting each piece of a unit when asked.
#include <cuda_runtime_api.h>
#include <poll.h>
#include <unistd.h>

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
    int exported = -1;
    const CUresult r = exportPiece(p.handle, s.handleType, &exported, &w.fabric);
    if (exported >= 0) fds->back().emplace_back(exported);
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

}  // namespace conccl::exec
