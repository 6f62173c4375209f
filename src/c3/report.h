// Result rows of conccl-c3 and their two renderings: the text table on stdout and the JSON file that
// tools/c3/plot_c3.py reads. Pure C++: no CUDA types.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "c3/metrics.h"
#include "c3/scenario.h"
#include "c3/workload.h"

namespace conccl::c3 {

// One scenario under one strategy.
struct ResultRow {
  std::string scenario;
  std::string strategy;  // a Strategy name, or a one-GPU proxy label such as "sm-copy:8cta"
  GemmShape gemm;
  CollectiveSpec coll;
  Metrics metrics;  // medians over the rounds (docs/c3.md): what the table prints first
  Metrics low;      // per-field minimum over the rounds
  Metrics high;     // per-field maximum over the rounds
  std::vector<RoundTimes> rounds;  // the raw times of each round (empty: one measurement, no rounds)
  std::string baseline;            // whose collective T_c is: "nccl", or "conccl" where NCCL is absent
  std::string choice;              // auto rows: the strategy the planner picked (its measurement is reused)
  std::string bestFixed;           // auto rows: the fixed strategy with the least measured T_c3
  double bestFixedTC3 = -1;        // and that T_c3 (< 0: not known)
  GemmBound gemmBound = GemmBound::kCompute;
  double intensity = 0;  // FLOP per byte
  std::optional<CollBound> collBound;
  double halfPeakBytes = 0;   // where collBound came from (<= 0: unknown)
  double predictedTC3 = -1;   // from the planner's model (< 0: not predicted)
  std::string status = "ok";  // "ok", or why the row has no numbers ("skipped: ...", "error: ...")

  bool ok() const { return status == "ok"; }
};

// Builds a row: classifies the GEMM against `machine` and the collective against halfPeakBytes. The Metrics
// form is one measurement (low = high = metrics); the RoundSummary form carries median, range and rounds.
ResultRow makeRow(const Scenario& scenario, std::string strategy, const Metrics& metrics, const MachineProfile& machine,
                  double halfPeakBytes);
ResultRow makeRow(const Scenario& scenario, std::string strategy, const RoundSummary& summary,
                  const MachineProfile& machine, double halfPeakBytes);
ResultRow makeSkippedRow(const Scenario& scenario, std::string strategy, std::string status,
                         const MachineProfile& machine, double halfPeakBytes);

// One GEMM at one SM budget (--sm-sweep).
struct SmBudgetRow {
  std::string gemmName;  // scenario the GEMM came from
  GemmShape gemm;
  std::string method;   // "full", "sm-target", "green-ctx", "green-ctx+target"
  int sms = 0;          // SM budget (0: the whole GPU)
  double time = 0;      // seconds (NaN: not measured)
  double slowdown = 0;  // time / time on the whole GPU
  std::string status = "ok";
};

// Fixed-width text tables, one line per row, with a header line. Times in ms (medians over the rounds, each
// followed by its range (max - min) / median in percent), R with its [min,max], F in percent with its
// range, "-" for undefined values; rows that did not run show their status after the strategy. T_c is the
// baseline's, own is the strategy's own collective alone.
std::string formatTable(const std::vector<ResultRow>& rows);
std::string formatTableHeader();
std::string formatTableRow(const ResultRow& row);
std::string formatSmBudgetTable(const std::vector<SmBudgetRow>& rows);
// The footer of a run: per strategy, the ok rows, geomean of R and median F over them; for auto, in how
// many scenarios its T_c3 is within 5% of the best fixed strategy's (issue 12's target for auto).
std::string formatSummary(const std::vector<ResultRow>& rows);
// One line per scenario of a grid (--list-grid): shapes, sizes, intensity, bounds, predicted times, class and
// the planner's best strategy with `calibration` (nullptr: Calibration::defaults()).
struct Calibration;
std::string formatGrid(const std::vector<Scenario>& scenarios, const MachineProfile& machine,
                       const Calibration* calibration = nullptr);

// Context of a run, written at the top of the JSON.
struct RunInfo {
  std::string mode = "c3";  // "c3" or "sm-sweep"
  std::string device;       // e.g. "8x NVIDIA H200"
  std::vector<int> devices;
  int ranks = 0;
  int iters = 0;   // gated runs per measurement (the median is one round's value)
  int warmup = 0;
  int rounds = 0;  // interleaved rounds (T_g, T_c, own T_c, T_c3, T_g, ...)
  std::string baseline;     // "nccl" or "conccl"
  std::string calibration;  // the calibration file the planner used ("" = built-in priors)
  std::vector<std::string> caveats;
};

// {"tool": "conccl-c3", "version": "0.1.0", "mode", "device", "devices", "ranks", "iters", "warmup",
//  "rounds", "baseline", "calibration", "caveats": [...], "results": [{"scenario", "strategy", "choice",
//  "status", "baseline", "best_fixed", "best_fixed_T_c3_ms", "gemm": {...}, "collective": {...}, "T_g_ms", "T_c_ms", "T_c_own_ms", "T_c3_ms",
//  "T_g_overlap_ms", "T_c_overlap_ms", "gemm_slowdown", "coll_slowdown", "S", "S_ideal", "F", "R", "class",
//  "gemm_bound", "intensity", "coll_bound", "half_peak_bytes", "predicted_T_c3_ms",
//  "min": {same numbers}, "max": {same numbers}, "rounds": {"T_g_ms": [...], "T_c_ms": [...],
//  "T_c_own_ms": [...], "T_c3_ms": [...]}}], "sm_budget": [...]}. Numbers at the top of a result are the
//  medians over the rounds. Undefined numbers are null.
std::string resultsToJson(const RunInfo& info, const std::vector<ResultRow>& rows,
                          const std::vector<SmBudgetRow>& smRows = {});
void writeResultsJson(const std::string& path, const RunInfo& info, const std::vector<ResultRow>& rows,
                      const std::vector<SmBudgetRow>& smRows = {});

// "1.00 MiB", "256 MiB", "1.50 GiB": sizes for humans.
std::string formatBytes(double bytes);

}  // namespace conccl::c3
