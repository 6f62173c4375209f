// Sharing VMM memory (cuMemCreate + cuMemMap: PyTorch's expandable segments) with the peer processes of a
// communicator, so that calls on it move data directly on the copy engines like calls on cudaMalloc memory, instead
// of being staged (an SM copy of every received byte on our driver). CUDA IPC handles do not exist for such memory;
// its physical allocations are exported one by one as shareable handles: POSIX file descriptors (what PyTorch asks
// for when the device has no fabric handles) or fabric handles, whichever the allocation was created with.
//
// A unit (VmmUnit) is what one BufferExport describes: the run of mappings that covers a call's buffer. A VMM range
// is mapped piece by piece (PyTorch maps 2 MiB or 20 MiB at a time), and cuMemGetAddressRange names the piece
// holding an address; a buffer may cross pieces, the unit holds every one of them. The owner retains each piece's
// allocation handle while the unit is cached: the handle value then cannot be handed to another allocation, so
// "the handle mapped at this address is still ours" (two driver calls per piece, every call) proves the memory was
// not remapped since (PyTorch unmaps and remaps pieces on empty_cache and out-of-memory retries).
//
// The descriptors cannot travel through the communicator's shared memory. A peer that maps a unit asks this
// process's handle server (one thread per process, started by the first export, on the abstract socket
// "conccl-vmm-<pid>") over a Unix socket: the server checks the kernel's word for who connected (same uid, a pid of
// a process some communicator here shares with), exports each piece at that moment, sends the descriptors
// (SCM_RIGHTS) and closes them; the peer checks the kernel's word that the server is the owner's pid. Nothing stays
// open between requests, so a process never holds more descriptors than one reply.
#pragma once

#include <cuda.h>

#include <chrono>
#include <map>
#include <mutex>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/peer_socket.h"
#include "exec/cuda/vmm_wire.h"

namespace conccl::exec {

// One mapped piece of a VMM range.
struct VmmPiece {
  CUdeviceptr va = 0;
  size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;  // retained by the unit (released with it)
  // The driver's id of the physical allocation mapped at `va` (CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: unique in the
  // process while the allocation lives, and the unit's handle keeps it alive), or 0 when the driver gave none.
  uint64_t blockId = 0;
};

// The pieces covering one exported buffer, contiguous from `base`.
struct VmmUnit {
  uint64_t id = 0;  // the BufferExport's allocId (kVmmUnitIdBit set: never a driver buffer id)
  uint64_t lastUse = 0;  // the owner's cache clock at the last call that used it (least recently used goes first)
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CUmemAllocationHandleType handleType = CU_MEM_HANDLE_TYPE_NONE;
  std::vector<VmmPiece> pieces;
};

constexpr uint64_t kVmmUnitIdBit = 1ull << 63;

// Whether `ptr` is VMM memory whose allocations were created shareable (POSIX descriptor or fabric handle), from one
// pointer query. Pool (cudaMallocAsync) memory is not: its pool decides, and the default pool shares nothing.
bool isShareableVmm(const void* ptr);

// The unit covering [ptr, ptr + bytes), made from the current mappings: every piece retained, and every one
// shareable with one handle type. nullopt (with `why`) when some piece is not mapped, not shareable, or of another
// device; the caller then stages the call.
std::optional<VmmUnit> makeVmmUnit(const void* ptr, size_t bytes, int device, std::string* why);
// Whether the pieces of `u` that overlap [ptr, ptr + bytes) (every piece: the default) are still mapped where they
// were: the same block id at the piece's address (one driver call a piece), or where the driver gave no id the same
// handle (two). A call checks only the pieces it uses.
bool vmmUnitStillMapped(const VmmUnit& u, const void* ptr = nullptr, size_t bytes = SIZE_MAX);
// Whether `u` covers [ptr, ptr + bytes).
inline bool vmmUnitCovers(const VmmUnit& u, const void* ptr, size_t bytes) {
  const auto p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  // Offsets, not end addresses: a pointer past the unit's end must not wrap into "covered".
  if (p < u.base || p - u.base > u.bytes) return false;
  return bytes <= u.bytes - (p - u.base);
}
// Releases the retained handles (the unit must no longer be served: VmmHandleServer::withdraw first).
void releaseVmmUnit(VmmUnit& u);

// The process's handle server: the units it serves and the processes allowed to ask.
class VmmHandleServer {
 public:
  static VmmHandleServer& instance();
  // Serves `u` (pieces and handle type; the server exports each piece when asked). Starts the server on first use;
  // false (with `why`) when it cannot listen, and the unit must not be published.
  bool serve(const VmmUnit& u, int device, std::string* why);
  void withdraw(uint64_t unitId);
  // The job's other processes, counted per communicator: only they may ask (the kernel's pid of the connection).
  void allowPeers(const std::vector<int64_t>& pids);
  void disallowPeers(const std::vector<int64_t>& pids);
  static std::string socketName(int64_t pid);

 private:
  struct Served {
    int device = 0;
    CUmemAllocationHandleType handleType = CU_MEM_HANDLE_TYPE_NONE;
    size_t bytes = 0;
    std::vector<VmmPiece> pieces;  // the handles the owner's unit retains (it is withdrawn before it releases them)
  };
  VmmHandleServer() = default;
  void loop(int listenFd);
  void answer(int fd);
  // Pieces [first, first + kMaxFdsPerMessage) of unit `unitId` as one message of the reply (*batch) and their
  // descriptors, exported under mutex_ (a unit being withdrawn cannot release a handle meanwhile); *pieces: the
  // unit's piece count (set when first == 0, checked after). The header says whether the unit is still served.
  vmmwire::VmmReplyHeader exportBatch(uint64_t unitId, size_t first, size_t* pieces, std::string* batch,
                                      std::vector<peersock::OwnedFd>* fds);
  std::mutex mutex_;
  std::map<uint64_t, Served> units_;
  std::map<int64_t, int> allowed_;  // pid -> communicators of this process that have it as a peer
  int64_t listeningPid_ = 0;        // the process whose thread listens (a forked child must start its own)
};

// A peer's unit mapped into this process: a reserved range with every piece imported and mapped in order.
struct VmmImport {
  struct Piece {
    size_t offset = 0;
    size_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;  // imported
    bool mapped = false;
  };
  CUdeviceptr base = 0;  // reserved (0 until then)
  size_t bytes = 0;
  std::vector<Piece> pieces;
};
// Asks process `pid`'s handle server for unit `unitId` (of `bytes` bytes) and maps it for `device`. Throws
// Error(concclSystemError / concclUnhandledCudaError) naming what failed.
VmmImport importVmmUnit(int64_t pid, uint64_t unitId, size_t bytes, int device, std::chrono::milliseconds timeout);
// Unmaps and releases an import (waits for the device like any unmap: never on a caller's thread during a call).
void unmapVmmImport(const VmmImport& m);

// The check a communicator makes at init, when every process asked for the export (Config::exportVmm): each process
// exports one granule of VMM memory created with a POSIX descriptor handle type, maps every peer's, and the processes
// agree (two all-gathers over `allGather`, which every process must call) whether the export works both ways between
// all of them. False, with the first failure in `why`, turns the export off for the communicator on every process
// (calls on VMM memory are then staged): a failure found here cannot fail a call later. `pids[localRank]` is this
// process.
bool probeVmmExport(int localRank, const std::vector<int64_t>& pids, int device,
                    const std::function<std::vector<std::string>(const std::string&)>& allGather, std::string* why);

}  // namespace conccl::exec
