// One shape's buffers on every rank and the strategies that run on them. A Workload owns the rank's inputs
// (random bf16), its output, and with --check a reference copy of the output; strategy() returns the launch
// function that conccl-tp-bench times (work on every rank, started and joined on each rank's main stream).
// workload_ag.cc: AG->GEMM; workload_rs.cc: GEMM->RS.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "c3_check.h"
#include "tp_report.h"
#include "tp_shapes.h"
#include "tp_world.h"

namespace conccl::tp {

class Workload {
 public:
  virtual ~Workload() = default;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // The launch function of strategy s, made of the workload's steps below (the same for both workloads). Throws
  // conccl::Error for a strategy this build cannot run.
  std::function<void()> strategy(Strategy s);
  // Fills the outputs, and the inputs a strategy must produce itself (AG: the peers' shards of the gathered A),
  // with NaN on the main streams, so that a result the strategy did not write fails --check.
  virtual void poison() = 0;

  // Copies each rank's output into its reference buffer (main streams). Needs --check.
  void saveReference();
  // The worst relative error over the ranks of output vs reference (tp_stats.h); synchronises.
  double compareWithReference();

 protected:
  Workload(TpWorld& world, const TpShape& shape, bool check);

  // The steps of the strategies, on every rank (tp_report.h, Strategy): the whole GEMM; the whole collective alone;
  // serial NCCL runs the two in data order (collectiveFirst: AG->GEMM; else GEMM->RS); the GEMM split by hand
  // around NCCL; conccl's fused op, made once by prepareFused before its first launch.
  virtual void gemm() = 0;
  virtual void collective() = 0;
  virtual bool collectiveFirst() const = 0;
  virtual void split() = 0;
  virtual void prepareFused() = 0;
  virtual void fused() = 0;

  // Random bf16 in [-1, 1) on rank r's main stream (seeded by rank and buffer).
  void fillRandom(int r, void* data, size_t elems, unsigned seed);
  // The output each rank's strategies write (AG: C, RS: C_shard), `outputElems` bf16 values.
  void setOutput(int r, void* output) { outputs_[size_t(r)] = output; }

  TpWorld& world_;
  TpShape shape_;

 private:
  std::vector<void*> outputs_;
  std::vector<exec::DeviceBuffer> refs_, stats_;
};

// The workload of shape.op; allocates on every rank (throws conccl::Error when CUDA cannot).
std::unique_ptr<Workload> makeWorkload(TpWorld& world, const TpShape& shape, bool check);
std::unique_ptr<Workload> makeAllGatherGemm(TpWorld& world, const TpShape& shape, bool check);
std::unique_ptr<Workload> makeGemmReduceScatter(TpWorld& world, const TpShape& shape, bool check);

// `body` between ncclGroupStart and ncclGroupEnd; the group is closed even when body throws.
void ncclGroup(const std::function<void()>& body);
// The same for concclGroupStart / concclGroupEnd.
void concclGroup(const std::function<void()>& body);

// Throws conccl::Error carrying a conccl::ops call's result and message.
void throwOpError(concclResult_t result, const char* what, const std::string& message);

}  // namespace conccl::tp
