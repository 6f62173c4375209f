#include "backend_conccl.h"

#include "coll.h"
#include "sm_usage.h"
#include "types.h"

namespace conccl::bench {

void ConcclCheck(concclResult_t result, concclComm_t comm, const char* call) {
  if (result == concclSuccess) return;
  const char* last = concclGetLastError(comm);
  throw BackendError(std::string(call) + " failed: " + concclGetErrorString(result) +
                     (last && *last ? std::string(": ") + last : std::string()));
}

ConcclBackend::ConcclBackend(concclBackend_t kind, int nranks, const std::vector<int>& devices,
                             const BenchOptions& options) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = kind;
  if (options.lanes != CONCCL_CONFIG_UNDEF_INT) config.lanes = options.lanes;
  if (options.reduce_ctas != CONCCL_CONFIG_UNDEF_INT) config.reduceCtas = options.reduce_ctas;
  comms_.resize(nranks);
  ConcclCheck(concclCommInitAll(comms_.data(), nranks, devices.empty() ? nullptr : devices.data(), &config), nullptr,
              "concclCommInitAll");
  concclConfig_t applied = CONCCL_CONFIG_INITIALIZER;
  if (concclCommGetConfig(comms_[0], &applied) == concclSuccess) config_ = applied;
}

ConcclBackend::~ConcclBackend() {
  for (concclComm_t c : comms_) {
    if (c) concclCommDestroy(c);
  }
}

std::string ConcclBackend::ConfigText() const {
  auto val = [](int v) { return v == CONCCL_CONFIG_UNDEF_INT ? std::string("default") : std::to_string(v); };
  return "lanes " + val(config_.lanes) + ", reduceCtas " + val(config_.reduceCtas) + ", engine " + val(config_.engine) +
         ", timeoutMs " + val(config_.timeoutMs);
}

bool ConcclBackend::Supports(CollKind /*kind*/, concclDataType_t type, int op) const {
  return op < 0 || DTypeOf(type).reducible;
}

SmUsage ConcclBackend::Sms(CollKind kind, size_t bytes) const {
  // What the library says the call occupies (concclCallResources: the executor's own decision code), for the row's
  // size as uint8 elements: the path and the CTAs depend on bytes, not on the element type.
  concclCollective_t coll = concclNumColls;
  switch (kind) {
    case CollKind::kAllGather: coll = concclCollAllGather; break;
    case CollKind::kAllToAll: coll = concclCollAllToAll; break;
    case CollKind::kReduceScatter: coll = concclCollReduceScatter; break;
    case CollKind::kAllReduce: coll = concclCollAllReduce; break;
    case CollKind::kBroadcast: coll = concclCollBroadcast; break;
    case CollKind::kReduce: coll = concclCollReduce; break;
    case CollKind::kGather: coll = concclCollGather; break;
    case CollKind::kScatter: coll = concclCollScatter; break;
    case CollKind::kSendRecv: return {0, false, false, "copy engines only"};
    case CollKind::kAllToAllv: break;  // not in the bench's table
  }
  const CollDesc* desc = nullptr;
  for (const CollDesc* d : AllColls()) {
    if (d->kind == kind) desc = d;
  }
  if (desc == nullptr || comms_.empty()) return {};
  const size_t param = desc->counts(bytes, NumRanks()).param;
  std::vector<concclCallResources_t> ranks;
  for (concclComm_t comm : comms_) {
    concclCallResources_t res{};
    if (concclCallResources(comm, coll, param, concclUint8, 0, &res) != concclSuccess) return {};
    ranks.push_back(res);
  }
  return ConcclSmUsage(ranks);  // sm_usage.h: the busiest rank, same-device copies counted
}

void ConcclBackend::GroupStart() { ConcclCheck(concclGroupStart(), nullptr, "concclGroupStart"); }

void ConcclBackend::GroupEnd() { ConcclCheck(concclGroupEnd(), nullptr, "concclGroupEnd"); }

void ConcclBackend::AllGather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type) {
  ConcclCheck(concclAllGather(send, recv, sendcount, type, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclAllGather");
}

void ConcclBackend::ReduceScatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type,
                                  concclRedOp_t op) {
  ConcclCheck(concclReduceScatter(send, recv, recvcount, type, op, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclReduceScatter");
}

void ConcclBackend::AllReduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type,
                              concclRedOp_t op) {
  ConcclCheck(concclAllReduce(send, recv, count, type, op, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclAllReduce");
}

void ConcclBackend::Broadcast(int rank, const void* send, void* recv, size_t count, concclDataType_t type, int root) {
  ConcclCheck(concclBroadcast(send, recv, count, type, root, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclBroadcast");
}

void ConcclBackend::Reduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type,
                           concclRedOp_t op, int root) {
  ConcclCheck(concclReduce(send, recv, count, type, op, root, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclReduce");
}

void ConcclBackend::AllToAll(int rank, const void* send, void* recv, size_t count, concclDataType_t type) {
  ConcclCheck(concclAllToAll(send, recv, count, type, comms_[rank], StreamOf(rank)), comms_[rank], "concclAllToAll");
}

void ConcclBackend::Gather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type, int root) {
  ConcclCheck(concclGather(send, recv, sendcount, type, root, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclGather");
}

void ConcclBackend::Scatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type, int root) {
  ConcclCheck(concclScatter(send, recv, recvcount, type, root, comms_[rank], StreamOf(rank)), comms_[rank],
              "concclScatter");
}

void ConcclBackend::Send(int rank, const void* send, size_t count, concclDataType_t type, int peer) {
  ConcclCheck(concclSend(send, count, type, peer, comms_[rank], StreamOf(rank)), comms_[rank], "concclSend");
}

void ConcclBackend::Recv(int rank, void* recv, size_t count, concclDataType_t type, int peer) {
  ConcclCheck(concclRecv(recv, count, type, peer, comms_[rank], StreamOf(rank)), comms_[rank], "concclRecv");
}

}  // namespace conccl::bench
