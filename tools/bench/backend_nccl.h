// NCCL baselines of the bench: `nccl` (ncclCommInitAll, SM kernels) in backend_nccl.cc and `nccl-ce`
// (NCCL 2.28 copy-engine collectives: CTA policy ZERO, symmetric windows) in backend_nccl_ce.cc.
#ifndef CONCCL_TOOLS_BENCH_BACKEND_NCCL_H_
#define CONCCL_TOOLS_BENCH_BACKEND_NCCL_H_

#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "cuda_timer.h"
#include "options.h"

namespace conccl::bench {

void NcclCheck(ncclResult_t result, const char* call, const char* file, int line);
#define BENCH_NCCL_CHECK(call) ::conccl::bench::NcclCheck((call), #call, __FILE__, __LINE__)

ncclDataType_t ToNccl(concclDataType_t type);

// The SM budget NCCL is limited to: NCCL_MAX_CTAS, else the default maximum of 32 CTAs (FACTS.md). NCCL
// does not report the channels a collective used through its API, so this is an upper bound.
int NcclMaxCtas();

class NcclBackend : public Backend {
 public:
  // Plain NCCL: ncclCommInitAll over the devices.
  explicit NcclBackend(const BenchOptions& options);
  ~NcclBackend() override;

  std::string Name() const override { return "nccl"; }
  int NumRanks() const override { return static_cast<int>(comms_.size()); }
  std::vector<std::string> Describe() const override;
  bool Supports(CollKind kind, concclDataType_t type, int op) const override;
  SmUsage Sms(CollKind kind, size_t bytes) const override;

  void* Alloc(int rank, size_t bytes) override;
  void Free(int rank, void* ptr) override;
  void CopyIn(int rank, void* dst, const void* src, size_t bytes) override;
  void CopyOut(int rank, void* dst, const void* src, size_t bytes) override;

  void GroupStart() override;
  void GroupEnd() override;
  void AllGather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type) override;
  void ReduceScatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type,
                     concclRedOp_t op) override;
  void AllReduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type,
                 concclRedOp_t op) override;
  void Broadcast(int rank, const void* send, void* recv, size_t count, concclDataType_t type, int root) override;
  void Reduce(int rank, const void* send, void* recv, size_t count, concclDataType_t type, concclRedOp_t op,
              int root) override;
  void AllToAll(int rank, const void* send, void* recv, size_t count, concclDataType_t type) override;
  void Gather(int rank, const void* send, void* recv, size_t sendcount, concclDataType_t type, int root) override;
  void Scatter(int rank, const void* send, void* recv, size_t recvcount, concclDataType_t type, int root) override;
  void Send(int rank, const void* send, size_t count, concclDataType_t type, int peer) override;
  void Recv(int rank, void* recv, size_t count, concclDataType_t type, int peer) override;

  std::vector<double> Time(const std::function<void()>& launch, int iters, bool graph) override;
  std::unique_ptr<RankTimer> MakeRankTimer(const std::vector<int>& ranks, int iters) override;

 protected:
  struct NoInit {};
  // For derived backends that create the communicators themselves.
  NcclBackend(const BenchOptions& options, NoInit);
  int Device(int rank) const { return streams_.devices()[rank]; }

  RankStreams streams_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_BACKEND_NCCL_H_
