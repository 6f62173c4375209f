// Command-line options of conccl-tp-bench (CLI11), and the selections they make (shapes, strategies). Pure C++:
// unit-tested on the CPU (tests/unit/tp_bench/test_tp_options.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "tp_report.h"
#include "tp_shapes.h"

namespace conccl::tp {

struct TpOptions {
  int ranks = 0;             // tensor parallelism = ranks = GPUs; 0: every visible GPU
  std::vector<int> devices;  // CUDA devices of ranks 0..tp-1; empty: 0..tp-1
  std::vector<std::string> models = {"llama3-70b", "llama3-405b"};
  std::vector<int64_t> tokens = {2048, 4096, 8192, 16384};
  std::vector<std::string> ops = {"ag-gemm", "gemm-rs"};
  std::vector<std::string> shapes;  // "ag:MxNxK" / "rs:MxNxK": replace the model table when given
  std::vector<std::string> strategies = {"all"};
  int iters = 20;
  int warmup = 5;
  std::string jsonPath;  // JSON lines, one object per row
  bool check = false;
  double tolerance = kDefaultBf16Tolerance;
  // conccl's data path: "copy" (no SM moves data, as beside a GEMM it must; conccl-c3 uses it too) or "auto"
  // (small calls and a rank's own block on SMs); see concclEngine_t.
  std::string concclEngine = "copy";
  double timeoutS = 120;  // a wait for the GPUs longer than this is an error (no hang)
  bool list = false;      // print the selected shapes and exit (no GPU needed)
};

// Registers every option on `app`, bound to `options`.
void addTpOptions(CLI::App& app, TpOptions& options);

// Checks what CLI11 cannot (known model, op and strategy names, devices vs ranks, ...); throws
// conccl::Error(concclInvalidArgument).
void validateTpOptions(const TpOptions& options);

// The strategies to run, in the table's order (allStrategies()), for the names given ("all" = every one).
std::vector<Strategy> selectedStrategies(const TpOptions& options);

// The shapes for tensor parallelism tp: --shapes when given, else the model table (--models x --tokens x --ops).
ShapeSelection selectShapes(const TpOptions& options, int tp);

}  // namespace conccl::tp
