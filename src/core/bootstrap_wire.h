// The bootstrap's messages (bootstrap.cc): a fixed header and a body over non-blocking Unix stream sockets, every
// wait bounded by a deadline through poll(). Private to src/core.
#pragma once

#include <conccl/conccl.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/peer_socket.h"

namespace conccl::wire {

using Clock = std::chrono::steady_clock;

// Every message on a bootstrap socket is a WireHeader followed by `length` bytes. Both ends run on the same
// node with the same conccl, so the header is sent as it is laid out in memory (fixed-width fields, no padding).
struct WireHeader {
  uint32_t magic;
  uint32_t type;
  int32_t rank;    // the sender
  int32_t nranks;  // the sender's nranks
  int64_t pid;     // the sender's pid
  uint64_t length;
};
static_assert(sizeof(WireHeader) == 32);

// Differs from the id's magic on purpose; bump the digit when the wire format changes.
constexpr uint32_t kWireMagic = 0x32424343u;  // "CCB2"

enum MsgType : uint32_t {
  kHello = 1,      // rank r -> rank 0: its payload
  kTable = 2,      // rank 0 -> rank r: every rank's pid and payload
  kError = 3,      // rank 0 -> rank r: u32 result code + text; the bootstrap failed, throw the same error
  kGather = 4,     // rank r -> rank 0: its all-gather blob
  kGathered = 5,   // rank 0 -> rank r: every rank's blob
  kChallenge = 6,  // rank 0 -> a new connection: c0, a fresh random challenge
  kProof = 7,      // the connection -> rank 0: c1 (its own challenge) and peerMac(c0, c1, rank, nranks, pid)
  kRootProof = 8,  // rank 0 -> the connection, once its proof checks: rootMac(c0, c1, rank, nranks, pid)
};

// The text of an ERROR message is cut at this length.
constexpr uint64_t kMaxErrorText = 64ull << 10;

std::string errnoText(int err);

inline void closeFd(int& fd) {
  // Linux releases the descriptor even when close() reports EINTR, so it is never retried.
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Owns a descriptor that is not (yet) stored in a Bootstrap.
using Fd = peersock::OwnedFd;

// poll() timeout for the time left until `deadline`, rounded up so that a wait never ends just before it
// (which would spin).
int pollTimeoutMs(Clock::time_point deadline);

enum class Io { kOk, kPending, kClosed, kTimeout, kFailed, kMalformed };

// Waits until `fd` is ready for `events` or the deadline passes. kOk does not promise the next call succeeds:
// the caller retries and sees the error or end of stream there.
Io waitFor(int fd, short events, Clock::time_point deadline, int* err);
// Sends all of data[0..n) before the deadline.
Io sendAll(int fd, const void* data, size_t n, Clock::time_point deadline, int* err);
// Sends a header (this process's pid, body.size()) and `body` before the deadline.
Io sendMessage(int fd, MsgType type, int rank, int nranks, const std::string& body, Clock::time_point deadline,
               int* err);

inline void appendU64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof(v)); }

// Reads fixed-width fields and byte strings out of a message body; false when the body is too short.
class BodyReader {
 public:
  explicit BodyReader(const std::string& body) : body_(body) {}
  bool u64(uint64_t* v) {
    if (body_.size() - pos_ < sizeof(*v)) return false;
    std::memcpy(v, body_.data() + pos_, sizeof(*v));
    pos_ += sizeof(*v);
    return true;
  }
  bool bytes(uint64_t n, std::string* out) {
    if (body_.size() - pos_ < n) return false;
    out->assign(body_, pos_, n);
    pos_ += n;
    return true;
  }
  bool atEnd() const { return pos_ == body_.size(); }

 private:
  const std::string& body_;
  size_t pos_ = 0;
};

// The body of an ERROR message: the code and the text (cut at kMaxErrorText).
std::string errorBody(concclResult_t code, const std::string& text);
// The error rank 0 reported in an ERROR message, thrown on this rank with the same code and text.
[[noreturn]] void throwReported(const std::string& body);

// One message being received without blocking, a piece at a time (rank 0 reads from every rank at once).
struct Incoming {
  WireHeader hdr{};
  size_t hdrGot = 0;
  std::string body;
  size_t bodyGot = 0;
  bool complete = false;
  std::string why;  // kMalformed / kFailed: what was wrong

  // Reads what the socket has. kOk: the message is complete; kPending: more is to come. `maxLength` bounds
  // the body of any type but kError (which has its own bound unless `errorAllowed` is false: from a peer not
  // authenticated yet), checked before anything is allocated.
  Io pump(int fd, uint64_t maxLength, bool errorAllowed = true);
};

// Receives one whole message from `fd` before the deadline.
Io recvMessage(int fd, uint64_t maxLength, Clock::time_point deadline, Incoming* in, int* err,
               bool errorAllowed = true);

}  // namespace conccl::wire
