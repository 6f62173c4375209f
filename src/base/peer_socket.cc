// See peer_socket.h.
#include "base/peer_socket.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace conccl::peersock {
namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  CONCCL_THROW(concclSystemError, what + ": " + std::strerror(err));
}

socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, then the name (not NUL-terminated; the length says where it ends).
  CONCCL_REQUIRE(!name.empty() && name.size() < sizeof(addr->sun_path) - 1,
                 "socket name '" + name + "' is empty or longer than a Unix socket address allows");
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

int pollMs(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000 * 1000));
}

// Waits until `fd` has `events` or the deadline passes (then throws, naming `what`).
void waitReady(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, pollMs(deadline));
    if (n > 0) return;  // ready, or an error / hang-up the next call reports
    if (n < 0 && errno != EINTR) fail(std::string("poll while ") + what, errno);
    if (n == 0 && Clock::now() >= deadline) CONCCL_THROW(concclSystemError, std::string("timed out ") + what);
  }
}

}  // namespace

void OwnedFd::reset(int fd) {
  // Linux releases the descriptor even when close() reports EINTR, so it is never retried.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

PeerCred peerCredOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    fail("reading the peer's credentials (SO_PEERCRED)", errno);
  }
  return PeerCred{static_cast<int64_t>(cred.pid), static_cast<uint32_t>(cred.uid)};
}

OwnedFd listenAbstract(const std::string& name, int backlog) {
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, &addr);
  OwnedFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) fail("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) fail("binding '" + name + "'", errno);
  if (::listen(fd.get(), backlog) != 0) fail("listening on '" + name + "'", errno);
  return fd;
}

OwnedFd acceptPending(int listenFd) {
  for (;;) {
    const int c = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c >= 0) return OwnedFd(c);
    if (errno == EINTR) continue;
    // Nothing pending, or a connection that went away before it was accepted: nothing to accept now.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EPROTO) return OwnedFd();
    fail("accepting a connection", errno);
  }
}

OwnedFd connectAbstract(const std::string& name, Clock::time_point deadline) {
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, &addr);
  OwnedFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) fail("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
    if (errno == EINTR) continue;
    if (errno == EAGAIN && Clock::now() < deadline) {
      // The listener's backlog is full: try again shortly (a Unix socket connect never completes later).
      ::poll(nullptr, 0, 1);
      continue;
    }
    fail("connecting to '" + name + "'", errno);
  }
}

void sendMessage(int fd, const std::string& body, const std::vector<int>& fds, Clock::time_point deadline) {
  CONCCL_ASSERT(fds.size() <= kMaxFdsPerMessage && body.size() <= (64u << 10) && !body.empty());
  iovec iov{const_cast<char*>(body.data()), body.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    std::memset(control, 0, sizeof(control));
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(body.size())) return;
    if (n >= 0) CONCCL_THROW(concclSystemError, "a message was sent in part (" + std::to_string(n) + " bytes)");
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) CONCCL_THROW(concclSystemError, "the peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK) fail("sending a message", errno);
    waitReady(fd, POLLOUT, deadline, "sending a message");
  }
}

std::string recvMessage(int fd, size_t maxBytes, size_t maxFds, std::vector<OwnedFd>* fds, Clock::time_point deadline) {
  CONCCL_ASSERT(fds != nullptr && maxFds <= kMaxFdsPerMessage && maxBytes > 0);
  std::string body(maxBytes, '\0');
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  for (;;) {
    iovec iov{body.data(), body.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    // MSG_CMSG_CLOEXEC: a descriptor received here must not leak into a child the caller starts meanwhile.
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      waitReady(fd, POLLIN, deadline, "waiting for a message");
      continue;
    }
    if (n < 0 && errno == ECONNRESET) CONCCL_THROW(concclSystemError, "the peer closed the connection");
    if (n < 0) fail("receiving a message", errno);
    // Take ownership of every descriptor that came, before any check can throw: none may leak.
    std::vector<OwnedFd> got;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int one = -1;
        std::memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        got.emplace_back(one);
      }
    }
    if (n == 0) CONCCL_THROW(concclSystemError, "the peer closed the connection");
    if ((msg.msg_flags & MSG_TRUNC) != 0) {
      CONCCL_THROW(concclSystemError, "a message longer than " + std::to_string(maxBytes) + " bytes");
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0 || got.size() > maxFds) {
      CONCCL_THROW(concclSystemError, "a message with more descriptors than the " + std::to_string(maxFds) + " expected");
    }
    for (OwnedFd& f : got) fds->push_back(std::move(f));
    body.resize(static_cast<size_t>(n));
    return body;
  }
}

}  // namespace conccl::peersock
