// conccl backends of the bench: the collective calls through the public API, shared by the CUDA backend
// (backend_conccl_cuda.cc) and the host backend (backend_host.cc). No CUDA types.
#ifndef CONCCL_TOOLS_BENCH_BACKEND_CONCCL_H_
#define CONCCL_TOOLS_BENCH_BACKEND_CONCCL_H_

#include <conccl/conccl.h>

#include <string>
#include <vector>

#include "backend.h"
#include "options.h"

namespace conccl::bench {

// Throws BackendError naming the call, the result and the communicator's last error.
void ConcclCheck(concclResult_t result, concclComm_t comm, const char* call);

class ConcclBackend : public Backend {
 public:
  ~ConcclBackend() override;

  int NumRanks() const override { return static_cast<int>(comms_.size()); }
  bool Supports(CollKind kind, concclDataType_t type, int op) const override;
  SmUsage Sms(CollKind kind, size_t bytes) const override;

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

 protected:
  // Creates the communicators; `devices` only for the CUDA backend.
  ConcclBackend(concclBackend_t kind, int nranks, const std::vector<int>& devices, const BenchOptions& options);
  // Stream of the rank's calls (NULL on the host backend).
  virtual cudaStream_t StreamOf(int /*rank*/) const { return nullptr; }
  // Description of the configuration in force, for the header.
  std::string ConfigText() const;

  std::vector<concclComm_t> comms_;
  concclConfig_t config_ = CONCCL_CONFIG_INITIALIZER;  // as applied by the library (rank 0)
};

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_BACKEND_CONCCL_H_
