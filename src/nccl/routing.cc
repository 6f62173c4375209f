#include "nccl/routing.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

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

IdKind classifyId(const char* id, int bytes) {
  if (bytes < 8) return IdKind::kNccl;
  uint64_t v;
  std::memcpy(&v, id + bytes - 8, 8);
  if (v == kRendezvousIdTag) return IdKind::kRendezvous;
  if (v == kConcclIdTag) return IdKind::kConcclJob;
  return IdKind::kNccl;
}

uint64_t hashHostString(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

HostIdentity currentHostIdentity(const EnvLookup& lookup) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return hostIdentity(lookup, host, boot);
}

HostIdentity hostIdentity(const EnvLookup& lookup, const std::string& hostname, const std::string& bootId) {
  if (const char* v = lookup("CONCCL_HOSTID"); v != nullptr && v[0] != '\0') {
    return {hashHostString(v), "CONCCL_HOSTID"};
  }
  if (const char* v = lookup("NCCL_HOSTID"); v != nullptr && v[0] != '\0') return {hashHostString(v), "NCCL_HOSTID"};
  return {hashHostString(hostname + bootId), "hostname+boot_id"};
}

int countHosts(const std::vector<uint64_t>& hosts) {
  return static_cast<int>(std::set<uint64_t>(hosts.begin(), hosts.end()).size());
}

Decision decideLocality(const std::vector<uint64_t>& hosts, bool realNcclAvailable) {
  if (hosts.empty()) return {Path::kFail, "no ranks"};
  const int n = static_cast<int>(hosts.size());
  const int h = countHosts(hosts);
  if (h == 1) return {Path::kConccl, "all " + std::to_string(n) + " ranks on one host"};
  std::string spread = "ranks on " + std::to_string(h) + " hosts";
  if (!realNcclAvailable) {
    return {Path::kFail, spread + " (conccl reaches one host only) and no real NCCL was found to forward to"};
  }
  return {Path::kNccl, spread};
}

Decision decideNcclSplitChild(const std::vector<uint64_t>& childHosts, bool realNcclAvailable) {
  Decision d = decideLocality(childHosts, realNcclAvailable);
  d.reason = "split of an NCCL communicator, child " + d.reason;
  return d;
}

bool parseIpv4(const std::string& text, uint32_t* out) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(text.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4) return false;
  if (a > 255 || b > 255 || c > 255 || d > 255) return false;
  *out = (a << 24) | (b << 16) | (c << 8) | d;
  return true;
}

std::string formatIpv4(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." + std::to_string((ip >> 8) & 255) +
         "." + std::to_string(ip & 255);
}

bool ifnameMatches(const std::string& name, const std::string& spec) {
  std::string list = spec;
  bool exact = false;
  if (!list.empty() && list[0] == '=') {
    exact = true;
    list.erase(0, 1);
  }
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    if (exact ? name == item : name.compare(0, item.size(), item) == 0) return true;
  }
  return false;
}

InterfaceChoice pickInterface(const std::vector<NetInterface>& ifs, const EnvLookup& lookup) {
  InterfaceChoice c;
  const char* specVar = "CONCCL_SOCKET_IFNAME";
  const char* spec = lookup(specVar);
  if (spec == nullptr || spec[0] == '\0') {
    specVar = "NCCL_SOCKET_IFNAME";
    spec = lookup(specVar);
  }
  const int n = static_cast<int>(ifs.size());
  if (spec != nullptr && spec[0] != '\0') {
    std::string s = spec;
    const bool exclude = s[0] == '^';
    if (exclude) s.erase(0, 1);
    for (int i = 0; i < n; ++i) {
      if (ifs[i].up && ifnameMatches(ifs[i].name, s) != exclude) {
        c.index = i;
        c.why = std::string(specVar) + "=" + spec;
        return c;
      }
    }
    c.error = std::string("no IPv4 interface that is up matches ") + specVar + "=" + spec;
    return c;
  }
  if (const char* master = lookup("MASTER_ADDR"); master != nullptr) {
    uint32_t addr = 0;
    if (parseIpv4(master, &addr)) {
      for (int i = 0; i < n; ++i) {
        if (ifs[i].up && ifs[i].netmask != 0 && (ifs[i].ipv4 & ifs[i].netmask) == (addr & ifs[i].netmask)) {
          c.index = i;
          c.why = std::string("the subnet of MASTER_ADDR=") + master;
          return c;
        }
      }
    }
  }
  auto first = [&](auto pred, const char* why) {
    for (int i = 0; i < n; ++i) {
      if (ifs[i].up && pred(ifs[i])) {
        c.index = i;
        c.why = why;
        return true;
      }
    }
    return false;
  };
  auto isDocker = [](const NetInterface& f) { return f.name.compare(0, 6, "docker") == 0; };
  if (first([&](const NetInterface& f) { return !f.loopback && !isDocker(f); }, "first non-loopback interface")) {
    return c;
  }
  if (first([&](const NetInterface& f) { return !f.loopback; }, "first docker interface")) return c;
  if (first([](const NetInterface& f) { return f.loopback; }, "loopback (no other interface is up)")) return c;
  c.error = "no IPv4 interface is up";
  return c;
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
