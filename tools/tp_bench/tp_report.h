// conccl-tp-bench's rows: the strategies, one result per shape and strategy, the derived columns (ideal, time/ideal,
// speedup over serial NCCL, TFLOP/s), the text table (stdout) and the JSON-lines objects. Pure C++: unit-tested on
// the CPU (tests/unit/tp_bench/test_tp_report.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tp_shapes.h"
#include "tp_stats.h"

namespace conccl::tp {

// What is measured per shape, in this order (docs/tp-bench.md says what each one runs).
enum class Strategy {
  kGemm,         // the rank's GEMM alone
  kColl,         // the NCCL collective alone (all-gather / reduce-scatter)
  kSerialNccl,   // NCCL collective then the GEMM (GEMM then NCCL reduce-scatter): the baseline
  kNcclSplit,    // NCCL with the GEMM split by hand per shard / block on two streams
  kConcclFused,  // conccl::ops::AllGatherMatmul / MatmulReduceScatter
};
const std::vector<Strategy>& allStrategies();
const char* strategyName(Strategy s);  // "gemm", "coll", "serial-nccl", "nccl-split", "conccl-fused"
std::optional<Strategy> parseStrategy(std::string_view name);

// One shape x strategy.
struct TpRow {
  TpShape shape;
  Strategy strategy = Strategy::kGemm;
  std::vector<double> timesMs;       // per timed iteration
  Summary time;                      // of timesMs
  std::optional<double> idealMs;     // max(T_gemm, T_coll) medians, when both were measured
  std::optional<double> vsIdeal;     // time.median / ideal
  std::optional<double> speedup;     // serial-nccl median / time.median
  double tflops = 0;                 // per GPU, at the median time
  std::optional<double> checkError;  // --check: relative error against serial-nccl (tp_stats.h)
  bool checkFailed = false;
  std::string error;  // non-empty: the strategy failed (the row has no times)
};

// Fills time, ideal, vsIdeal, speedup and tflops of one shape's rows (rows with an error keep only the error).
void finalizeShapeRows(std::vector<TpRow>& rows);

// The text table: a header (two '#' lines) and one line per row.
std::string formatTableHeader();
std::string formatTableRow(const TpRow& row);

// One JSON object per row (schema in docs/tp-bench.md), with the raw per-iteration times.
nlohmann::json jsonRow(const TpRow& row, const std::string& device);
// A shape that was not run (does not fit, not divisible): {"tool", "shape": what, "skipped": reason}.
nlohmann::json jsonSkipped(const std::string& what, const std::string& reason);

}  // namespace conccl::tp
