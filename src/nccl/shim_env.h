// The shim's environment switches, parsed by pure functions (the caller passes the lookup, so tests need no
// setenv):
//   CONCCL_NCCL_SHIM=0|1          0: forward every call to the real NCCL (default 1)
//   CONCCL_NCCL_COLLS=a,b,...     collectives that run on conccl on conccl communicators (default "all"):
//                                 all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather,
//                                 scatter, send_recv, or "all"
//   CONCCL_NCCL_REAL_LIB=path     the real NCCL to forward to (default: libnccl.so.2 on the library path,
//                                 never the shim itself)
//   CONCCL_NCCL_SCRATCH_MAX_BYTES=n  the most scratch memory one conccl communicator holds for PreMulSum inputs and
//                                 staged in-place AllToAll inputs (default 4 GiB; a positive integer, optionally
//                                 with K, M or G for KiB, MiB, GiB)
//   CONCCL_NCCL_HIERARCHICAL=0|1  1: a communicator whose ranks span hosts, the same number on each, runs its
//                                 collectives hierarchically (conccl inside each host, the real NCCL on the rails
//                                 between hosts; docs/hierarchical.md); 0: the whole communicator on the real NCCL
//                                 (default 1). Read by the process that made the unique id: it decides for all ranks.
//   CONCCL_NCCL_HIER_CHUNKS=k     hierarchical AllReduce, Broadcast, Reduce, AllGather and ReduceScatter cut into up to
//                                 k pieces (1..64) whose rail phases run on a second stream beside the node phases of
//                                 the others (default 1: not pipelined). The process that made the unique id (a
//                                 split child's first rank) decides for every rank of the communicator.
// A value that does not parse turns the shim off (everything forwarded: correct, if slower) and is reported in
// ShimEnv::error, which the shim logs once.
#ifndef CONCCL_NCCL_SHIM_ENV_H_
#define CONCCL_NCCL_SHIM_ENV_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace conccl::nccl {

// The collectives the shim routes, one bit each in ShimEnv::collMask.
enum class Coll : int {
  kAllReduce = 0,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv,
  kCount
};
inline constexpr uint32_t kAllColls = (1u << static_cast<int>(Coll::kCount)) - 1;

inline constexpr uint32_t collBit(Coll c) { return 1u << static_cast<int>(c); }

// "all_reduce", ... (the CONCCL_NCCL_COLLS spelling).
const char* collName(Coll c);

// 4 GiB: room for the largest PreMulSum input FSDP2 makes for one unit of common models (one transformer block of a
// 70B model is about 0.9 G elements: 1.7 GiB in bf16), and under 3% of an H200's memory. A call needing more fails.
inline constexpr uint64_t kDefaultScratchMaxBytes = 4ull << 30;

struct ShimEnv {
  bool enabled = true;
  uint32_t collMask = kAllColls;
  std::string realLib;  // empty: search
  uint64_t scratchMaxBytes = kDefaultScratchMaxBytes;
  bool hierarchical = true;
  int hierChunks = 1;
  std::string error;    // non-empty: a value did not parse; enabled is then false
};

using EnvLookup = std::function<const char*(const char*)>;

// Parses the switches above; `lookup` returns the variable's value or nullptr.
ShimEnv parseShimEnv(const EnvLookup& lookup);

// Parses a CONCCL_NCCL_COLLS list (comma-separated, spaces ignored, case-sensitive); nullopt with `error` set
// for an unknown name or an empty list.
std::optional<uint32_t> parseCollList(std::string_view list, std::string* error);

// Parses a byte count: a positive integer, optionally followed by K, M or G (powers of 1024); nullopt otherwise.
std::optional<uint64_t> parseByteCount(std::string_view text);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_SHIM_ENV_H_
