// The C API across hosts (cross_node.h): the id's rendezvous, the root's answer, each rank's init, and the calls of
// a communicator across hosts (in phases through nccl/hier_exec.h, or on its flat real-NCCL communicator).
#include "api/cross_node.h"

#include <unistd.h>

#include <atomic>
#include <exception>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "base/error.h"
#include "base/logging.h"
#include "base/types.h"
#include "core/bootstrap.h"
#include "core/config.h"
#include "core/group.h"
#include "exec/executor.h"
#include "nccl/hier_answer.h"
#include "nccl/hier_exec.h"
#include "nccl/liveness_link.h"
#include "nccl/nccl_abi.h"
#include "nccl/real_nccl.h"
#include "nccl/rendezvous.h"
#include "nccl/routing.h"
#include "nccl/type_map.h"
#include "sched/schedule.h"

namespace conccl::api {

// The state of a communicator across hosts: its flat real-NCCL communicator (every call the phases cannot express)
// and, on the hierarchical path, its rail and node communicators.
struct CrossNodeComm {
  int nranks = 0;
  const nccl::RailApi* api = nullptr;
  nccl::RailComm flat = nullptr;
  nccl::HierState* hier = nullptr;  // null: flat only ('N')
  std::string reason;
};

namespace {

using nccl::HierArgs;
using nccl::HierOutcome;
using nccl::RailApi;
using nccl::RailId;
using sched::CollKind;
using sched::HierCollective;

const char* envLookup(const char* name) { return std::getenv(name); }

// The answer's first byte (cross_node.h).
constexpr char kAnswerLocal = 'L';
constexpr char kAnswerFlat = 'N';

// Where the rendezvous travels inside concclUniqueId: after the local part (UniqueIdData, whose `flags` say it is
// there), the first kRendezvousBytes of the 128 encodeRendezvousId writes (the rest of those is zero but for the
// mark, which this id does not carry: the last 8 bytes stay zero for the NCCL drop-in's own mark).
constexpr uint32_t kFlagRendezvous = 1;
constexpr size_t kRendezvousAt = sizeof(UniqueIdData);
constexpr size_t kRendezvousBytes = 48;
static_assert(kRendezvousAt + kRendezvousBytes <= CONCCL_UNIQUE_ID_BYTES - 8);

std::optional<nccl::RendezvousId> rendezvousOf(const concclUniqueId& id) {
  UniqueIdData data;
  std::memcpy(&data, id.internal, sizeof(data));
  if (data.magic != UniqueIdData::kMagic || (data.flags & kFlagRendezvous) == 0) return std::nullopt;
  char full[nccl::kRendezvousIdBytes] = {};
  std::memcpy(full, id.internal + kRendezvousAt, kRendezvousBytes);
  std::memcpy(full + nccl::kRendezvousIdBytes - 8, &nccl::kRendezvousIdTag, 8);
  return nccl::decodeRendezvousId(full);
}

// The real NCCL of this process, loaded on first use (CONCCL_NCCL_REAL_LIB, else libnccl.so.2). nullptr with *error
// when none loads or it lacks an entry point the path needs.
std::atomic<bool> gRailLoaded{false};
const RailApi* realNccl(std::string* error) {
  struct Loaded {
    std::unique_ptr<nccl::RealNccl> lib;
    std::unique_ptr<RailApi> api;
    std::string error;
  };
  static Loaded* loaded = [] {
    auto* l = new Loaded;  // never freed: communicators may be destroyed during static destruction
    const char* configured = std::getenv("CONCCL_NCCL_REAL_LIB");
    l->lib = std::make_unique<nccl::RealNccl>(nccl::realNcclCandidates(configured ? configured : "", ""), nullptr);
    if (!l->lib->available()) {
      l->error = "no real NCCL could be loaded (" + l->lib->error() + "; set CONCCL_NCCL_REAL_LIB)";
      return l;
    }
    l->api = std::make_unique<RailApi>(nccl::loadRailApi([l](const char* n) { return l->lib->symbol(n); }));
    const RailApi& a = *l->api;
    if (a.getUniqueId == nullptr || a.commInitRank == nullptr || a.commDestroy == nullptr || a.commAbort == nullptr ||
        a.groupStart == nullptr || a.groupEnd == nullptr || a.send == nullptr || a.recv == nullptr) {
      l->error = l->lib->path() + " lacks " + a.missing;
      l->api.reset();
      return l;
    }
    gRailLoaded.store(true);
    CONCCL_INFO(-1, -1, "communicators across hosts: real NCCL " + l->lib->path());
    return l;
  }();
  if (loaded->api == nullptr) *error = loaded->error;
  return loaded->api.get();
}

// Runs on the root's thread once every rank has arrived (cross_node.h's three answers).
bool rootAnswer(const std::vector<uint64_t>& hosts, std::string* answer, std::string* error) {
  const int nhosts = nccl::countHosts(hosts);
  if (nhosts == 1) {
    *answer = std::string(1, kAnswerLocal) + "all " + std::to_string(hosts.size()) + " ranks on one host";
    return true;
  }
  std::string why;
  const RailApi* api = realNccl(&why);
  if (api == nullptr) {
    *error = "the ranks are on " + std::to_string(nhosts) + " hosts, which needs a real NCCL: " + why;
    return false;
  }
  const nccl::ShimEnv env = nccl::parseShimEnv(envLookup);
  if (!env.error.empty()) {
    *error = env.error;
    return false;
  }
  if (!env.hierarchical) {
    why = "hierarchical path off (CONCCL_NCCL_HIERARCHICAL=0)";
  } else if (nccl::makeHierarchicalAnswer(hosts, env.hierChunks, *api, answer, &why, error)) {
    return true;
  } else if (!error->empty()) {
    return false;
  }
  RailId id{};
  if (const int r = api->getUniqueId(&id); r != nccl::kSuccess) {
    *error = std::string("the real ncclGetUniqueId failed: ") + nccl::ncclResultString(r);
    return false;
  }
  *answer = std::string(1, kAnswerFlat) + std::string(id.internal, sizeof(id.internal)) + "flat NCCL across " +
            std::to_string(nhosts) + " hosts (" + why + ")";
  return true;
}

concclResult_t rendezvousCode(nccl::RendezvousStatus s) {
  switch (s) {
    case nccl::RendezvousStatus::kOk:
      return concclSuccess;
    case nccl::RendezvousStatus::kTimeout:
      return concclTimeout;
    case nccl::RendezvousStatus::kBadUsage:
    case nccl::RendezvousStatus::kAnswerFailed:
      return concclInvalidUsage;
    case nccl::RendezvousStatus::kRefused:
    case nccl::RendezvousStatus::kSocketError:
      break;
  }
  return concclSystemError;
}

const nccl::HostIdentity& thisHost() {
  static const nccl::HostIdentity identity = nccl::currentHostIdentity(envLookup);
  return identity;
}

std::string railText(const RailApi* api, int r) {
  const char* last = api->getLastError != nullptr ? api->getLastError(nullptr) : nullptr;
  return std::string(nccl::ncclResultString(r)) + (last != nullptr && *last != '\0' ? std::string(": ") + last : "");
}

// The caller's current device, or -1 where there is none (a flat communicator needs no device of conccl's).
int currentDeviceOrNone() {
  try {
    return exec::cudaCurrentDevice();
  } catch (const Error&) {
    return -1;
  }
}

nccl::HierPolicy crossNodePolicy(int rank) {
  nccl::HierPolicy p;
  p.scratchMaxBytes = nccl::parseShimEnv(envLookup).scratchMaxBytes;
  // Every collective the C API accepts runs on conccl exactly (its arguments were checked): no refusal.
  p.info = [rank](const std::string& m) { CONCCL_INFO(rank, -1, m); };
  p.warn = [rank](const std::string& m) { CONCCL_WARN(rank, -1, m); };
  return p;
}

// The collective's hierarchical form, if it has one.
std::optional<HierCollective> hierCollectiveOf(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce:
      return HierCollective::kAllReduce;
    case CollKind::kReduceScatter:
      return HierCollective::kReduceScatter;
    case CollKind::kAllGather:
      return HierCollective::kAllGather;
    case CollKind::kBroadcast:
      return HierCollective::kBroadcast;
    case CollKind::kReduce:
      return HierCollective::kReduce;
    case CollKind::kGather:
      return HierCollective::kGather;
    case CollKind::kScatter:
      return HierCollective::kScatter;
    case CollKind::kAllToAll:
      return HierCollective::kAllToAll;
    default:
      return std::nullopt;  // AllToAllv and send / receive: by pairs (sendOrRecv)
  }
}

void throwRail(const CrossNodeComm* x, int r, const std::string& what) {
  CONCCL_THROW(nccl::concclFromNcclResult(r), what + " (the flat NCCL communicator): " + railText(x->api, r));
}

// A collective on the flat communicator, as NCCL's own.
void flatCall(const CrossNodeComm* x, const RankArgs& a, int type) {
  const RailApi& n = *x->api;
  const nccl::RailComm c = x->flat;
  const int op = static_cast<int>(a.op);
  auto need = [&](auto fn, const char* name) {
    if (fn == nullptr) CONCCL_THROW(concclNotSupported, std::string("the real NCCL lacks ") + name);
    return fn;
  };
  int r = nccl::kSuccess;
  switch (a.kind) {
    case CollKind::kAllReduce:
      r = need(n.allReduce, "ncclAllReduce")(a.sendbuff, a.recvbuff, a.count, type, op, c, a.stream);
      break;
    case CollKind::kReduceScatter:
      r = need(n.reduceScatter, "ncclReduceScatter")(a.sendbuff, a.recvbuff, a.count, type, op, c, a.stream);
      break;
    case CollKind::kAllGather:
      r = need(n.allGather, "ncclAllGather")(a.sendbuff, a.recvbuff, a.count, type, c, a.stream);
      break;
    case CollKind::kBroadcast:
      r = need(n.broadcast, "ncclBroadcast")(a.sendbuff, a.recvbuff, a.count, type, a.root, c, a.stream);
      break;
    case CollKind::kReduce:
      r = need(n.reduce, "ncclReduce")(a.sendbuff, a.recvbuff, a.count, type, op, a.root, c, a.stream);
      break;
    case CollKind::kGather:
      r = need(n.gather, "ncclGather")(a.sendbuff, a.recvbuff, a.count, type, a.root, c, a.stream);
      break;
    case CollKind::kScatter:
      r = need(n.scatter, "ncclScatter")(a.sendbuff, a.recvbuff, a.count, type, a.root, c, a.stream);
      break;
    case CollKind::kAllToAll:
      r = need(n.allToAll, "ncclAlltoAll")(a.sendbuff, a.recvbuff, a.count, type, c, a.stream);
      break;
    default:
      CONCCL_THROW(concclNotSupported, std::string(a.apiName) + " on a communicator across hosts");
  }
  if (r != nccl::kSuccess) throwRail(x, r, a.apiName);
}

thread_local int tNcclGroups = 0;  // real ncclGroupStart calls this thread made and has not yet ended

// One Send or Recv of a communicator across hosts: to a peer of this host on conccl (hierRun, hierarchical
// communicators), to the others on the flat communicator. Returns the flat NCCL call's result; conccl's failure throws.
int sendOrRecv(CrossNodeComm* x, bool send, void* buff, size_t count, int type, int peer, cudaStream_t stream,
               const char* api) {
  HierArgs h;
  h.coll = HierCollective::kSendRecv;
  if (send) {
    h.sendbuff = buff;
  } else {
    h.recvbuff = buff;
  }
  h.count = count;
  h.type = type;
  h.stream = stream;
  h.call = api;
  h.inGroup = inGroup();
  h.peer = peer;
  h.send = send;
  const HierOutcome o = nccl::hierRun(x->hier, h);  // null hier: not run
  if (o.ran) {
    if (o.error.failed()) CONCCL_THROW(o.error.code, o.error.message);
    return nccl::kSuccess;
  }
  return send ? x->api->send(buff, count, type, peer, x->flat, stream)
              : x->api->recv(buff, count, type, peer, x->flat, stream);
}

// AllToAllv: one group of sends and receives (sendOrRecv), both libraries' groups opened and closed here, conccl's
// ended first as concclGroupEnd does; zero counts are skipped.
void allToAllvByPairs(CrossNodeComm* x, const RankArgs& a, int type) {
  const size_t es = typeSize(a.dtype);
  groupStart();
  int r = x->api->groupStart();
  std::exception_ptr failure;
  try {
    for (int p = 0; r == nccl::kSuccess && p < x->nranks; ++p) {
      const auto i = static_cast<size_t>(p);
      if (a.sendCounts[i] > 0) {
        void* buff = const_cast<char*>(static_cast<const char*>(a.sendbuff)) + a.sendDispls[i] * es;
        r = sendOrRecv(x, true, buff, a.sendCounts[i], type, p, a.stream, a.apiName);
      }
      if (r == nccl::kSuccess && a.recvCounts[i] > 0) {
        void* buff = static_cast<char*>(a.recvbuff) + a.recvDispls[i] * es;
        r = sendOrRecv(x, false, buff, a.recvCounts[i], type, p, a.stream, a.apiName);
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  // Both groups close whatever happened (they were opened here); the first failure is the call's.
  try {
    groupEnd();
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  const int end = x->api->groupEnd();
  if (failure) std::rethrow_exception(failure);
  if (r == nccl::kSuccess) r = end;
  if (r != nccl::kSuccess) throwRail(x, r, a.apiName);
}

}  // namespace

bool wantsRendezvous(const nccl::EnvLookup& lookup, std::string* why) {
  const char* v = lookup("CONCCL_RENDEZVOUS");
  const std::string mode = v == nullptr ? "auto" : v;
  if (mode == "0") {
    *why = "CONCCL_RENDEZVOUS=0";
    return false;
  }
  if (mode == "1") {
    *why = "CONCCL_RENDEZVOUS=1";
    return true;
  }
  if (mode != "auto") {
    CONCCL_THROW(concclInvalidArgument, "CONCCL_RENDEZVOUS=" + mode + " is not 0, 1 or auto");
  }
  for (const char* name : {"CONCCL_HOSTID", "NCCL_HOSTID"}) {
    if (const char* h = lookup(name); h != nullptr && *h != '\0') {
      *why = std::string(name) + " is set";
      return true;
    }
  }
  std::string scope;
  if (nccl::launchScopeFromEnv(lookup, &scope) == nccl::LaunchScope::kMultiNode) {
    *why = "the job spans nodes (" + scope + ")";
    return true;
  }
  *why = "the job runs on one node";
  return false;
}

void makeJobUniqueId(concclUniqueId* id) {
  UniqueIdData data = makeUniqueId();
  std::string why;
  if (!wantsRendezvous(envLookup, &why)) {
    storeUniqueId(data, id);
    return;
  }
  const std::vector<nccl::NetInterface> ifs = nccl::listInterfaces();
  const nccl::InterfaceChoice c = nccl::pickInterface(ifs, envLookup);
  if (c.index < 0) {
    CONCCL_THROW(concclSystemError, "a rendezvous for ranks on several hosts (" + why + "): no interface: " + c.error);
  }
  const int timeoutMs = resolveConfig(nullptr, false).timeoutMs;
  std::string error;
  auto root = nccl::RendezvousRoot::start(ifs[static_cast<size_t>(c.index)].ipv4, std::chrono::milliseconds(timeoutMs),
                                          rootAnswer, &error, nccl::isHierarchicalAnswer);
  if (root == nullptr) CONCCL_THROW(concclSystemError, "a rendezvous for ranks on several hosts: " + error);
  data.flags |= kFlagRendezvous;
  storeUniqueId(data, id);
  char full[nccl::kRendezvousIdBytes];
  nccl::encodeRendezvousId(root->id(), full);
  std::memcpy(id->internal + kRendezvousAt, full, kRendezvousBytes);
  CONCCL_INFO(-1, -1, "concclGetUniqueId: rendezvous at " + nccl::rendezvousAddress(root->id()) + " on " +
                          ifs[static_cast<size_t>(c.index)].name + " (" + why + ")");
  nccl::keepRendezvousRoot(std::move(root), [](const std::string& m) { CONCCL_INFO(-1, -1, m); });
}

bool idHasRendezvous(const concclUniqueId& id) { return rendezvousOf(id).has_value(); }

concclComm* initThroughRendezvous(int nranks, const concclUniqueId& id, int rank, const concclConfig_t* config,
                                  std::optional<uint64_t> host) {
  CONCCL_REQUIRE(nranks >= 1, "nranks = " + std::to_string(nranks) + " is below 1");
  CONCCL_REQUIRE(rank >= 0 && rank < nranks,
                 "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
  const std::optional<nccl::RendezvousId> rid = rendezvousOf(id);
  CONCCL_REQUIRE(rid.has_value(), "the unique id's rendezvous is damaged");
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(nranks);
  nccl::RendezvousResult met;
  std::string error;
  const nccl::RendezvousStatus s = nccl::rendezvous(*rid, rank, nranks, host ? *host : thisHost().id, &met, &error);
  if (s != nccl::RendezvousStatus::kOk) {
    CONCCL_THROW(rendezvousCode(s), me + ": rendezvous " + nccl::rendezvousAddress(*rid) + ": " + error);
  }
  // The connection to the root: a liveness link for a watched answer, else closed now.
  std::shared_ptr<nccl::LivenessLink> link;
  if (met.link >= 0) {
    if (nccl::isHierarchicalAnswer(met.answer)) {
      link = std::make_shared<nccl::LivenessLink>(met.link);
    } else {
      ::close(met.link);
    }
  }
  const char kind = met.answer.empty() ? '\0' : met.answer[0];
  if (kind == kAnswerLocal) {
    CONCCL_INFO(rank, -1, me + ": " + met.answer.substr(1) + ": conccl");
    UniqueIdData data = parseUniqueId(id);
    data.flags = 0;
    concclUniqueId local;
    storeUniqueId(data, &local);
    return createProcessComm(nranks, local, rank, config);
  }
  CONCCL_REQUIRE(kind == kAnswerFlat || kind == nccl::kAnswerHierarchical,
                 me + ": the rendezvous root's answer is malformed");
  const RailApi* api = realNccl(&error);
  if (api == nullptr) CONCCL_THROW(concclSystemError, me + ": ranks on several hosts: " + error);
  auto x = std::make_unique<CrossNodeComm>();
  x->nranks = nranks;
  x->api = api;
  auto byeOnFailure = [&] {
    if (link != nullptr) link->bye();  // this rank's init failed: it leaves the watch; it did not die
  };
  nccl::HierAnswer h;
  RailId flatId{};
  if (kind == nccl::kAnswerHierarchical) {
    h = nccl::parseHierarchicalAnswer(met.answer, met.hosts, nranks, rank);
    if (!h.error.empty()) {
      byeOnFailure();
      CONCCL_THROW(concclInternalError, me + ": " + h.error);
    }
    flatId = h.flatId;
    x->reason = h.reason;
  } else {
    CONCCL_REQUIRE(met.answer.size() >= 1 + sizeof(flatId.internal), me + ": the rendezvous answer is cut short");
    std::memcpy(flatId.internal, met.answer.data() + 1, sizeof(flatId.internal));
    x->reason = met.answer.substr(1 + sizeof(flatId.internal));
  }
  // 1. The flat communicator (every rank), 2. the rail and 3. the node (hierarchical only): the same order on every
  // rank, each init waiting only for the ranks that make the same one.
  if (const int r = api->commInitRank(&x->flat, nranks, flatId, rank); r != nccl::kSuccess) {
    byeOnFailure();
    CONCCL_THROW(nccl::concclFromNcclResult(r), me + ": the flat NCCL communicator: " + railText(api, r));
  }
  if (kind == nccl::kAnswerHierarchical) {
    const nccl::HierLayout& l = h.layout;
    const int node = l.node[static_cast<size_t>(rank)], local = l.local[static_cast<size_t>(rank)];
    const RailId railId = h.railIds[static_cast<size_t>(local)];
    auto makeRail = [&](nccl::RailComm* rail) { return api->commInitRank(rail, l.nodes, railId, node); };
    x->hier = nccl::makeHierState(l, rank, h.chunks, crossNodePolicy(rank), api, makeRail,
                                  h.nodeIds[static_cast<size_t>(node)], config, &error);
    if (x->hier == nullptr) {
      api->commDestroy(x->flat);
      byeOnFailure();
      CONCCL_THROW(concclSystemError, me + ": " + error);
    }
    nccl::watchLiveness(x->hier, std::move(link), /*owner=*/true, {});
  }
  auto comm = std::make_unique<concclComm>();
  comm->rank = rank;
  comm->device = x->hier != nullptr ? x->hier->device : currentDeviceOrNone();
  comm->multiProcess = true;
  CONCCL_INFO(rank, comm->device,
              me + ": " + x->reason + ", rendezvous " + nccl::rendezvousAddress(*rid) +
                  (x->hier != nullptr ? "; node " + std::to_string(x->hier->node) + " local " +
                                            std::to_string(x->hier->local) +
                                            "; SMs per call: conccl's reduce CTAs in the intra phases (copy engines "
                                            "otherwise), NCCL's channels' CTAs on the rail"
                                      : std::string()));
  comm->crossNode = x.release();
  registerComm(comm.get());
  return comm.release();
}

int crossNodeRanks(const concclComm* comm) { return comm->crossNode->nranks; }

void crossNodeCall(concclComm* comm, const RankArgs& a) {
  CrossNodeComm* x = comm->crossNode;
  if (a.kind == CollKind::kSendRecv) {
    // Matched by bytes, as conccl's own send / receive.
    for (size_t i = 0; i < a.p2p.size(); ++i) {
      const sched::P2POp& p = a.p2p[i];
      const int r = sendOrRecv(x, p.isSend, a.p2pBuffers[i], p.count, nccl::kUint8, p.peer, a.stream, a.apiName);
      if (r != nccl::kSuccess) throwRail(x, r, a.apiName);
    }
    return;
  }
  const std::optional<int> nt = nccl::toNcclType(a.dtype);
  if (!nt) {
    CONCCL_THROW(concclNotSupported,
                 std::string("datatype ") + typeName(a.dtype) + " has no NCCL counterpart (communicator across hosts)");
  }
  const int type = *nt;
  if (a.kind == CollKind::kAllToAllv) return allToAllvByPairs(x, a, type);
  if (x->hier != nullptr) {
    if (const std::optional<HierCollective> coll = hierCollectiveOf(a.kind)) {
      HierArgs h;
      h.coll = *coll;
      h.sendbuff = a.sendbuff;
      h.recvbuff = a.recvbuff;
      h.count = a.count;
      h.type = type;
      h.op = sched::isReduction(a.kind) ? static_cast<int>(a.op) : -1;
      h.root = a.root;
      h.stream = a.stream;
      h.call = a.apiName;
      h.inGroup = inGroup();
      const HierOutcome o = nccl::hierRun(x->hier, h);
      if (o.ran) {
        if (o.error.failed()) CONCCL_THROW(o.error.code, o.error.message);
        return;
      }
    }
  }
  flatCall(x, a, type);
}

concclResult_t crossNodeAsyncError(concclComm* comm) {
  CrossNodeComm* x = comm->crossNode;
  int e = nccl::kSuccess;
  auto done = [](int code) { return code == nccl::kSuccess || code == nccl::kInProgress; };
  if (x->hier != nullptr) {
    const nccl::HierError q = nccl::railAsyncError(x->hier, &e);
    if (q.failed()) CONCCL_THROW(q.code, q.message);
    if (!done(e)) return nccl::concclFromNcclResult(e);
  }
  if (x->api->commGetAsyncError != nullptr) {
    const int r = x->api->commGetAsyncError(x->flat, &e);
    if (r != nccl::kSuccess) throwRail(x, r, "concclCommGetAsyncError");
    if (!done(e)) return nccl::concclFromNcclResult(e);
  }
  if (x->hier != nullptr) {
    const nccl::HierError q = nccl::intraAsyncError(x->hier, &e);
    if (q.failed()) CONCCL_THROW(q.code, q.message);
    if (!done(e)) return nccl::concclFromNcclResult(e);
  }
  return concclSuccess;
}

void crossNodeConfig(concclComm* comm, concclConfig_t* config) {
  CrossNodeComm* x = comm->crossNode;
  if (x->hier != nullptr) {
    const concclResult_t r = concclCommGetConfig(x->hier->intra, config);
    if (r != concclSuccess) CONCCL_THROW(r, concclGetLastError(x->hier->intra));
    return;
  }
  exportConfig(resolveConfig(nullptr, true), config);  // flat only: no conccl communicator; the defaults
}

void crossNodeRegister(concclComm* comm, void* buff, size_t size, void** handle) {
  CrossNodeComm* x = comm->crossNode;
  if (x->hier == nullptr) {
    *handle = new char;  // flat only: nothing of conccl's touches the buffer; a token for Deregister
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    comm->registrations[*handle] = buff;
    return;
  }
  const concclResult_t r = concclCommRegister(x->hier->intra, buff, size, handle);
  if (r != concclSuccess) CONCCL_THROW(r, concclGetLastError(x->hier->intra));
}

void crossNodeDeregister(concclComm* comm, void* handle) {
  CrossNodeComm* x = comm->crossNode;
  if (x->hier == nullptr) {
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    auto it = comm->registrations.find(handle);
    CONCCL_REQUIRE(it != comm->registrations.end(),
                   "handle was not returned by concclCommRegister on this communicator, or was already deregistered");
    comm->registrations.erase(it);
    delete static_cast<char*>(handle);
    return;
  }
  const concclResult_t r = concclCommDeregister(x->hier->intra, handle);
  if (r != concclSuccess) CONCCL_THROW(r, concclGetLastError(x->hier->intra));
}

void releaseCrossNode(concclComm* comm, bool graceful) {
  std::unique_ptr<CrossNodeComm> x(comm->crossNode);
  comm->crossNode = nullptr;
  // The hierarchical state first: an abort ends the rail's kernels before conccl's abort waits for this rank's work.
  nccl::HierError first;
  if (x->hier != nullptr) first = nccl::destroyHierState(x->hier, !graceful);
  if (x->flat != nullptr) {
    const int r = graceful ? x->api->commDestroy(x->flat) : x->api->commAbort(x->flat);
    if (r != nccl::kSuccess && !first.failed()) {
      first = nccl::HierError{r, nccl::concclFromNcclResult(r), "the flat NCCL communicator: " + railText(x->api, r)};
    }
  }
  if (first.failed()) CONCCL_THROW(first.code, first.message);
}

void requireOneHost(const concclComm* comm, const char* what) {
  if (comm != nullptr && comm->crossNode != nullptr) {
    CONCCL_THROW(concclNotSupported, std::string(what) + " is not supported on a communicator across hosts");
  }
}

void crossNodeGroupStart() {
  if (!gRailLoaded.load()) return;
  std::string error;
  const RailApi* api = realNccl(&error);
  if (const int r = api->groupStart(); r != nccl::kSuccess) {
    CONCCL_THROW(nccl::concclFromNcclResult(r), std::string("the real ncclGroupStart: ") + railText(api, r));
  }
  ++tNcclGroups;
}

void crossNodeGroupEnd() {
  if (tNcclGroups == 0) return;
  --tNcclGroups;
  std::string error;
  const RailApi* api = realNccl(&error);
  if (const int r = api->groupEnd(); r != nccl::kSuccess) {
    CONCCL_THROW(nccl::concclFromNcclResult(r), std::string("the real ncclGroupEnd: ") + railText(api, r));
  }
}

}  // namespace conccl::api
