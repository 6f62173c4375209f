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
#include <vector>

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

// ---- Locality per communicator (issue 25 item 1) ----
//
// With the shim on, ncclGetUniqueId makes a *rendezvous* id (rendezvous.h, marked kRendezvousIdTag): every rank's
// ncclCommInitRank meets the others there, says which host it is on, and learns the host of every rank. The
// communicator then runs on conccl when all its ranks share one host, on the real NCCL otherwise, whatever the job's
// size; decideLocality() is that rule. The rendezvous root (the process that made the id) decides once and sends
// the same answer to every rank, so the ranks cannot disagree.

// The mark of a rendezvous id, in its last 8 bytes (NCCL and conccl leave those zero).
inline constexpr uint64_t kRendezvousIdTag = 0x43434c5348523031ull;  // "CCLSHR01"

// What kind of id ncclCommInitRank was given: the real NCCL's, a conccl id marked for the whole job (kConcclIdTag,
// made only when no rendezvous could be started), or a rendezvous id.
enum class IdKind { kNccl, kConcclJob, kRendezvous };
// Reads the mark (without changing the id).
IdKind classifyId(const char* id, int bytes);

// The host a rank runs on, as a 64-bit identity: ranks with equal identities are taken to share a node (GPUs one
// copy engine reaches, one network namespace for conccl's abstract Unix sockets, CUDA IPC between them).
//   CONCCL_HOSTID (if set) wins over NCCL_HOSTID (if set), which wins over hostname + boot id: NCCL's own rule
//   (its getHostHash), so that tests can simulate nodes on one machine with a different NCCL_HOSTID per process,
//   and a conccl-only override exists that does not also change what the real NCCL believes.
struct HostIdentity {
  uint64_t id = 0;
  std::string source;  // "CONCCL_HOSTID", "NCCL_HOSTID" or "hostname+boot_id", for the log line
};
HostIdentity hostIdentity(const EnvLookup& lookup, const std::string& hostname, const std::string& bootId);
// This process's identity: hostIdentity() of gethostname() and /proc/sys/kernel/random/boot_id.
HostIdentity currentHostIdentity(const EnvLookup& lookup);
// 64-bit FNV-1a: stable across processes and builds (std::hash is not required to be).
uint64_t hashHostString(const std::string& s);

// Number of distinct hosts in a table of host identities.
int countHosts(const std::vector<uint64_t>& hosts);

// The rule: every rank on one host -> conccl; otherwise the real NCCL (kFail without one). An empty table fails.
Decision decideLocality(const std::vector<uint64_t>& hosts, bool realNcclAvailable);

// ncclCommSplit of a communicator on the real NCCL (shim_split.cc): the hosts of the child's ranks decide as at
// init; a child on one host runs on conccl even though its parent spans hosts.
Decision decideNcclSplitChild(const std::vector<uint64_t>& childHosts, bool realNcclAvailable);

// The interface the rendezvous root listens on. NCCL's rule (its findInterfaces), restricted to IPv4:
//   1. CONCCL_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME, when set: NCCL's syntax, a comma list of name prefixes,
//      "^" first to exclude them instead, "=" first for exact names; nothing matching is an error (NCCL fails too);
//   2. otherwise the interface whose subnet holds MASTER_ADDR when that is an IPv4 literal (torchrun's rendezvous
//      host: every rank reaches it);
//   3. otherwise the first interface that is up and neither loopback nor docker*, then docker*, then loopback.
struct NetInterface {
  std::string name;
  uint32_t ipv4 = 0;     // host byte order
  uint32_t netmask = 0;  // host byte order
  bool up = false;
  bool loopback = false;
};
struct InterfaceChoice {
  int index = -1;     // into the list; -1 with `error` set
  std::string why;    // for the log line
  std::string error;
};
InterfaceChoice pickInterface(const std::vector<NetInterface>& interfaces, const EnvLookup& lookup);
// NCCL_SOCKET_IFNAME matching of one interface name (without the leading '^', which pickInterface handles).
bool ifnameMatches(const std::string& name, const std::string& spec);
// "a.b.c.d" -> host-order address; false if `text` is not a dotted IPv4 literal.
bool parseIpv4(const std::string& text, uint32_t* out);
std::string formatIpv4(uint32_t ipv4);

// One call on a communicator of path `comm`. A conccl communicator has no NCCL twin in this version, so a
// call it cannot run exactly fails (kFail, with the reason) instead of being forwarded. Ops made by
// ncclRedOpCreatePreMulSum on a conccl communicator do not come here (shim_premul.cc checks them as a sum); an op
// >= ncclNumOps that reaches this is one the communicator never made.
// type/op: NCCL values; op < 0 for calls without a reduction.
Decision routeCall(const ShimEnv& env, Path comm, Coll coll, int ncclType, int ncclOp);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_ROUTING_H_
