// The collective side of conccl-c3: one collective call over all ranks, each rank on its own stream, from
// one of three backends: conccl (copy engines), NCCL (SM kernels, or its copy-engine mode), and an SM copy
// kernel that stands in for an SM collective on one GPU. Buffers are sized the way nccl-tests counts bytes.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "c3/workload.h"
#include "exec/cuda/raii.h"

namespace conccl::c3 {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual void enqueue(const std::vector<cudaStream_t>& rankStreams) = 0;
};

// Per-rank (send, receive) buffer sizes of a collective sized the nccl-tests way.
std::pair<size_t, size_t> bufferBytes(const CollectiveSpec& c);

// conccl communicators over `devices` (concclBackendCuda), created once per run: creation is not measured.
class ConcclComms {
 public:
  explicit ConcclComms(const std::vector<int>& devices);
  ~ConcclComms();
  ConcclComms(const ConcclComms&) = delete;
  ConcclComms& operator=(const ConcclComms&) = delete;
  const std::vector<concclComm_t>& comms() const { return comms_; }
  const std::vector<int>& devices() const { return devices_; }

 private:
  std::vector<int> devices_;
  std::vector<concclComm_t> comms_;
};

std::unique_ptr<Collective> makeConcclCollective(const ConcclComms& comms, const CollectiveSpec& spec);
// The most SMs conccl's call for `spec` occupies on any rank's GPU (concclCallResources: 0 when copy engines move
// everything). Throws conccl::Error when the query fails.
int concclCallSms(const ConcclComms& comms, const CollectiveSpec& spec);

// One-GPU proxy for an SM collective: a copy kernel with a fixed CTA count moving the collective's bytes.
std::unique_ptr<Collective> makeSmCopyCollective(int device, uint64_t bytes, int ctas);

// NCCL communicators per configuration: default; maxCTAs limited (RP); CTAPolicy ZERO (NCCL 2.28 copy-engine
// collectives, which also need buffers from ncclMemAlloc registered as symmetric windows). Without NCCL in the
// build, constructing one throws concclNotSupported.
enum class NcclVariant { kDefault, kReducedCtas, kCopyEngine };
class NcclComms {
 public:
  NcclComms(const std::vector<int>& devices, NcclVariant variant, int maxCtas);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;
  NcclVariant variant() const { return variant_; }
  const std::vector<int>& devices() const { return devices_; }
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::vector<int> devices_;
  NcclVariant variant_;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Collective> makeNcclCollective(const NcclComms& comms, const CollectiveSpec& spec);

}  // namespace conccl::c3
