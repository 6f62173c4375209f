// Which path each communicator and each call takes: pure decisions, unit-tested on the CPU.
//
// A communicator is decided once, at init, and every rank must decide the same way (or the ranks would wait
// for each other in two different libraries). So the decision is made where one value is shared by all
// ranks: the unique id. ncclGetUniqueId (one process) picks the path and writes either a conccl id, marked
// with kConcclIdTag in its last 8 bytes, or the real NCCL's id; ncclCommInitRank on every rank reads the mark.
#ifndef CONCCL_NCCL_ROUTING_H_
#define CONCCL_NCCL_ROUTING_H_

#include <cstdint>
#include <string>

#include "nccl/shim_env.h"

namespace conccl::nccl {

enum class Path { kConccl, kNccl, kFail };

const char* pathName(Path p);

struct Decision {
  Path path;
  std::string reason;  // one phrase for the log line / the error message
};

// Whether the ranks of this job may span nodes, from the launchers' variables (torchrun: WORLD_SIZE vs
// LOCAL_WORLD_SIZE; Open MPI: OMPI_COMM_WORLD_SIZE vs OMPI_COMM_WORLD_LOCAL_SIZE; Slurm: SLURM_NNODES).
// kSingleNode when no launcher says otherwise (one process driving its GPUs, e.g. nccl-tests -g 2).
enum class LaunchScope { kSingleNode, kMultiNode };
LaunchScope launchScopeFromEnv(const EnvLookup& lookup, std::string* why);

// ncclGetUniqueId: which library makes the id (and so which path the communicators made from it take).
Decision decideUniqueId(const ShimEnv& env, LaunchScope scope, bool realNcclAvailable);

// The mark in the last 8 bytes of a conccl-path unique id. NCCL zero-fills the unused bytes of its own id,
// and conccl's id leaves them zero too (checked when the mark is written).
inline constexpr uint64_t kConcclIdTag = 0x43434c53484d3031ull;  // "CCLSHM01"
// Writes the mark; false when those bytes were not zero (the id cannot carry it).
bool tagConcclId(char* id, int bytes);
// Whether the mark is present; if so, clears it (the id then is conccl's own again).
bool untagConcclId(char* id, int bytes);

// ncclCommInitRank(Config): the path of the communicator made from an id.
Decision decideInitRank(const ShimEnv& env, bool idIsConccl, bool realNcclAvailable);
// ncclCommInitAll: single-process, all ranks on this node.
Decision decideInitAll(const ShimEnv& env, bool realNcclAvailable);
// ncclCommSplit: the child takes the parent's path (a conccl parent is split by the shim, shim_split.cc).
Decision decideSplit(Path parent);

// One call on a communicator of path `comm`. A conccl communicator has no NCCL twin in this version, so a
// call it cannot run exactly fails (kFail, with the reason) instead of being forwarded. Ops made by
// ncclRedOpCreatePreMulSum on a conccl communicator do not come here (shim_premul.cc checks them as a sum); an op
// >= ncclNumOps that reaches this is one the communicator never made.
// type/op: NCCL values; op < 0 for calls without a reduction.
Decision routeCall(const ShimEnv& env, Path comm, Coll coll, int ncclType, int ncclOp);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_ROUTING_H_
