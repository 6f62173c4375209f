// The measuring half of conccl-c3 (CUDA, cuBLASLt, NCCL, conccl): runs the grid, the calibration and the
// one-GPU sweep and turns the measurements into report rows. The interface has no CUDA types so that main.cc
// compiles in builds without CUDA; gpu_runner.cc and its parts (gemm, green_context, collectives, harness,
// strategy_exec, rounds) are only compiled when CONCCL_HAVE_CUDA.
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

// Every scenario under every selected strategy across options.ranks GPUs, in interleaved rounds, with the
// baseline T_c (NCCL's) in every row; an `auto` row per scenario when auto is selected. Throws conccl::Error.
GpuRunOutput runC3(const C3Options& options, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                   const RowCallback& onRow);

// The calibration scenarios (calibrationScenarios() for the run's rank count) under every selected fixed
// strategy; calibrationFromRows() of the rows is the calibration. Throws conccl::Error.
GpuRunOutput runCalibration(const C3Options& options, const InfoCallback& onInfo, const RowCallback& onRow);

// One-GPU mode: GEMM time vs SM budget, then each GEMM beside an SM copy kernel (an SM-collective proxy)
// and beside conccl with all ranks on the one GPU. Throws conccl::Error.
GpuRunOutput runSmSweep(const C3Options& options, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                        const SmRowCallback& onSmRow, const RowCallback& onRow);

}  // namespace conccl::c3
