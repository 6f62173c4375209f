// Measured calibration of the C3 planner (`conccl-c3 --calibrate FILE`, docs/c3.md "Calibration"): which
// scenarios are measured, how their rows become slowdowns, and the calibration file. Pure C++: no CUDA types.
//
// For every GEMM bound (compute / memory) and collective kind, one scenario whose collective takes about as
// long as the GEMM on the baseline (so both sides overlap for most of the run and both slowdowns can be read);
// every strategy runs it in interleaved rounds, and inferCost() turns the medians into the model's GEMM
// slowdown a and collective slowdown b; the strategy's own collective time over the baseline's is its
// collTimeScale.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "c3/planner.h"
#include "c3/report.h"
#include "c3/scenario.h"

namespace conccl::c3 {

// The GEMMs measured per bound: 8192^3 bf16 (compute-bound, ~1.4 ms on H200) and 128x57344x8192 bf16
// (memory-bound, intensity ~120 FLOP/B, ~0.2 ms).
GemmShape calibrationGemm(GemmBound bound);

// One scenario per GEMM bound and collective kind over `ranks` ranks, named "cal-<bound>-<kind>"; the
// collective's bytes are the power of two (1 MiB .. 1 GiB) whose predicted baseline time is nearest to the
// GEMM's predicted time.
std::vector<Scenario> calibrationScenarios(int ranks, const MachineProfile& machine = MachineProfile::h200(),
                                           const CommProfile& comm = {});

// The priors of Calibration::defaults(), with a measured kindCosts entry for every ok row of a fixed,
// overlapping strategy (not serial, not auto) whose times give a slowdown (inferCost).
Calibration calibrationFromRows(const std::vector<ResultRow>& rows);

// {"tool": "conccl-c3", "kind": "c3-calibration", "format": 1, "device", "ranks",
//  "ce_reduction_gemm_slowdown", "entries": [{"strategy", "gemm_bound", "collective", "gemm_slowdown",
//  "coll_slowdown", "coll_time_scale", "coll_extra_latency_s"}]}: the measured (kindCosts) entries only;
// reading starts from Calibration::defaults() and adds them. Errors throw conccl::Error(concclInvalidArgument).
std::string calibrationToJson(const Calibration& calibration, const std::string& device, int ranks);
Calibration calibrationFromJson(std::string_view text);
Calibration loadCalibration(const std::string& path);
void saveCalibration(const std::string& path, const Calibration& calibration, const std::string& device, int ranks);

}  // namespace conccl::c3
