// Bootstrap of a communicator whose ranks live in several processes of one node (concclCommInitRank).
//
// The unique id (concclGetUniqueId) names an abstract Unix-domain socket (Linux: no file in the file system,
// gone when the last descriptor closes) derived from 128 random bits. Rank 0 binds and listens on it; every
// other rank connects (retrying until rank 0 is there) and sends a hello: (magic, nranks, rank, pid, payload).
// When rank 0 has one hello from every rank it sends everyone the table of all hellos: that is the all-gather
// the communicator is built from. After that the star of connections (rank 0 <-> every rank) serves a few more
// all-gathers and barriers during initialisation and is then closed: nothing stays open for the life of the
// communicator, so nothing can be left behind (concclCommDestroy / Abort have no socket to clean up).
//
// Errors (all conccl::Error, never a hang; every wait is bounded by the timeout, plus the grace below):
//   - a rank that never arrives: rank 0 fails with concclTimeout naming the missing ranks and tells the ranks
//     that did arrive (the same in allGather/barrier: rank 0 names the ranks that did not call it); non-root
//     ranks wait for rank 0's verdict up to timeout/2 (at most 1 s) past their own timeout, since they may have
//     started before rank 0; a rank that cannot reach rank 0 fails with concclTimeout;
//   - a rank that arrives twice (two processes with the same rank), or a hello whose nranks differs from rank
//     0's: rank 0 fails at once and tells every connected rank, with concclInvalidUsage naming both;
//   - rank 0 arriving twice: the second bind fails (address in use): concclInvalidUsage;
//   - an id that is not one (bad magic, or a version from another conccl): concclInvalidArgument.
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
  static constexpr uint32_t kVersion = 1;
  uint64_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t reserved = 0;
  uint64_t nonce[2] = {0, 0};  // 128 random bits: the socket name and the shared-memory name derive from them
};
static_assert(sizeof(UniqueIdData) <= CONCCL_UNIQUE_ID_BYTES);

// A fresh id (random nonce from std::random_device). Throws concclSystemError if no entropy is available.
UniqueIdData makeUniqueId();
// Reads and checks an id passed by a user. Throws concclInvalidArgument if it is not a conccl id.
UniqueIdData parseUniqueId(const concclUniqueId& id);
void storeUniqueId(const UniqueIdData& data, concclUniqueId* id);
// Printable form of the nonce (32 lowercase hex digits), used for the socket and shared-memory names and in logs.
std::string uniqueIdTag(const UniqueIdData& data);

class Bootstrap {
 public:
  // Connects rank `rank` of `nranks` to the others and all-gathers `payload` (any bytes, any length up to
  // 64 KiB, may differ between ranks). Blocks until every rank has arrived or `timeout` has passed.
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
  int listenFd_ = -1;           // rank 0 while connecting
  std::vector<int> peerFds_;    // rank 0: [r] = socket of rank r (r > 0); others: [0] = socket to rank 0
  std::vector<std::string> payloads_;
  std::vector<int64_t> pids_;
};

}  // namespace conccl
