// What both clique implementations share: assembling a call from its ranks' arguments and validating it.
#include "core/clique.h"

#include <string>

#include "core/types.h"

namespace conccl {
namespace {

using sched::isReduction;
using sched::isRooted;

// Throws when rank r's arguments disagree with rank 0's: all ranks must call the same collective with the
// same count, type, op and root (NCCL's rule; NCCL itself would hang or corrupt memory instead).
void checkAgreement(const RankArgs& a0, const RankArgs& ar, int r) {
  auto mismatch = [&](const std::string& what, const std::string& v0, const std::string& vr) {
    CONCCL_THROW(concclInvalidArgument, std::string("ranks disagree on ") + what + ": rank 0 called " + a0.apiName +
                                            " with " + v0 + ", rank " + std::to_string(r) + " called " +
                                            ar.apiName + " with " + vr);
  };
  if (a0.kind != ar.kind) mismatch("the collective", sched::collKindName(a0.kind), sched::collKindName(ar.kind));
  if (a0.dtype != ar.dtype) mismatch("the datatype", typeName(a0.dtype), typeName(ar.dtype));
  if (a0.kind != sched::CollKind::kAllToAllv && a0.count != ar.count) {
    mismatch("the count", std::to_string(a0.count), std::to_string(ar.count));
  }
  if (isReduction(a0.kind) && a0.op != ar.op) mismatch("the op", opName(a0.op), opName(ar.op));
  if (isRooted(a0.kind) && a0.root != ar.root) {
    mismatch("the root", std::to_string(a0.root), std::to_string(ar.root));
  }
}

}  // namespace

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
    checkAgreement(a0, ar, r);
    call.inPlace[r] = ar.inPlace;
    pending.binding.buffers[r] = {const_cast<void*>(ar.sendbuff), ar.recvbuff};
    pending.binding.streams[r] = ar.stream;
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
    }
  }
  return key;
}
}  // namespace

std::shared_ptr<const sched::Schedule> ScheduleCache::get(const sched::CollectiveCall& call) {
  std::string key = shapeKey(call);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
  }
  auto schedule = std::make_shared<const sched::Schedule>(sched::buildSchedule(call, options_));
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.size() >= kMaxEntries) entries_.clear();
  entries_.emplace(std::move(key), schedule);
  return schedule;
}

}  // namespace conccl
