// Results of conccl-bench and how they are written: timing statistics, bandwidths, the nccl-tests style
// text rows and the JSON-lines objects. No CUDA types: unit-tested on the CPU.
#ifndef CONCCL_TOOLS_BENCH_REPORT_H_
#define CONCCL_TOOLS_BENCH_REPORT_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"

namespace conccl::bench {

struct TimeStats {
  double mean_s = 0;
  double p50_s = 0;
  double p99_s = 0;
};

// Mean and nearest-rank percentiles of per-iteration times (all zero for an empty input).
TimeStats ComputeStats(std::vector<double> seconds);

// GB/s (10^9 bytes per second) of `bytes` in `seconds`; 0 when the time is not positive.
double AlgBw(size_t bytes, double seconds);

// One variant (out-of-place or in-place) of a row.
struct VariantResult {
  bool present = false;  // false: the collective has no such variant (printed as N/A)
  TimeStats time;
  double algbw = 0;             // GB/s
  double busbw = 0;             // GB/s
  double host_s = 0;            // host time per rank of one launch (median): wall time inside the calls
  std::optional<size_t> wrong;  // nullopt: not checked (-c 0)
  std::string error;            // non-empty: the backend failed
};

struct RowResult {
  std::string backend;
  std::string coll;
  size_t size_bytes = 0;
  size_t count = 0;
  std::string type;
  std::string redop;  // "none" for data movement
  int root = -1;      // -1 when not applicable
  int nranks = 1;
  int threads = 1;  // host threads driving the ranks (-t)
  bool gpus_shared = false;
  SmUsage sms;
  VariantResult out_of_place;
  VariantResult in_place;
};

// The two '#' lines of column titles, and one data row, aligned like nccl-tests' output followed by the
// conccl columns (backend, SMs, p50 and p99 of each variant, then the host time per rank and call of each).
std::vector<std::string> ColumnHeader();
std::string FormatRow(const RowResult& row);
// "4", "<=32", "?"; a '+' marks same-device copies on CUDA's copy kernels (SMs, how many unknown: "1+" = at least
// one), a '!' a copy-engine backend that fell back to SM kernels.
std::string SmLabel(const SmUsage& sms);

// One JSON object per row and variant (schema in docs/bench.md).
nlohmann::json JsonRow(const RowResult& row, bool in_place);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_REPORT_H_
