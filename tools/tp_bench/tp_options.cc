#include "tp_options.h"

#include <algorithm>

#include "base/error.h"

namespace conccl::tp {

void addTpOptions(CLI::App& app, TpOptions& o) {
  app.add_option("-g,--ranks", o.ranks, "Tensor parallelism: ranks, one per GPU (0 = every visible GPU)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--devices", o.devices, "CUDA devices of ranks 0..tp-1, comma-separated (default 0..tp-1)")
      ->delimiter(',');
  app.add_option("--models", o.models, "Models of the builtin table, comma-separated: llama3-70b, llama3-405b")
      ->delimiter(',');
  app.add_option("--tokens", o.tokens, "Tokens (GEMM rows m) of the builtin table, comma-separated")->delimiter(',');
  app.add_option("--ops", o.ops, "ag-gemm (ag) and/or gemm-rs (rs), comma-separated")->delimiter(',');
  app.add_option("--shapes", o.shapes,
                 "Explicit shapes instead of the model table: ag:MxNxK or rs:MxNxK (one rank's GEMM: "
                 "AG m x ffn/tp x hidden, RS m x hidden x ffn/tp), comma-separated")
      ->delimiter(',');
  app.add_option("--strategies", o.strategies,
                 "Comma-separated: gemm, coll, serial-nccl, nccl-split, conccl-fused, or all")
      ->delimiter(',');
  app.add_option("--iters", o.iters, "Timed iterations per shape and strategy (median, min, max reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "Untimed iterations before the timed ones")->check(CLI::NonNegativeNumber);
  app.add_option("--json", o.jsonPath, "Write one JSON object per row (JSON lines) to FILE");
  app.add_flag("--check", o.check,
               "Compare nccl-split's and conccl-fused's results with serial-nccl's on random data; a failed check "
               "makes the exit status non-zero");
  app.add_option("--tolerance", o.tolerance, "--check: largest relative error (max|diff| / max|ref|) that passes")
      ->check(CLI::PositiveNumber);
  app.add_option("--conccl-engine", o.concclEngine,
                 "conccl's engine: copy (no SM moves data, the default beside a GEMM) or auto (see concclEngine_t)")
      ->check(CLI::IsMember({"copy", "auto"}));
  app.add_option("--timeout", o.timeoutS, "Seconds a wait for the GPUs may take before it is an error")
      ->check(CLI::PositiveNumber);
  app.add_flag("--list", o.list, "Print the selected shapes (and the skipped ones) and exit; needs no GPU");
}

void validateTpOptions(const TpOptions& o) {
  CONCCL_REQUIRE(o.iters >= 1, "--iters must be >= 1");
  CONCCL_REQUIRE(o.warmup >= 0, "--warmup must be >= 0");
  CONCCL_REQUIRE(o.ranks >= 0 && o.ranks <= 64, "--ranks must be in 0..64");
  CONCCL_REQUIRE(o.tolerance > 0, "--tolerance must be > 0");
  CONCCL_REQUIRE(o.timeoutS > 0, "--timeout must be > 0");
  CONCCL_REQUIRE(o.concclEngine == "copy" || o.concclEngine == "auto", "--conccl-engine must be copy or auto");
  for (int d : o.devices) CONCCL_REQUIRE(d >= 0, "--devices: device ids must be >= 0");
  CONCCL_REQUIRE(
      o.devices.empty() || o.ranks == 0 || int(o.devices.size()) == o.ranks,
      "--devices lists " + std::to_string(o.devices.size()) + " devices but --ranks is " + std::to_string(o.ranks));
  std::vector<int> sorted = o.devices;
  std::sort(sorted.begin(), sorted.end());
  CONCCL_REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                 "--devices: each rank needs a GPU of its own (NCCL refuses two ranks on one GPU)");
  for (const std::string& m : o.models)
    CONCCL_REQUIRE(findModel(m).has_value(), "--models: unknown model '" + m + "' (llama3-70b, llama3-405b)");
  for (int64_t t : o.tokens) CONCCL_REQUIRE(t > 0, "--tokens: token counts must be > 0");
  for (const std::string& op : o.ops)
    CONCCL_REQUIRE(parseOp(op).has_value(), "--ops: unknown op '" + op + "' (ag-gemm, gemm-rs)");
  (void)selectedStrategies(o);  // throws on an unknown name
  for (const std::string& s : o.shapes) {
    CONCCL_REQUIRE(parseShapeSpec(s, 1).has_value(), "--shapes: '" + s + "' is not ag:MxNxK or rs:MxNxK");
  }
}

std::vector<Strategy> selectedStrategies(const TpOptions& o) {
  std::vector<Strategy> wanted;
  for (const std::string& name : o.strategies) {
    if (name == "all") return allStrategies();
    const std::optional<Strategy> s = parseStrategy(name);
    CONCCL_REQUIRE(s.has_value(), "--strategies: unknown strategy '" + name +
                                      "' (gemm, coll, serial-nccl, nccl-split, conccl-fused, all)");
    wanted.push_back(*s);
  }
  CONCCL_REQUIRE(!wanted.empty(), "--strategies: none given");
  std::vector<Strategy> out;  // the table's order, each once
  for (Strategy s : allStrategies()) {
    if (std::find(wanted.begin(), wanted.end(), s) != wanted.end()) out.push_back(s);
  }
  return out;
}

ShapeSelection selectShapes(const TpOptions& o, int tp) {
  if (!o.shapes.empty()) return customShapes(o.shapes, tp);
  std::vector<ModelDims> models;
  for (const std::string& m : o.models) {
    const std::optional<ModelDims> d = findModel(m);
    CONCCL_REQUIRE(d.has_value(), "--models: unknown model '" + m + "'");
    models.push_back(*d);
  }
  std::vector<TpOp> ops;
  for (const std::string& name : o.ops) {
    const std::optional<TpOp> op = parseOp(name);
    CONCCL_REQUIRE(op.has_value(), "--ops: unknown op '" + name + "'");
    if (std::find(ops.begin(), ops.end(), *op) == ops.end()) ops.push_back(*op);
  }
  ShapeSelection out = builtinShapes(models, o.tokens, ops, tp);
  return out;
}

}  // namespace conccl::tp
