#include "backend_nccl.h"

#include <cstdlib>
#include <optional>

#include "backend_factory.h"
#include "coll.h"
#include "nccl/type_map.h"
#include "types.h"

namespace conccl::bench {

void NcclCheck(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw BackendError(std::string(call) + " failed: " + ncclGetErrorString(result) + " (" + file + ":" +
                     std::to_string(line) + ")" +
                     (ncclGetLastError(nullptr) ? std::string(": ") + ncclGetLastError(nullptr) : std::string()));
}

ncclDataType_t ToNccl(concclDataType_t type) {
  // The library's map (src/nccl/type_map.h; its values are checked against nccl.h where the drop-in is built).
  const std::optional<int> value = nccl::toNcclType(type);
  if (!value) throw BackendError("no NCCL type for conccl type " + std::to_string(static_cast<int>(type)));
  return static_cast<ncclDataType_t>(*value);
}

namespace {
ncclRedOp_t ToNccl(concclRedOp_t op) {
  switch (op) {
    case concclSum:
      return ncclSum;
    case concclProd:
      return ncclProd;
    case concclMax:
      return ncclMax;
    case concclMin:
      return ncclMin;
    case concclAvg:
      return ncclAvg;
    default:
      throw BackendError("no NCCL op for conccl op " + std::to_string(static_cast<int>(op)));
  }
}
}  // namespace

int NcclMaxCtas() {
  const char* env = std::getenv("NCCL_MAX_CTAS");
  if (env && *env) return std::atoi(env);
  return 32;
}

NcclBackend::NcclBackend(const BenchOptions& options, NoInit)
    : streams_(RankDevices(options)), comms_(options.nranks, nullptr) {
  if (HasRepeats(streams_.devices())) {
    throw BackendError("NCCL needs one rank per GPU (--devices has repeats)");
  }
}

NcclBackend::NcclBackend(const BenchOptions& options) : NcclBackend(options, NoInit{}) {
  BENCH_NCCL_CHECK(ncclCommInitAll(comms_.data(), NumRanks(), streams_.devices().data()));
}

NcclBackend::~NcclBackend() {
  try {
    streams_.SynchronizeAll();
  } catch (...) {
  }
  for (ncclComm_t c : comms_) {
    if (c) ncclCommDestroy(c);
  }
}

std::vector<std::string> NcclBackend::Describe() const {
  return {Name() + ": NCCL, ncclCommInitAll over " + std::to_string(NumRanks()) +
          " devices, SM kernels (<= " + std::to_string(NcclMaxCtas()) + " CTAs)"};
}

bool NcclBackend::Supports(CollKind /*kind*/, concclDataType_t type, int op) const {
  return op < 0 || DTypeOf(type).reducible;  // the reference has no fp8 reductions
}

SmUsage NcclBackend::Sms(CollKind /*kind*/, size_t /*bytes*/) const {
  return {NcclMaxCtas(), true, false, "NCCL does not report its channels; configured maximum CTAs"};
}

void* NcclBackend::Alloc(int rank, size_t bytes) {
  DeviceGuard guard(Device(rank));
  void* p = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void NcclBackend::Free(int rank, void* ptr) {
  DeviceGuard guard(Device(rank));
  cudaFree(ptr);
}

void NcclBackend::CopyIn(int rank, void* dst, const void* src, size_t bytes) {
  DeviceGuard guard(Device(rank));
  BENCH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void NcclBackend::CopyOut(int rank, void* dst, const void* src, size_t bytes) {
  DeviceGuard guard(Device(rank));
  BENCH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void NcclBackend::GroupStart() { BENCH_NCCL_CHECK(ncclGroupStart()); }
void NcclBackend::GroupEnd() { BENCH_NCCL_CHECK(ncclGroupEnd()); }

void NcclBackend::AllGather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type) {
  BENCH_NCCL_CHECK(ncclAllGather(send, recv, sendcount, ToNccl(type), comms_[rank], streams_[rank]));
}

void NcclBackend::ReduceScatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type,
                                concclRedOp_t op) {
  BENCH_NCCL_CHECK(ncclReduceScatter(send, recv, recvcount, ToNccl(type), ToNccl(op), comms_[rank], streams_[rank]));
}

void NcclBackend::AllReduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type,
                            concclRedOp_t op) {
  BENCH_NCCL_CHECK(ncclAllReduce(send, recv, count, ToNccl(type), ToNccl(op), comms_[rank], streams_[rank]));
}

void NcclBackend::Broadcast(int rank, const void* send, void* recv, size_t count, concclDataType_t type, int root) {
  BENCH_NCCL_CHECK(ncclBroadcast(send, recv, count, ToNccl(type), root, comms_[rank], streams_[rank]));
}

void NcclBackend::Reduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type, concclRedOp_t op,
                         int root) {
  BENCH_NCCL_CHECK(ncclReduce(send, recv, count, ToNccl(type), ToNccl(op), root, comms_[rank], streams_[rank]));
}

void NcclBackend::AllToAll(int rank, const void* send, void* recv, size_t count, concclDataType_t type) {
  BENCH_NCCL_CHECK(ncclAlltoAll(send, recv, count, ToNccl(type), comms_[rank], streams_[rank]));
}

void NcclBackend::Gather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type, int root) {
  BENCH_NCCL_CHECK(ncclGather(send, recv, sendcount, ToNccl(type), root, comms_[rank], streams_[rank]));
}

void NcclBackend::Scatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type, int root) {
  BENCH_NCCL_CHECK(ncclScatter(send, recv, recvcount, ToNccl(type), root, comms_[rank], streams_[rank]));
}

void NcclBackend::Send(int rank, const void* send, size_t count, concclDataType_t type, int peer) {
  BENCH_NCCL_CHECK(ncclSend(send, count, ToNccl(type), peer, comms_[rank], streams_[rank]));
}

void NcclBackend::Recv(int rank, void* recv, size_t count, concclDataType_t type, int peer) {
  BENCH_NCCL_CHECK(ncclRecv(recv, count, ToNccl(type), peer, comms_[rank], streams_[rank]));
}

std::vector<double> NcclBackend::Time(const std::function<void()>& launch, int iters, bool graph) {
  return TimeWithEvents(streams_, launch, iters, graph);
}

std::unique_ptr<RankTimer> NcclBackend::MakeRankTimer(const std::vector<int>& ranks, int iters) {
  return MakeEventTimer(streams_, ranks, iters);
}

std::unique_ptr<Backend> MakeNcclBackend(const BenchOptions& options) { return std::make_unique<NcclBackend>(options); }

}  // namespace conccl::bench
