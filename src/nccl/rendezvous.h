// The shim's per-communicator rendezvous (issue 25 item 1): how the ranks of a communicator learn, at init, which
// of them share a host, and all receive the same answer to "conccl or NCCL, and with which id".
//
// The process that calls ncclGetUniqueId starts a RendezvousRoot: a thread listening on a TCP socket (IPv4, the
// interface pickInterface() chose, an ephemeral port). The 128-byte id carries its address, a random 128-bit
// secret, a random 128-bit nonce and the timeout, marked kRendezvousIdTag in the last 8 bytes (routing.h). Every
// rank's ncclCommInitRank calls rendezvous():
//   root -> rank   hello-challenge: 16 random bytes
//   rank -> root   hello: rank, nranks, host identity, 16 random bytes of its own, and
//                  HMAC-SHA256(secret, "hello" | nonce | root's challenge | the hello's fields)
//   root -> rank   (once every rank has arrived) status, the host of every rank, the root's answer (bytes the
//                  shim chose: the path and the id to init with), a message, and
//                  HMAC-SHA256(secret, "reply" | nonce | the rank's challenge | all of it)
// Both sides prove the secret without sending it, over a challenge the other side chose (no replay). A hello
// whose MAC is wrong is dropped without a byte in answer: the peer learns nothing (not even the host table).
// A reply whose MAC is wrong is refused by the rank (a process that is not the root cannot steer it).
//
// The root thread ends when it has answered every rank, at its deadline (the timeout, from the moment it
// started), or when the RendezvousRoot is destroyed, whichever comes first: an id that no rank ever uses leaves no
// thread behind past its timeout. At the deadline the ranks that did arrive get a timeout status naming the ranks
// that did not. Every wait of a rank is bounded too (the timeout plus a grace).
//
// Errors are values (RendezvousStatus + message), never exceptions, never prints.
#ifndef CONCCL_NCCL_RENDEZVOUS_H_
#define CONCCL_NCCL_RENDEZVOUS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nccl/routing.h"

namespace conccl::nccl {

inline constexpr int kRendezvousIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

struct RendezvousId {
  uint32_t ipv4 = 0;  // host byte order
  uint16_t port = 0;
  uint32_t timeoutMs = 0;
  std::array<uint8_t, 16> secret{};
  std::array<uint8_t, 16> nonce{};
};

// Writes the id into 128 bytes (zero-filled, kRendezvousIdTag in the last 8).
void encodeRendezvousId(const RendezvousId& id, char* out);
// Reads one; nullopt when the bytes are not a rendezvous id of this version.
std::optional<RendezvousId> decodeRendezvousId(const char* in);
// "10.0.0.3:41234" for logs.
std::string rendezvousAddress(const RendezvousId& id);

enum class RendezvousStatus : uint32_t {
  kOk = 0,
  kTimeout = 1,        // some rank did not arrive in time (named in the message), or the root was unreachable
  kBadUsage = 2,       // two ranks with one rank number, nranks that differ, a rank outside [0, nranks)
  kAnswerFailed = 3,   // the root could not make its answer (e.g. no real NCCL for ranks on several hosts)
  kRefused = 4,        // the root closed the connection without answering (wrong secret) or its reply was forged
  kSocketError = 5,    // a socket call failed
};
const char* rendezvousStatusName(RendezvousStatus s);

struct RendezvousResult {
  std::vector<uint64_t> hosts;  // [rank] = that rank's host identity
  std::string answer;           // the root's answer (RendezvousRoot::Answer)
  // The connection to the root, still open (non-blocking): the caller owns it. Keep it (LivenessLink) when the root
  // watches this answer (RendezvousRoot::start's `watch`), else close it.
  int link = -1;
};

// The interfaces of this machine that have an IPv4 address (getifaddrs).
std::vector<NetInterface> listInterfaces();

class RendezvousRoot {
 public:
  // Called once on the root's thread when every rank has arrived: the answer every rank receives, or false with
  // *error set (every rank then fails with kAnswerFailed and that message).
  using Answer = std::function<bool(const std::vector<uint64_t>& hosts, std::string* answer, std::string* error)>;
  // Whether the ranks' connections stay open after this answer, to carry news of a rank that dies
  // (nccl/liveness_link.h). Every rank must decide alike from the same answer.
  using Watch = std::function<bool(const std::string& answer)>;

  // Binds ipv4:0 (port chosen by the kernel), listens, starts the thread. nullptr with *error when a socket call
  // or the random source fails.
  static std::unique_ptr<RendezvousRoot> start(uint32_t ipv4, std::chrono::milliseconds timeout, Answer answer,
                                               std::string* error, Watch watch = {});
  // Stops the thread (if it still runs: the ranks connected get nothing more and time out) and joins it.
  ~RendezvousRoot();
  RendezvousRoot(const RendezvousRoot&) = delete;
  RendezvousRoot& operator=(const RendezvousRoot&) = delete;

  const RendezvousId& id() const { return id_; }
  // Whether the thread has ended (answered everyone, failed, or timed out; for a watched answer: once the watch ended).
  bool finished() const { return finished_.load(); }
  // After finished(): "" when every rank got the answer, otherwise what went wrong.
  std::string outcome() const;
  // Hellos dropped because their MAC was wrong (or that were not hellos at all).
  int refused() const { return refused_.load(); }

 private:
  RendezvousRoot() = default;
  void run(int listenFd, int wakeFd, std::chrono::steady_clock::time_point deadline);
  // After a watched answer, on the root's thread: relays the first death or bye to every rank (liveness_link.h).
  // fds[rank] = that rank's connection; all are closed on return.
  void watchRanks(std::vector<int> fds, int wakeFd);

  RendezvousId id_;
  Answer answer_;
  Watch watch_;
  int wakeFd_ = -1;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::atomic<int> refused_{0};
  mutable std::mutex mutex_;
  std::string outcome_;
};

// Keeps `root` alive in this process until its thread ends; roots whose thread has ended are dropped (joined) on the
// next call, `outcome` told of each one that did not answer every rank. Never freed at exit (a root may still be
// waiting then; it ends with the process).
void keepRendezvousRoot(std::unique_ptr<RendezvousRoot> root, const std::function<void(const std::string&)>& outcome);

// A rank's side: connects to the root named by `id`, proves the secret, says (rank, nranks, host), and waits for
// the reply. Blocks at most id.timeoutMs plus a grace (1 s). kOk fills *out; otherwise *error says why.
RendezvousStatus rendezvous(const RendezvousId& id, int rank, int nranks, uint64_t host, RendezvousResult* out,
                            std::string* error);

// For tests only: a hello made with `secret` instead of the id's (to check that the root refuses it).
RendezvousStatus rendezvousWithSecret(const RendezvousId& id, const std::array<uint8_t, 16>& secret, int rank,
                                      int nranks, uint64_t host, RendezvousResult* out, std::string* error);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_RENDEZVOUS_H_
