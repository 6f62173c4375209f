// Call-level parts of the schedule IR: names, buffer sizes, the flag layout, validation of a
// CollectiveCall and the dispatch to one builder per collective.
#include "sched/schedule.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "base/error.h"
#include "base/types.h"
#include "sched/builder_util.h"

namespace conccl::sched {

using detail::typeSize;

const char* collKindName(CollKind kind) {
  switch (kind) {
    case CollKind::kAllGather:
      return "AllGather";
    case CollKind::kReduceScatter:
      return "ReduceScatter";
    case CollKind::kAllReduce:
      return "AllReduce";
    case CollKind::kBroadcast:
      return "Broadcast";
    case CollKind::kReduce:
      return "Reduce";
    case CollKind::kAllToAll:
      return "AllToAll";
    case CollKind::kAllToAllv:
      return "AllToAllv";
    case CollKind::kGather:
      return "Gather";
    case CollKind::kScatter:
      return "Scatter";
    case CollKind::kSendRecv:
      return "SendRecv";
  }
  return "Unknown";
}

namespace {

size_t mulOrThrow(size_t a, size_t b, const char* what) {
  size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) CONCCL_THROW(concclInvalidArgument, std::string(what) + " overflows size_t");
  return r;
}

size_t addOrThrow(size_t a, size_t b, const char* what) {
  size_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) CONCCL_THROW(concclInvalidArgument, std::string(what) + " overflows size_t");
  return r;
}

// End (in elements) of the furthest non-empty region of an AllToAllv count/displacement array.
size_t vEnd(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t end = 0;
  for (size_t p = 0; p < counts.size() && p < displs.size(); ++p) {
    if (counts[p] > 0) end = std::max(end, addOrThrow(displs[p], counts[p], "AllToAllv displacement + count"));
  }
  return end;
}

}  // namespace

std::vector<size_t> bufferBytes(const CollectiveCall& call, int rank) {
  const size_t es = typeSize(call.dtype);
  const size_t n = static_cast<size_t>(call.nranks);
  const size_t c = mulOrThrow(call.count, es, "count * element size");
  const bool isRoot = rank == call.root;
  switch (call.kind) {
    case CollKind::kAllGather:
      return {c, mulOrThrow(n, c, "nranks * count")};
    case CollKind::kReduceScatter:
      return {mulOrThrow(n, c, "nranks * count"), c};
    case CollKind::kAllReduce:
      return {c, c};
    case CollKind::kBroadcast:
      return {isRoot ? c : 0, c};
    case CollKind::kReduce:
      return {c, isRoot ? c : 0};
    case CollKind::kAllToAll:
      return {mulOrThrow(n, c, "nranks * count"), mulOrThrow(n, c, "nranks * count")};
    case CollKind::kAllToAllv: {
      const auto r = static_cast<size_t>(rank);
      if (r >= call.sendCounts.size() || r >= call.sendDispls.size() || r >= call.recvCounts.size() ||
          r >= call.recvDispls.size()) {
        return {0, 0};
      }
      return {mulOrThrow(vEnd(call.sendCounts[r], call.sendDispls[r]), es, "AllToAllv send extent"),
              mulOrThrow(vEnd(call.recvCounts[r], call.recvDispls[r]), es, "AllToAllv recv extent")};
    }
    case CollKind::kGather:
      return {c, isRoot ? mulOrThrow(n, c, "nranks * count") : 0};
    case CollKind::kScatter:
      return {isRoot ? mulOrThrow(n, c, "nranks * count") : 0, c};
    case CollKind::kSendRecv: {
      std::vector<size_t> sizes;
      if (rank < 0 || static_cast<size_t>(rank) >= call.p2p.size()) return sizes;
      const auto& ops = call.p2p[static_cast<size_t>(rank)];
      sizes.assign(ops.size(), 0);
      for (const P2POp& op : ops) {
        if (op.buffer >= 0 && static_cast<size_t>(op.buffer) < sizes.size()) {
          sizes[static_cast<size_t>(op.buffer)] = mulOrThrow(op.count, es, "count * element size");
        }
      }
      return sizes;
    }
  }
  return {};
}

int readySlot(int nranks, int fromPeer) {
  static_cast<void>(nranks);  // part of the signature so that the layout may change without touching callers
  return kReadySlotBase + fromPeer;
}
int doneSlot(int nranks, int fromPeer) { return nranks + fromPeer; }
int firstFreeSlot(int nranks) { return 2 * nranks; }

int inPlaceBuffer(CollKind kind) {
  // The larger of the two aliased buffers: recvbuff lies inside sendbuff for these two.
  return kind == CollKind::kReduceScatter || kind == CollKind::kScatter ? 0 : 1;
}
int maxSlots(int nranks, const BuildOptions& options) {
  // ready + done, then data and credit flags of the pipelined exchange (one per peer and pipeline slot),
  // then one join flag per lane, then data and credit flags of the staged exchange (detail::emitStaged).
  return firstFreeSlot(nranks) + 4 * nranks * std::max(1, options.pipelineDepth) + std::max(1, options.lanes);
}

bool isReduction(CollKind kind) {
  return kind == CollKind::kReduceScatter || kind == CollKind::kAllReduce || kind == CollKind::kReduce;
}

bool isRooted(CollKind kind) {
  return kind == CollKind::kBroadcast || kind == CollKind::kReduce || kind == CollKind::kGather ||
         kind == CollKind::kScatter;
}

namespace detail {

// One table of type sizes for the whole library (core/types.cc).
size_t typeSize(concclDataType_t dtype) { return ::conccl::typeSize(dtype); }

bool isFp8(concclDataType_t dtype) { return dtype == concclFloat8e4m3 || dtype == concclFloat8e5m2; }

const char* dtypeName(concclDataType_t dtype) { return ::conccl::typeName(dtype); }

const char* opName(concclRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < concclNumOps ? kNames[i] : "invalid";
}

bool inPlaceRank(const CollectiveCall& call, int rank) {
  if (call.kind == CollKind::kSendRecv) return false;
  if (rank < 0 || static_cast<size_t>(rank) >= call.inPlace.size() || !call.inPlace[static_cast<size_t>(rank)]) {
    return false;
  }
  return isRooted(call.kind) ? rank == call.root : true;
}

Location sendLoc(const CollectiveCall& call, int rank, size_t offset) {
  const size_t c = call.count * typeSize(call.dtype);
  if (!inPlaceRank(call, rank)) return {rank, 0, offset};
  switch (call.kind) {
    case CollKind::kAllGather:
    case CollKind::kGather:
      return {rank, 1, static_cast<size_t>(rank) * c + offset};
    case CollKind::kAllReduce:
    case CollKind::kBroadcast:
    case CollKind::kReduce:
      return {rank, 1, offset};
    default:
      return {rank, 0, offset};  // ReduceScatter, Scatter: sendbuff is the larger buffer
  }
}

Location recvLoc(const CollectiveCall& call, int rank, size_t offset) {
  const size_t c = call.count * typeSize(call.dtype);
  if (inPlaceRank(call, rank) && (call.kind == CollKind::kReduceScatter || call.kind == CollKind::kScatter)) {
    return {rank, 0, static_cast<size_t>(rank) * c + offset};
  }
  return {rank, 1, offset};
}

namespace {

// AllToAllv: the four count / displacement tables are nranks x nranks, every receive matches its sender's send, the
// extents are representable, and no two peers' data land on the same bytes (a write race with an undefined result).
void validateAllToAllvTables(const CollectiveCall& call, const std::string& what, size_t es) {
  const auto n = static_cast<size_t>(call.nranks);
  auto sized = [&](const std::vector<std::vector<size_t>>& a, const char* name) {
    CONCCL_REQUIRE(a.size() == n, what + name + " must have nranks rows");
    for (size_t r = 0; r < n; ++r) {
      CONCCL_REQUIRE(a[r].size() == n, what + name + "[" + std::to_string(r) + "] must have nranks entries");
    }
  };
  sized(call.sendCounts, "sendCounts");
  sized(call.sendDispls, "sendDispls");
  sized(call.recvCounts, "recvCounts");
  sized(call.recvDispls, "recvDispls");
  for (size_t r = 0; r < n; ++r) {
    for (size_t p = 0; p < n; ++p) {
      CONCCL_REQUIRE(call.recvCounts[r][p] == call.sendCounts[p][r],
                     what + "rank " + std::to_string(r) + " expects " + std::to_string(call.recvCounts[r][p]) +
                         " elements from rank " + std::to_string(p) + ", which sends " +
                         std::to_string(call.sendCounts[p][r]));
    }
    mulOrThrow(vEnd(call.sendCounts[r], call.sendDispls[r]), es, "AllToAllv send extent");
    mulOrThrow(vEnd(call.recvCounts[r], call.recvDispls[r]), es, "AllToAllv recv extent");
    std::vector<std::pair<size_t, size_t>> regions;
    for (size_t p = 0; p < n; ++p) {
      if (call.recvCounts[r][p] > 0) regions.emplace_back(call.recvDispls[r][p], call.recvCounts[r][p]);
    }
    std::sort(regions.begin(), regions.end());
    for (size_t i = 1; i < regions.size(); ++i) {
      CONCCL_REQUIRE(regions[i - 1].first + regions[i - 1].second <= regions[i].first,
                     what + "rank " + std::to_string(r) + ": receive regions overlap");
    }
  }
}

// Send/Recv: every op names a valid peer and its own buffer, and between each ordered pair of ranks the sends and the
// receives match one to one, in order, with equal counts.
void validateP2POps(const CollectiveCall& call, const std::string& what, size_t es) {
  const auto n = static_cast<size_t>(call.nranks);
  CONCCL_REQUIRE(call.p2p.size() == n, what + "p2p must have nranks entries");
  // (src, dst) -> counts of the sends posted by src / receives posted by dst, in order.
  std::map<std::pair<int, int>, std::vector<size_t>> sends, recvs;
  for (size_t r = 0; r < n; ++r) {
    const auto& ops = call.p2p[r];
    std::vector<bool> used(ops.size(), false);
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      const std::string where = what + "rank " + std::to_string(r) + " op " + std::to_string(i) + ": ";
      CONCCL_REQUIRE(op.peer >= 0 && op.peer < call.nranks,
                     where + "peer " + std::to_string(op.peer) + " out of range");
      CONCCL_REQUIRE(
          op.buffer >= 0 && static_cast<size_t>(op.buffer) < ops.size() && !used[static_cast<size_t>(op.buffer)],
          where + "buffer index " + std::to_string(op.buffer) + " invalid or used twice");
      used[static_cast<size_t>(op.buffer)] = true;
      mulOrThrow(op.count, es, "count * element size");
      const int me = static_cast<int>(r);
      if (op.isSend) {
        sends[{me, op.peer}].push_back(op.count);
      } else {
        recvs[{op.peer, me}].push_back(op.count);
      }
    }
  }
  auto describe = [](std::pair<int, int> k) {
    return "from rank " + std::to_string(k.first) + " to rank " + std::to_string(k.second);
  };
  for (const auto& [key, counts] : sends) {
    auto it = recvs.find(key);
    const size_t nrecv = it == recvs.end() ? 0 : it->second.size();
    CONCCL_REQUIRE(nrecv == counts.size(), what + std::to_string(counts.size()) + " send(s) " + describe(key) +
                                               " but " + std::to_string(nrecv) + " matching receive(s)");
    for (size_t i = 0; i < counts.size(); ++i) {
      CONCCL_REQUIRE(counts[i] == it->second[i], what + "send #" + std::to_string(i) + " " + describe(key) + " has " +
                                                     std::to_string(counts[i]) + " elements but the receive has " +
                                                     std::to_string(it->second[i]));
    }
  }
  for (const auto& [key, counts] : recvs) {
    CONCCL_REQUIRE(sends.count(key) != 0, what + std::to_string(counts.size()) + " receive(s) " + describe(key) +
                                              " without a matching send");
  }
}

}  // namespace

void validateCall(const CollectiveCall& call) {
  const std::string what = std::string(collKindName(call.kind)) + ": ";
  CONCCL_REQUIRE(call.nranks >= 1, what + "nranks must be >= 1, got " + std::to_string(call.nranks));
  const auto n = static_cast<size_t>(call.nranks);
  CONCCL_REQUIRE(static_cast<int>(call.dtype) >= 0 && static_cast<int>(call.dtype) < concclNumTypes,
                 what + "invalid datatype " + std::to_string(static_cast<int>(call.dtype)));
  const size_t es = typeSize(call.dtype);
  if (isReduction(call.kind)) {
    CONCCL_REQUIRE(static_cast<int>(call.op) >= 0 && static_cast<int>(call.op) < concclNumOps,
                   what + "invalid reduction op " + std::to_string(static_cast<int>(call.op)));
    CONCCL_REQUIRE(!isFp8(call.dtype),
                   what + "reductions are not supported on " + dtypeName(call.dtype) + " (fp8 is data movement only)");
  }
  CONCCL_REQUIRE(!call.pushInputs || call.kind == CollKind::kReduceScatter,
                 what + "pushInputs is only defined for ReduceScatter");
  CONCCL_REQUIRE(!call.peerScratchOnly || call.kind != CollKind::kSendRecv,
                 what + "peerScratchOnly is not defined for SendRecv (its receives choose: P2POp::viaScratch)");
  if (call.callOwner != -1) {
    CONCCL_REQUIRE(call.callOwner >= 0 && call.callOwner < call.nranks,
                   what + "callOwner " + std::to_string(call.callOwner) + " out of range [0, " + std::to_string(n) +
                       ") (-1 for none)");
    CONCCL_REQUIRE(isReduction(call.kind), what + "callOwner is defined for reductions only (AllReduce, ReduceScatter, "
                                                  "Reduce), not " + collKindName(call.kind));
    CONCCL_REQUIRE(!call.peerScratchOnly, what + "callOwner and peerScratchOnly exclude each other");
    CONCCL_REQUIRE(call.pairOwner.empty(), what + "callOwner and pairOwner exclude each other");
    CONCCL_REQUIRE(!call.pushInputs, what + "callOwner and pushInputs exclude each other (the owner reads the inputs "
                                            "in place)");
  }
  if (!call.pairOwner.empty()) {
    CONCCL_REQUIRE(!isReduction(call.kind) && call.kind != CollKind::kSendRecv, what + "pairOwner is defined for data movement only, not " + collKindName(call.kind));
    CONCCL_REQUIRE(!call.peerScratchOnly, what + "pairOwner and peerScratchOnly exclude each other");
    CONCCL_REQUIRE(call.pairOwner.size() == n * n, what + "pairOwner must have nranks x nranks entries");
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        if (i == j) continue;
        const int o = call.pairOwner[i * n + j];
        CONCCL_REQUIRE((o == static_cast<int>(i) || o == static_cast<int>(j)) && o == call.pairOwner[j * n + i],
                       what + "pairOwner of ranks " + std::to_string(i) + " and " + std::to_string(j) +
                           " must be one of them, the same both ways (got " + std::to_string(o) + ")");
      }
    }
  }
  if (isRooted(call.kind)) {
    CONCCL_REQUIRE(call.root >= 0 && call.root < call.nranks,
                   what + "root " + std::to_string(call.root) + " out of range [0, " + std::to_string(n) + ")");
  }
  if (call.kind == CollKind::kSendRecv) {
    CONCCL_REQUIRE(call.inPlace.empty() || call.inPlace.size() == n,
                   what + "inPlace must be empty or have nranks entries");
    for (bool b : call.inPlace) CONCCL_REQUIRE(!b, what + "point-to-point operations cannot be in place");
  } else {
    CONCCL_REQUIRE(call.inPlace.size() == n, what + "inPlace has " + std::to_string(call.inPlace.size()) +
                                                 " entries, expected nranks = " + std::to_string(n));
  }
  // Every buffer size must be representable.
  mulOrThrow(mulOrThrow(call.count, es, "count * element size"), n, "nranks * count * element size");
  if (call.kind == CollKind::kAllToAll || call.kind == CollKind::kAllToAllv) {
    for (size_t r = 0; r < n; ++r) {
      CONCCL_REQUIRE(!call.inPlace[r], what + "rank " + std::to_string(r) + " called in place, which is not supported");
    }
  }

  if (call.kind == CollKind::kAllToAllv) validateAllToAllvTables(call, what, es);
  if (call.kind == CollKind::kSendRecv) validateP2POps(call, what, es);
}

std::vector<std::vector<P2PMatch>> matchP2P(const CollectiveCall& call) {
  const size_t n = call.p2p.size();
  std::vector<std::vector<P2PMatch>> match(n);
  // (src, dst) -> indices of the receives posted by dst from src, in order; consumed by the sends.
  std::map<std::pair<int, int>, std::vector<int>> recvs;
  std::map<std::pair<int, int>, size_t> used;
  for (size_t r = 0; r < n; ++r) {
    match[r].assign(call.p2p[r].size(), P2PMatch{});
    for (size_t i = 0; i < call.p2p[r].size(); ++i) {
      const P2POp& op = call.p2p[r][i];
      if (!op.isSend) recvs[{op.peer, static_cast<int>(r)}].push_back(static_cast<int>(i));
    }
  }
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < call.p2p[r].size(); ++i) {
      const P2POp& op = call.p2p[r][i];
      if (!op.isSend) continue;
      const std::pair<int, int> key{static_cast<int>(r), op.peer};
      auto it = recvs.find(key);
      size_t& k = used[key];
      if (it == recvs.end() || k >= it->second.size()) continue;
      const int j = it->second[k++];
      match[r][i] = {op.peer, j};
      match[static_cast<size_t>(op.peer)][static_cast<size_t>(j)] = {static_cast<int>(r), static_cast<int>(i)};
    }
  }
  return match;
}

}  // namespace detail

size_t programCopyBytes(const RankProgram& program) {
  size_t bytes = 0;
  for (const Op& op : program.ops) {
    if (const auto* copy = std::get_if<Copy>(&op)) bytes += copy->bytes;
  }
  return bytes;
}

bool copyContinues(const Copy& first, const Copy& next) {
  auto follows = [&](const Location& after, const Location& before) {
    return after.rank == before.rank && after.buffer == before.buffer && after.offset == before.offset + first.bytes;
  };
  return follows(next.src, first.src) && follows(next.dst, first.dst);
}

size_t programWorkBytes(const RankProgram& program) {
  size_t bytes = programCopyBytes(program);
  for (const Op& op : program.ops) {
    if (const auto* reduce = std::get_if<Reduce>(&op)) bytes += reduce->count * detail::typeSize(reduce->dtype);
  }
  return bytes;
}

namespace {
// False for a copy or reduction that has nothing to do, and for marks (they move nothing).
bool isActive(const Op& op) {
  if (std::holds_alternative<Ready>(op)) return false;
  if (const auto* copy = std::get_if<Copy>(&op)) return copy->bytes > 0;
  if (const auto* reduce = std::get_if<Reduce>(&op)) return reduce->count > 0;
  return true;
}
}  // namespace

size_t programActiveOps(const RankProgram& program) {
  size_t ops = 0;
  for (const Op& op : program.ops) ops += isActive(op) ? 1 : 0;
  return ops;
}

size_t programReduceInputs(const RankProgram& program) {
  size_t inputs = 0;
  for (const Op& op : program.ops) {
    const auto* reduce = std::get_if<Reduce>(&op);
    if (reduce != nullptr && reduce->count > 0) inputs += reduce->inputs.size();
  }
  return inputs;
}

Schedule buildSchedule(const CollectiveCall& call, const BuildOptions& options) {
  CONCCL_REQUIRE(options.lanes >= 1, "BuildOptions: lanes must be >= 1");
  CONCCL_REQUIRE(options.pipelineDepth >= 1, "BuildOptions: pipelineDepth must be >= 1");
  detail::validateCall(call);
  BuildOptions effective = options;
  if (call.peerScratchOnly) {
    // Both would make a rank touch a peer's call buffer (a reduction reading it, an own block echoed off it).
    effective.peerReads = false;
    effective.ownBlockViaPeer = false;
  }
  // The call's owner reads every rank's input where it lies: only where the executor can address peer memory.
  CONCCL_REQUIRE(call.callOwner < 0 || call.nranks == 1 || options.peerReads,
                 std::string(collKindName(call.kind)) +
                     ": callOwner needs BuildOptions::peerReads (the owner reads every rank's input in place)");
  Schedule s;
  switch (call.kind) {
    case CollKind::kAllGather:
      s = detail::buildAllGather(call, effective);
      break;
    case CollKind::kReduceScatter:
      s = detail::buildReduceScatter(call, effective);
      break;
    case CollKind::kAllReduce:
      s = detail::buildAllReduce(call, effective);
      break;
    case CollKind::kBroadcast:
      s = detail::buildBroadcast(call, effective);
      break;
    case CollKind::kReduce:
      s = detail::buildReduce(call, effective);
      break;
    case CollKind::kAllToAll:
      s = detail::buildAllToAll(call, effective);
      break;
    case CollKind::kAllToAllv:
      s = detail::buildAllToAllv(call, effective);
      break;
    case CollKind::kGather:
      s = detail::buildGather(call, effective);
      break;
    case CollKind::kScatter:
      s = detail::buildScatter(call, effective);
      break;
    case CollKind::kSendRecv:
      s = detail::buildSendRecv(call, effective);
      break;
  }
  detail::finalizeSlots(s);
  CONCCL_ASSERT(s.slots <= maxSlots(call.nranks, options));
  CONCCL_ASSERT(s.scratchBytes <= options.scratchBudget);
  s.copyBytes.clear();
  s.workBytes.clear();
  s.activeOps.clear();
  s.reduceInputs.clear();
  for (const RankProgram& program : s.programs) {
    s.copyBytes.push_back(programCopyBytes(program));
    s.workBytes.push_back(programWorkBytes(program));
    s.activeOps.push_back(programActiveOps(program));
    s.reduceInputs.push_back(programReduceInputs(program));
  }
  return s;
}

}  // namespace conccl::sched
