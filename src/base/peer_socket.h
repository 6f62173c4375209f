// Unix sockets between processes of one node whose peer the kernel names (SO_PEERCRED), carrying whole messages
// (SOCK_SEQPACKET) and file descriptors (SCM_RIGHTS). The CUDA executor passes the POSIX file descriptors of VMM
// memory over them (exec/cuda/vmm_export.h): a descriptor cannot travel through shared memory, and the peer that
// receives one gets the memory behind it, so each side checks who is at the other end before anything is sent:
// the kernel's word for the peer's uid and pid, never a claim in a message.
//
// Every call is bounded by a deadline (poll), throws conccl::Error(concclSystemError) with the reason on failure
// (timeout, peer gone, a message too large, errno text), and never leaves a descriptor open behind an exception.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace conccl::peersock {

using Clock = std::chrono::steady_clock;

// Descriptors in one message. The kernel allows 253 (SCM_MAX_FD); a larger set is sent as several messages.
constexpr size_t kMaxFdsPerMessage = 64;

// Owns one descriptor (a socket, or one received from a peer).
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd() { reset(); }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.release()) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// What the kernel says of the process at the other end of a connected Unix socket (as it was when it connected).
struct PeerCred {
  int64_t pid = 0;
  uint32_t uid = 0;
};
PeerCred peerCredOf(int fd);

// A listening SOCK_SEQPACKET socket on the abstract name `name` (no file; gone with the last descriptor), close-on-
// exec and non-blocking. Throws (EADDRINUSE when another socket holds the name).
OwnedFd listenAbstract(const std::string& name, int backlog);
// Accepts one pending connection (close-on-exec, non-blocking); an invalid OwnedFd when none is pending.
OwnedFd acceptPending(int listenFd);
// Connects to the abstract name before the deadline.
OwnedFd connectAbstract(const std::string& name, Clock::time_point deadline);

// Sends `body` (one message, at most 64 KiB) with `fds` (at most kMaxFdsPerMessage; they stay open here).
void sendMessage(int fd, const std::string& body, const std::vector<int>& fds, Clock::time_point deadline);
// Receives one message of at most `maxBytes` and the descriptors that came with it (appended to `fds`, now owned
// by the caller). Throws when the peer closed first, the message was longer than `maxBytes`, or more descriptors
// came than `maxFds` (those are closed).
std::string recvMessage(int fd, size_t maxBytes, size_t maxFds, std::vector<OwnedFd>* fds, Clock::time_point deadline);

}  // namespace conccl::peersock
