#include "backend_conccl.h"

#include "coll.h"
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
  // A rank whose copies fit in smallMessageBytes runs its part as one 1-CTA kernel (CUDA backend). What the busiest
  // rank copies, estimated from the row's size (nccl-tests convention) and the direct schedules of src/sched.
  const size_t n = static_cast<size_t>(NumRanks());
  size_t copied = bytes;
  switch (kind) {
    case CollKind::kAllReduce: copied = 2 * bytes; break;                 // reduce-scatter + all-gather phases
    case CollKind::kReduceScatter: case CollKind::kBroadcast: case CollKind::kScatter: copied = bytes * n; break;
    default: break;
  }
  concclConfig_t used = CONCCL_CONFIG_INITIALIZER;
  const bool reduces = kind == CollKind::kReduceScatter || kind == CollKind::kAllReduce || kind == CollKind::kReduce;
  // The executor runs movement-only calls as the kernel up to 4 x smallMessageBytes (kSmallMovementFactor in
  // src/exec/cuda/cuda_executor.cc).
  if (!comms_.empty() && concclCommGetConfig(comms_.front(), &used) == concclSuccess &&
      used.backend == concclBackendCuda && used.engine != concclEngineCopy &&
      copied <= (reduces ? used.smallMessageBytes : 4 * used.smallMessageBytes)) {
    return {1, true, true, "small-message kernel (1 CTA for a few us) below smallMessageBytes, estimated"};
  }
  if (!reduces) return {0, false, false, "copy engines only"};
  // reduceCtas 0 (auto, the default): one CTA per 256 KiB of input read, at most 8 (docs/cuda-executor.md).
  if (used.reduceCtas > 0) return {used.reduceCtas, false, false, "reduction kernel CTAs (config.reduceCtas)"};
  return {8, true, false, "reduction kernel CTAs: auto, at most 8 by size"};
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
