// What both clique implementations share: assembling a call from its ranks' arguments and validating it.
#include "core/clique.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <string>

#include "base/types.h"

namespace conccl {

using sched::isReduction;
using sched::isRooted;

std::string disagreement(const RankArgs& a, int ra, const RankArgs& b, int rb) {
  auto differs = [&](const std::string& what, const std::string& va, const std::string& vb) {
    return "ranks disagree on " + what + ": rank " + std::to_string(ra) + " called " + a.apiName + " with " + va +
           ", rank " + std::to_string(rb) + " called " + b.apiName + " with " + vb;
  };
  if (a.kind != b.kind) return differs("the collective", sched::collKindName(a.kind), sched::collKindName(b.kind));
  if (a.dtype != b.dtype) return differs("the datatype", typeName(a.dtype), typeName(b.dtype));
  if (a.kind != sched::CollKind::kAllToAllv && a.count != b.count) {
    return differs("the count", std::to_string(a.count), std::to_string(b.count));
  }
  if (isReduction(a.kind) && a.op != b.op) return differs("the op", opName(a.op), opName(b.op));
  if (isRooted(a.kind) && a.root != b.root) return differs("the root", std::to_string(a.root), std::to_string(b.root));
  if (a.pushInputs != b.pushInputs) {
    auto name = [](bool chunked) { return chunked ? "concclReduceScatterChunked" : "concclReduceScatter"; };
    return "ranks disagree on the call: rank " + std::to_string(ra) + " called " + name(a.pushInputs) + ", rank " +
           std::to_string(rb) + " called " + name(b.pushInputs) + " (every rank or none must pass input pieces)";
  }
  return {};
}

void assembleCall(PendingCall& pending, int n) {
  sched::CollectiveCall& call = pending.call;
  call.nranks = n;
  int first = -1;
  for (int r = 0; r < n; ++r) {
    if (pending.args[r]) {
      first = r;
      break;
    }
  }
  CONCCL_ASSERT(first >= 0);
  const RankArgs& a0 = *pending.args[first];
  call.kind = a0.kind;
  call.dtype = a0.dtype;
  call.op = a0.op;
  call.root = a0.root;
  call.count = a0.count;
  call.inPlace.assign(n, false);
  pending.binding.buffers.assign(n, {});
  pending.binding.streams.assign(n, nullptr);
  if (call.kind == sched::CollKind::kSendRecv) {
    call.p2p.assign(n, {});
    for (int r = 0; r < n; ++r) {
      if (!pending.args[r]) continue;
      call.p2p[r] = pending.args[r]->p2p;
      pending.binding.buffers[r] = pending.args[r]->p2pBuffers;
      pending.binding.streams[r] = pending.args[r]->stream;
    }
    return;
  }
  for (int r = 0; r < n; ++r) {
    const RankArgs& ar = *pending.args[r];
    // All ranks must call the same collective with the same count, type, op and root (NCCL's rule; NCCL itself
    // would hang or corrupt memory instead).
    if (std::string problem = disagreement(a0, first, ar, r); !problem.empty()) {
      CONCCL_THROW(concclInvalidArgument, problem);
    }
    call.inPlace[r] = ar.inPlace;
    pending.binding.buffers[r] = {const_cast<void*>(ar.sendbuff), ar.recvbuff};
    pending.binding.streams[r] = ar.stream;
    if (!ar.chunkEvents.empty()) {
      pending.binding.chunkEvents.resize(static_cast<size_t>(n));
      pending.binding.chunkEvents[static_cast<size_t>(r)] = ar.chunkEvents;
    }
    // Every rank pushes its input to the reducers then (never read in place by a peer, which could not wait for this
    // rank's producer); the ranks agree on it (disagreement above).
    call.pushInputs = ar.pushInputs;
    if (!ar.inputEvents.empty()) {
      const size_t es = typeSize(ar.dtype);
      const size_t pieceElems = (ar.count + static_cast<size_t>(ar.piecesPerBlock) - 1) /
                                static_cast<size_t>(ar.piecesPerBlock);
      pending.binding.inputPieces.resize(static_cast<size_t>(n));
      pending.binding.inputPieces[static_cast<size_t>(r)] =
          exec::InputPieces{ar.inputEvents, ar.count * es, pieceElems * es, ar.piecesPerBlock};
    }
  }
  if (call.kind == sched::CollKind::kAllToAllv) {
    for (int r = 0; r < n; ++r) {
      const RankArgs& ar = *pending.args[r];
      call.sendCounts.push_back(ar.sendCounts);
      call.sendDispls.push_back(ar.sendDispls);
      call.recvCounts.push_back(ar.recvCounts);
      call.recvDispls.push_back(ar.recvDispls);
    }
  }
}

bool fitsStaging(const RankArgs& args, int nranks, size_t maxBytes) {
  if (nranks < 2 || maxBytes == 0) return false;
  if (args.kind == sched::CollKind::kAllToAllv || args.kind == sched::CollKind::kSendRecv) return false;
  sched::CollectiveCall shape;
  shape.kind = args.kind;
  shape.nranks = nranks;
  shape.dtype = args.dtype;
  shape.count = args.count;
  shape.root = args.root;
  size_t largest = 0;
  try {
    for (size_t bytes : sched::bufferBytes(shape, args.root)) largest = std::max(largest, bytes);
  } catch (const Error&) {
    return false;  // sizes that overflow: the regular path reports them on every rank
  }
  return largest <= maxBytes;
}

void assembleSoloCall(PendingCall& pending, const RankArgs& mine, int rank, int nranks) {
  pending.args.assign(static_cast<size_t>(nranks), std::nullopt);
  for (int p = 0; p < nranks; ++p) {
    RankArgs mirror = mine;
    if (p != rank) mirror.stream = nullptr;
    pending.args[static_cast<size_t>(p)] = std::move(mirror);
  }
  assembleCall(pending, nranks);
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    pending.binding.buffers[static_cast<size_t>(p)].assign(2, nullptr);
    pending.binding.streams[static_cast<size_t>(p)] = nullptr;
  }
}

namespace {
// Everything buildSchedule reads, as bytes: equal keys give equal schedules.
std::string shapeKey(const sched::CollectiveCall& call) {
  std::string key;
  auto put = [&key](auto v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<int>(call.kind));
  put(call.nranks);
  put(static_cast<int>(call.dtype));
  put(static_cast<int>(call.op));
  put(call.root);
  put(call.count);
  for (bool b : call.inPlace) key.push_back(b ? '1' : '0');
  put(call.pushInputs);
  put(call.peerScratchOnly);
  put(call.pairOwner.size());
  for (int o : call.pairOwner) put(o);
  put(call.callOwner);
  for (const auto* table : {&call.sendCounts, &call.sendDispls, &call.recvCounts, &call.recvDispls}) {
    put(table->size());
    for (const auto& row : *table) {
      put(row.size());
      for (size_t v : row) put(v);
    }
  }
  put(call.p2p.size());
  for (const auto& ops : call.p2p) {
    put(ops.size());
    for (const auto& op : ops) {
      put(op.isSend);
      put(op.peer);
      put(op.count);
      put(op.buffer);
      put(op.viaScratch);
    }
  }
  return key;
}
}  // namespace

std::shared_ptr<const sched::Schedule> ScheduleCache::get(const sched::CollectiveCall& call, int copyEnginesFor) {
  std::string key = shapeKey(call);
  key.append(reinterpret_cast<const char*>(&copyEnginesFor), sizeof(copyEnginesFor));  // -1: not pinned
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
  }
  // Numbered once built: executors cache work derived from a schedule under its id (Schedule::id). Process-wide and
  // never reused, so an id cannot name two different schedules even after this cache starts over.
  static std::atomic<uint64_t> nextId{1};
  sched::Schedule built = sched::buildSchedule(call, options_);
  if (copyEnginesFor >= 0) {
    for (size_t p = 0; p < built.workBytes.size(); ++p) {
      if (static_cast<int>(p) != copyEnginesFor) built.workBytes[p] = std::numeric_limits<size_t>::max();
    }
  }
  built.id = nextId.fetch_add(1, std::memory_order_relaxed);
  auto schedule = std::make_shared<const sched::Schedule>(std::move(built));
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.size() >= kMaxEntries) entries_.clear();
  entries_.emplace(std::move(key), schedule);
  return schedule;
}

}  // namespace conccl
