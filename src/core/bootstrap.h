// Bootstrap of a communicator whose ranks live in several processes of one node (concclCommInitRank).
//
// The unique id (concclGetUniqueId) carries two random values: a 128-bit nonce, which names an abstract
// Unix-domain socket (Linux: no file in the file system, gone when the last descriptor closes) and the
// shared-memory segment, and a 256-bit secret, which names nothing and never crosses a socket. Rank 0 binds and
// listens on the name; every other rank connects (retrying until rank 0 is there) and says hello: (magic,
// nranks, rank, pid, payload). When rank 0 has one hello from every rank it sends everyone the table of all
// hellos: that is the all-gather the communicator is built from. After that the star of connections (rank 0 <->
// every rank) serves a few more all-gathers and barriers during initialisation and is then closed: nothing stays
// open for the life of the communicator, so nothing can be left behind (concclCommDestroy / Abort have no socket
// to clean up).
//
// Who may join: the name is public once bound (it shows in /proc/net/unix), so every connection is
// authenticated, both ways, before anything of the job crosses it:
//   1. same user: each side reads the other's credentials from the kernel (SO_PEERCRED); rank 0 closes a
//      connection from another uid at once, and a rank refuses a listener of another uid;
//   2. the secret: rank 0 sends a fresh 32-byte challenge c0; the rank answers with its own challenge c1 and
//      HMAC-SHA256(secret, "peer", nonce, c0, c1, rank, nranks, pid) (keyed_hash.h); rank 0 checks it (constant
//      time) and answers HMAC-SHA256(secret, "root", ...) over the same fields, which the rank checks before it
//      sends its hello. Fresh challenges on both sides make a proof good for one connection only.
// A connection that fails (another uid, a wrong proof, garbage, silence for 2 s) is closed and logged at WARN;
// it has been sent nothing but the challenge (and was never sent an error), and the job goes on: rank 0 runs
// every handshake in its one poll loop, never waiting on one connection, and keeps accepting until its deadline
// (at most 64 handshakes at a time). A rank that finds an impostor at the name (or is dropped by rank 0) closes
// and connects again until its deadline; its timeout then says why. What is not prevented: a process that binds
// the name before rank 0 makes rank 0 fail (address in use) and the job time out; and a process of the same
// user can read the id from the job's memory anyway (ptrace), so the secret keeps out other jobs and mistakes,
// the uid check everyone else.
//
// Errors (all conccl::Error, never a hang; every wait is bounded by the timeout, plus the grace below):
//   - a rank that never arrives: rank 0 fails with concclTimeout naming the missing ranks (and how many
//     connections it refused) and tells the ranks that did arrive (the same in allGather/barrier: rank 0 names
//     the ranks that did not call it); non-root ranks wait for rank 0's verdict up to timeout/2 (at most 1 s) past
//     their own timeout, since they may have started before rank 0; a rank that cannot reach rank 0, or finds
//     no listener that proves it is rank 0, fails with concclTimeout;
//   - a rank that arrives twice (two processes with the same rank), or a hello whose nranks differs from rank
//     0's: rank 0 fails at once and tells every connected rank, with concclInvalidUsage naming both;
//   - rank 0 arriving twice: the second bind fails (address in use): concclInvalidUsage;
//   - a message from an authenticated rank that is malformed (wrong type, size or shape): concclSystemError;
//   - an id that is not one (bad magic, a version from another conccl, no secret): concclInvalidArgument.
#pragma once

#include <conccl/conccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace conccl {

// The contents of concclUniqueId (CONCCL_UNIQUE_ID_BYTES bytes; the rest is zero).
struct UniqueIdData {
  static constexpr uint64_t kMagic = 0x636f6e63636c4944ull;  // "concclID"
  static constexpr uint32_t kVersion = 2;
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t flags = 0;          // bit 0: a rendezvous across hosts follows (api/cross_node.cc)
  uint64_t nonce[2] = {0, 0};  // 128 random bits: the socket name and the shared-memory name derive from them
  uint8_t secret[32] = {};     // 256 random bits, independent of the nonce: the key of the handshake's MACs
};
// The NCCL shim marks a conccl id in the last 8 bytes of the 128 (src/nccl/routing.cc).
static_assert(sizeof(UniqueIdData) <= CONCCL_UNIQUE_ID_BYTES - 8);

// A fresh id (nonce and secret from getrandom). Throws concclSystemError if no entropy is available.
UniqueIdData makeUniqueId();
// Reads and checks an id passed by a user. Throws concclInvalidArgument if it is not a conccl id of this version
// (or its secret is all zero).
UniqueIdData parseUniqueId(const concclUniqueId& id);
void storeUniqueId(const UniqueIdData& data, concclUniqueId* id);
// Printable form of the nonce (32 lowercase hex digits), used for the socket and shared-memory names and in logs.
std::string uniqueIdTag(const UniqueIdData& data);

class Bootstrap {
 public:
  // Connects rank `rank` of `nranks` to the others and all-gathers `payload` (any bytes, any length up to
  // 64 KiB, may differ between ranks). Only processes of this user that hold `id`'s secret take part (see the top
  // of this file). Blocks until every rank has arrived or `timeout` has passed.
  static std::unique_ptr<Bootstrap> connect(const UniqueIdData& id, int rank, int nranks, const std::string& payload,
                                            std::chrono::milliseconds timeout);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // [r] = the payload rank r passed to connect(), and the pid of its process.
  const std::vector<std::string>& payloads() const { return payloads_; }
  const std::vector<int64_t>& pids() const { return pids_; }

  // All-gather of one blob per rank (any length up to 64 MiB). Every rank must call it, in the same order as
  // every other collective operation of this bootstrap. Bounded by the timeout given to connect().
  std::vector<std::string> allGather(const std::string& mine);
  // Returns when every rank has called barrier().
  void barrier();
  // Closes every socket (also done by the destructor). Idempotent.
  void close();

 private:
  Bootstrap() = default;
  // allGather's two sides (bootstrap.cc), both bounded by `deadline`: a rank other than 0 sends its blob to rank 0 and
  // reads the whole vector back; rank 0 reads every rank's blob as it comes, then sends everyone the vector.
  std::vector<std::string> allGatherFromRoot(const std::string& mine, std::chrono::steady_clock::time_point deadline);
  std::vector<std::string> allGatherAsRoot(const std::string& mine, std::chrono::steady_clock::time_point deadline);
  int rank_ = 0;
  int nranks_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::string tag_;
  int listenFd_ = -1;         // rank 0 while connecting
  std::vector<int> peerFds_;  // rank 0: [r] = socket of rank r (r > 0); others: [0] = socket to rank 0
  std::vector<std::string> payloads_;
  std::vector<int64_t> pids_;
};

}  // namespace conccl
