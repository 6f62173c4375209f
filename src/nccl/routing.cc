#include "nccl/routing.h"

#include <cstdlib>
#include <cstring>

#include "nccl/nccl_abi.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

// Both variables set, both positive integers, and different: more than one node.
bool differs(const EnvLookup& lookup, const char* world, const char* local, std::string* why) {
  const char* w = lookup(world);
  const char* l = lookup(local);
  if (w == nullptr || l == nullptr) return false;
  long wn = std::strtol(w, nullptr, 10);
  long ln = std::strtol(l, nullptr, 10);
  if (wn > 0 && ln > 0 && wn != ln) {
    if (why) *why = std::string(world) + "=" + w + " != " + local + "=" + l;
    return true;
  }
  return false;
}

}  // namespace

const char* pathName(Path p) {
  switch (p) {
    case Path::kConccl:
      return "conccl";
    case Path::kNccl:
      return "NCCL";
    case Path::kFail:
      return "none";
  }
  return "invalid";
}

LaunchScope launchScopeFromEnv(const EnvLookup& lookup, std::string* why) {
  if (differs(lookup, "WORLD_SIZE", "LOCAL_WORLD_SIZE", why) ||
      differs(lookup, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", why)) {
    return LaunchScope::kMultiNode;
  }
  if (const char* n = lookup("SLURM_NNODES"); n != nullptr && std::strtol(n, nullptr, 10) > 1) {
    if (why) *why = std::string("SLURM_NNODES=") + n;
    return LaunchScope::kMultiNode;
  }
  return LaunchScope::kSingleNode;
}

Decision decideUniqueId(const ShimEnv& env, LaunchScope scope, bool realNcclAvailable) {
  if (!env.enabled) {
    if (!realNcclAvailable) return {Path::kFail, "the shim is off (CONCCL_NCCL_SHIM) and no real NCCL was found"};
    return {Path::kNccl, env.error.empty() ? "CONCCL_NCCL_SHIM=0" : env.error};
  }
  if (scope == LaunchScope::kMultiNode) {
    if (!realNcclAvailable) {
      return {Path::kFail, "the job spans nodes (conccl reaches one node only) and no real NCCL was found"};
    }
    return {Path::kNccl, "the job spans nodes"};
  }
  return {Path::kConccl, "all ranks on this node"};
}

bool tagConcclId(char* id, int bytes) {
  if (bytes < 8) return false;
  char* tail = id + bytes - 8;
  for (int i = 0; i < 8; ++i) {
    if (tail[i] != 0) return false;
  }
  std::memcpy(tail, &kConcclIdTag, 8);
  return true;
}

bool untagConcclId(char* id, int bytes) {
  if (bytes < 8) return false;
  char* tail = id + bytes - 8;
  uint64_t v;
  std::memcpy(&v, tail, 8);
  if (v != kConcclIdTag) return false;
  std::memset(tail, 0, 8);
  return true;
}

Decision decideInitRank(const ShimEnv& env, bool idIsConccl, bool realNcclAvailable) {
  if (idIsConccl) {
    // The id was made for conccl by a process with the shim on; every rank must follow it, whatever its own
    // switches say, or the ranks would wait for each other in different libraries.
    return {Path::kConccl, "unique id made for conccl (all ranks on one node)"};
  }
  if (!realNcclAvailable) return {Path::kFail, "an NCCL unique id, but no real NCCL was found to forward to"};
  return {Path::kNccl, env.enabled ? "unique id made by the real NCCL" : "CONCCL_NCCL_SHIM=0"};
}

Decision decideInitAll(const ShimEnv& env, bool realNcclAvailable) {
  if (env.enabled) return {Path::kConccl, "single process, all ranks on this node"};
  if (!realNcclAvailable) return {Path::kFail, "the shim is off (CONCCL_NCCL_SHIM) and no real NCCL was found"};
  return {Path::kNccl, env.error.empty() ? "CONCCL_NCCL_SHIM=0" : env.error};
}

Decision decideSplit(Path parent) {
  if (parent == Path::kNccl) return {Path::kNccl, "parent communicator is on NCCL"};
  if (parent == Path::kConccl) return {Path::kConccl, "parent communicator is on conccl"};
  return {Path::kFail, "parent communicator has no path"};
}

Decision routeCall(const ShimEnv& env, Path comm, Coll coll, int ncclType, int ncclOp) {
  if (comm == Path::kNccl) return {Path::kNccl, "communicator on NCCL"};
  if (comm != Path::kConccl) return {Path::kFail, "communicator has no path"};
  if ((env.collMask & collBit(coll)) == 0) {
    return {Path::kFail, std::string(collName(coll)) +
                             " is not in CONCCL_NCCL_COLLS and this conccl communicator has no NCCL twin to "
                             "forward it to"};
  }
  if (!toConcclType(ncclType)) {
    return {Path::kFail, "datatype " + std::to_string(ncclType) + " is not an NCCL 2.28 type"};
  }
  if (ncclOp >= 0 && !concclCanReduce(ncclType, ncclOp)) {
    if (!toConcclOp(ncclOp)) {
      return {Path::kFail, "reduction op " + std::to_string(ncclOp) +
                               (ncclOp >= kNumOps ? " was not made by ncclRedOpCreatePreMulSum on this communicator"
                                                  : " is not an NCCL op")};
    }
    return {Path::kFail, std::string("conccl does not reduce ") + ncclTypeName(ncclType)};
  }
  return {Path::kConccl, "conccl"};
}

}  // namespace conccl::nccl
