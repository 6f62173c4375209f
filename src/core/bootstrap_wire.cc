#include "core/bootstrap_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <new>

#include "base/error.h"

namespace conccl::wire {

std::string errnoText(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

int pollTimeoutMs(Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

Io waitFor(int fd, short events, Clock::time_point deadline, int* err) {
  for (;;) {
    if (Clock::now() >= deadline) return Io::kTimeout;
    pollfd p{fd, events, 0};
    int k = ::poll(&p, 1, pollTimeoutMs(deadline));
    if (k > 0) return Io::kOk;
    if (k < 0 && errno != EINTR) {
      *err = errno;
      return Io::kFailed;
    }
  }
}

// Sockets are non-blocking: every wait goes through poll() with the time left, so nothing blocks past the
// deadline; MSG_NOSIGNAL turns a closed peer into EPIPE instead of SIGPIPE.
Io sendAll(int fd, const void* data, size_t n, Clock::time_point deadline, int* err) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Io w = waitFor(fd, POLLOUT, deadline, err);
      if (w != Io::kOk) return w;
      continue;
    }
    if (k == 0 || errno == EPIPE || errno == ECONNRESET) return Io::kClosed;
    *err = errno;
    return Io::kFailed;
  }
  return Io::kOk;
}

Io sendMessage(int fd, MsgType type, int rank, int nranks, const std::string& body, Clock::time_point deadline,
               int* err) {
  WireHeader h{kWireMagic, type, rank, nranks, static_cast<int64_t>(::getpid()), body.size()};
  Io st = sendAll(fd, &h, sizeof(h), deadline, err);
  if (st != Io::kOk) return st;
  return sendAll(fd, body.data(), body.size(), deadline, err);
}

std::string errorBody(concclResult_t code, const std::string& text) {
  std::string body;
  uint32_t c = static_cast<uint32_t>(code);
  body.append(reinterpret_cast<const char*>(&c), sizeof(c));
  body.append(text, 0, std::min<size_t>(text.size(), kMaxErrorText));
  return body;
}

// The error rank 0 reported in an ERROR message, thrown on this rank with the same code and text.
[[noreturn]] void throwReported(const std::string& body) {
  uint32_t c = 0;
  if (body.size() < sizeof(c)) CONCCL_THROW(concclSystemError, "rank 0 sent a malformed bootstrap error message");
  std::memcpy(&c, body.data(), sizeof(c));
  concclResult_t code = static_cast<concclResult_t>(c);
  if (c == concclSuccess || c >= concclNumResults) code = concclSystemError;
  CONCCL_THROW(code, body.substr(sizeof(c)));
}

Io Incoming::pump(int fd, uint64_t maxLength, bool errorAllowed) {
  while (!complete) {
    char* dst;
    size_t want;
    if (hdrGot < sizeof(hdr)) {
      dst = reinterpret_cast<char*>(&hdr) + hdrGot;
      want = sizeof(hdr) - hdrGot;
    } else {
      dst = body.data() + bodyGot;
      want = body.size() - bodyGot;
    }
    ssize_t k = ::recv(fd, dst, want, MSG_DONTWAIT);
    if (k == 0) return Io::kClosed;
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kPending;
      // A peer that closed with data of ours unread makes Linux report ECONNRESET instead of end of stream.
      if (errno == ECONNRESET) return Io::kClosed;
      why = "recv failed: " + errnoText(errno);
      return Io::kFailed;
    }
    if (hdrGot < sizeof(hdr)) {
      hdrGot += static_cast<size_t>(k);
      if (hdrGot < sizeof(hdr)) continue;
      if (hdr.magic != kWireMagic) {
        why = "bad magic (not a conccl bootstrap message of this version)";
        return Io::kMalformed;
      }
      uint64_t limit = hdr.type == kError && errorAllowed ? sizeof(uint32_t) + kMaxErrorText : maxLength;
      if (hdr.length > limit) {
        why = "message of type " + std::to_string(hdr.type) + " has " + std::to_string(hdr.length) +
              " bytes, more than the limit of " + std::to_string(limit);
        return Io::kMalformed;
      }
      try {
        body.resize(hdr.length);
      } catch (const std::bad_alloc&) {
        why = "out of memory for a message of " + std::to_string(hdr.length) + " bytes";
        return Io::kFailed;
      }
    } else {
      bodyGot += static_cast<size_t>(k);
    }
    if (hdrGot == sizeof(hdr) && bodyGot == body.size()) complete = true;
  }
  return Io::kOk;
}

Io recvMessage(int fd, uint64_t maxLength, Clock::time_point deadline, Incoming* in, int* err, bool errorAllowed) {
  for (;;) {
    Io st = in->pump(fd, maxLength, errorAllowed);
    if (st != Io::kPending) return st;
    st = waitFor(fd, POLLIN, deadline, err);
    if (st != Io::kOk) return st;
  }
}

}  // namespace conccl::wire
