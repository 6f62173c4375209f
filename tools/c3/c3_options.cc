#include "c3_options.h"

#include "base/error.h"

namespace conccl::c3 {

void addC3Options(CLI::App& app, C3Options& o) {
  app.add_option("-g,--ranks", o.ranks, "Ranks (GPUs) of the collective; 0 = all visible GPUs (at most 8)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--devices", o.devices, "CUDA devices of ranks 0..g-1, comma-separated (default 0..g-1)")
      ->delimiter(',');
  app.add_option("--strategies", o.strategies,
                 "Comma-separated: serial,nccl,nccl+SP,nccl+RP,nccl-ce,conccl,conccl+RP,auto, or all (default: all "
                 "that are available, and auto)");
  app.add_option("--scenarios", o.scenariosFile, "Scenario JSON file (see docs/c3.md) instead of --grid");
  app.add_option("--grid", o.grid, "Built-in grid: builtin or small")->check(CLI::IsMember({"builtin", "small"}));
  app.add_option("--filter", o.filter, "Only scenarios whose name contains this string");
  app.add_option("--rounds", o.rounds,
                 "Interleaved rounds per scenario and strategy (T_g, T_c, own T_c, T_c3, T_g, ...); median and "
                 "range over the rounds are reported")
      ->check(CLI::PositiveNumber);
  app.add_option("--iters", o.iters, "Gated runs per measurement in a round (their median is the round's value)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "Untimed runs of each measurement before the first round")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--calibration", o.calibrationFile,
                 "Calibration file (from --calibrate) for the planner: auto's pick and predicted_T_c3 (default: "
                 "built-in priors)");
  app.add_option("--calibrate", o.calibrateFile,
                 "Measure the calibration scenarios (per GEMM bound and collective kind, every strategy) and write "
                 "the slowdowns to FILE, instead of a grid");
  app.add_option("--json", o.jsonPath, "Write the results as JSON to FILE");
  app.add_option("--plot", o.plotPath, "Write a bar chart of F (PNG) via tools/c3/plot_c3.py (needs matplotlib)");
  app.add_option("--save-scenarios", o.saveScenariosPath, "Write the selected scenarios as JSON to FILE");
  app.add_flag("--sm-sweep", o.smSweep,
               "One-GPU mode: GEMM time vs SM budget, and GEMMs beside an SM-collective proxy");
  app.add_flag("--list-grid", o.listGrid, "Print the selected scenarios with their classification and exit");
  app.add_option("--rp-coll-ctas", o.rpCollCtas, "RP strategies: CTAs of the collective (NCCL maxCTAs)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--rp-gemm-sms", o.rpGemmSms, "RP strategies: GEMM SM-count target (0 = SMs - rp-coll-ctas for nccl+RP, SMs - concclCallResources().sms for conccl+RP)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sweep-sms", o.sweepSms, "--sm-sweep: SM budgets of the GEMM")->delimiter(',');
  app.add_option("--sweep-copy-ctas", o.sweepCopyCtas, "--sm-sweep: CTAs of the SM copy kernel proxy")->delimiter(',');
}

void validateOptions(const C3Options& o) {
  CONCCL_REQUIRE(o.iters >= 1, "--iters must be >= 1");
  CONCCL_REQUIRE(o.rounds >= 1, "--rounds must be >= 1");
  CONCCL_REQUIRE(o.calibrateFile.empty() || !o.smSweep, "--calibrate needs GPUs of their own, not --sm-sweep");
  CONCCL_REQUIRE(o.warmup >= 0, "--warmup must be >= 0");
  CONCCL_REQUIRE(o.ranks >= 0 && o.ranks <= 64, "--ranks must be in 0..64");
  for (int d : o.devices) CONCCL_REQUIRE(d >= 0, "--devices: device ids must be >= 0");
  CONCCL_REQUIRE(
      o.devices.empty() || o.ranks == 0 || int(o.devices.size()) == o.ranks,
      "--devices lists " + std::to_string(o.devices.size()) + " devices but --ranks is " + std::to_string(o.ranks));
  for (int s : o.sweepSms) CONCCL_REQUIRE(s >= 1, "--sweep-sms: budgets must be >= 1");
  for (int c : o.sweepCopyCtas) CONCCL_REQUIRE(c >= 1, "--sweep-copy-ctas: CTA counts must be >= 1");
  (void)selectedStrategies(o);  // throws on an unknown name
}

std::vector<Strategy> selectedStrategies(const C3Options& o) { return parseStrategyList(o.strategies); }

std::vector<Scenario> selectScenarios(const C3Options& o) {
  std::vector<Scenario> all;
  if (!o.scenariosFile.empty()) {
    all = loadScenarios(o.scenariosFile);
  } else {
    std::optional<std::vector<Scenario>> grid = gridByName(o.grid);
    CONCCL_REQUIRE(grid.has_value(), "unknown grid '" + o.grid + "' (builtin, small)");
    all = std::move(*grid);
  }
  std::vector<Scenario> out;
  for (Scenario& s : all) {
    if (o.filter.empty() || s.name.find(o.filter) != std::string::npos) out.push_back(std::move(s));
  }
  CONCCL_REQUIRE(!out.empty(), "no scenario matches --filter '" + o.filter + "'");
  return out;
}

}  // namespace conccl::c3
