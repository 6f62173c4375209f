// The sweep of conccl-bench: collectives x types x ops x sizes x backends, timing, checking and reporting.
// Talks to backends through backend.h only, so it is unit-tested on the CPU with a fake backend.
#ifndef CONCCL_TOOLS_BENCH_DRIVER_H_
#define CONCCL_TOOLS_BENCH_DRIVER_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend.h"
#include "options.h"
#include "report.h"

namespace conccl::bench {

struct Outputs {
  std::ostream* table = nullptr;     // the nccl-tests style text (stdout)
  std::ostream* progress = nullptr;  // progress and warnings (stderr); may be null
  std::ostream* json = nullptr;      // JSON lines; may be null
};

// Runs one case (one collective, type, op, size) on one backend and returns its row.
RowResult RunCase(Backend& backend, const BenchOptions& options, const CollDesc& coll, concclDataType_t type, int op,
                  size_t bytes);

// Runs the whole sweep over `backends` (all with options.nranks ranks), writing the text table, the JSON rows
// and progress. `metadata` is written as the first JSON line. Returns the total #wrong (errors count as 1).
size_t RunSweep(const BenchOptions& options, const std::vector<Backend*>& backends, const Outputs& out,
                const nlohmann::json& metadata);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_DRIVER_H_
