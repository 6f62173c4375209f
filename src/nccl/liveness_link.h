// Liveness of the ranks of a communicator across hosts (issue 25: a node that dies is reported on every rank).
//
// Why: the inter-node phases of a hierarchical communicator run on the real NCCL, which learns that a node died only
// when one of its own transfers to that node fails. On 3 simulated nodes of 2 ranks (one H200, 2026-12-03) node 0
// heard of node 1's death 1.19-1.34 s after the kill, node 2 after 0.60-0.68 s. The rendezvous already holds one
// authenticated TCP connection per rank to its root (nccl/rendezvous.h); for a communicator the root watches, those
// connections stay open after the answer and carry the news at once:
//   * a rank's process that ends without destroying or aborting its communicator closes its connection (the kernel
//     does it, also for SIGKILL): the root tells every other rank "rank r died" and closes all connections;
//   * the first rank that destroys or aborts the communicator says bye: the root tells the others the watch has
//     ended (the job is ending, or failed in a way each rank learns from its own calls), so that ranks that exit at
//     the end of a job are never reported as dead;
//   * the root's process itself dying closes every connection: each rank reports the root's rank as lost.
// A rank reads its end without blocking (LivenessLink::poll), from ncclCommGetAsyncError, which PyTorch's watchdog
// calls while work is pending.
//
// The frames after the rendezvous reply are 16 bytes: magic, kind, rank (little-endian, as the rest of the wire).
#ifndef CONCCL_NCCL_LIVENESS_LINK_H_
#define CONCCL_NCCL_LIVENESS_LINK_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace conccl::nccl {

namespace watch_wire {
inline constexpr uint64_t kMagic = 0x3177564452434c43ull;  // "CLCRDVw1" read little-endian
inline constexpr size_t kFrameBytes = 16;
enum Kind : uint32_t {
  kDied = 1,   // root -> rank: rank `rank` closed its connection without a bye (its process ended)
  kEnded = 2,  // root -> rank: a rank said bye; the watch is over
  kBye = 3,    // rank -> root: this rank destroys or aborts its communicator
};
struct Frame {
  uint32_t kind = 0;
  int32_t rank = -1;
};
void encode(const Frame& f, uint8_t* out);  // kFrameBytes
// False when the bytes are not a frame (wrong magic).
bool decode(const uint8_t* in, Frame* f);
}  // namespace watch_wire

// A rank's end of a watched rendezvous connection. Thread-safe; shared by a communicator and its split children.
class LivenessLink {
 public:
  static constexpr int kAlive = -1;     // nothing heard (or the watch ended cleanly)
  static constexpr int kRootLost = -2;  // the connection to the root ended without a word: its process ended

  // Takes ownership of fd (a connected, non-blocking socket).
  explicit LivenessLink(int fd);
  ~LivenessLink();
  LivenessLink(const LivenessLink&) = delete;
  LivenessLink& operator=(const LivenessLink&) = delete;

  // Reads what has arrived without blocking. The first rank reported dead (in the rendezvous' numbering), kRootLost,
  // or kAlive; once a death is heard it is returned on every later call.
  int poll();
  // Whether the watch is over (a bye was said or heard); poll() then returns kAlive unless a death came first.
  bool ended();
  // This rank destroys or aborts its communicator: tells the root (which ends the watch for every rank) and closes.
  void bye();
  // "rank 3 (its process ended without destroying the communicator)" etc., for the error message.
  std::string describe(int dead) const;

 private:
  void closeLocked();
  std::mutex mutex_;
  int fd_ = -1;
  int dead_ = kAlive;
  bool ended_ = false;
  std::vector<uint8_t> partial_;
};

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_LIVENESS_LINK_H_
