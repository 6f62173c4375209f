// The measuring half of conccl-c3 (CUDA, cuBLASLt, NCCL, conccl). The interface has no CUDA types so that
// main.cc compiles in builds without CUDA; gpu_runner.cc is only compiled when CONCCL_HAVE_CUDA.
#pragma once

#include <functional>
#include <vector>

#include "c3/report.h"
#include "c3/scenario.h"
#include "c3_options.h"

namespace conccl::c3 {

struct GpuRunOutput {
  RunInfo info;
  std::vector<ResultRow> rows;
  std::vector<SmBudgetRow> smRows;
};

// Called with each row as soon as it is measured, so that long runs print progressively.
using RowCallback = std::function<void(const ResultRow&)>;
using SmRowCallback = std::function<void(const SmBudgetRow&)>;
// Called once the run's context (devices, caveats) is known, before the first row.
using InfoCallback = std::function<void(const RunInfo&)>;

// Every scenario under every selected strategy across options.ranks GPUs. Throws conccl::Error.
GpuRunOutput runC3(const C3Options& options, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                   const RowCallback& onRow);

// One-GPU mode: GEMM time vs SM budget, then each GEMM beside an SM copy kernel (an SM-collective proxy)
// and beside conccl with all ranks on the one GPU. Throws conccl::Error.
GpuRunOutput runSmSweep(const C3Options& options, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                        const SmRowCallback& onSmRow, const RowCallback& onRow);

}  // namespace conccl::c3
