// conccl-c3: characterises concurrent computation and communication (C3): for each scenario (a GEMM beside
// a collective) and strategy, in interleaved rounds, T_g, the baseline's (NCCL's) T_c, the strategy's own
// T_c, T_c3, slowdowns, S, S_ideal, F, the overlap ratio R and the ConCCL taxonomy; `auto` rows from the
// planner; `--calibrate` measures the planner's slowdowns. See docs/c3.md.
#include <conccl/conccl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "c3/calibration.h"
#include "c3/report.h"
#include "c3_options.h"
#include "base/error.h"

#ifdef CONCCL_HAVE_CUDA
#include "gpu_runner.h"
#endif

#ifndef CONCCL_C3_PLOT_SCRIPT
#define CONCCL_C3_PLOT_SCRIPT "tools/c3/plot_c3.py"
#endif

namespace {

using namespace conccl::c3;

// Single-quotes a path for /bin/sh.
std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The plot script: $CONCCL_C3_PLOT_SCRIPT, else the copy next to the executable, else the source tree's.
std::string plotScript(const char* argv0) {
  if (const char* env = std::getenv("CONCCL_C3_PLOT_SCRIPT"); env != nullptr && *env) return env;
  std::error_code ec;
  const std::filesystem::path beside = std::filesystem::path(argv0).parent_path() / "plot_c3.py";
  if (std::filesystem::exists(beside, ec)) return beside.string();
  return CONCCL_C3_PLOT_SCRIPT;
}

[[maybe_unused]] int writeOutputs(const C3Options& o, const char* argv0, const RunInfo& info,
                                  const std::vector<ResultRow>& rows, const std::vector<SmBudgetRow>& smRows) {
  std::string jsonPath = o.jsonPath;
  if (jsonPath.empty() && !o.plotPath.empty()) jsonPath = o.plotPath + ".json";  // the plot reads the JSON
  if (!jsonPath.empty()) {
    writeResultsJson(jsonPath, info, rows, smRows);
    std::printf("# wrote %s\n", jsonPath.c_str());
  }
  if (!o.plotPath.empty()) {
    const std::string cmd =
        "python3 " + shellQuote(plotScript(argv0)) + " " + shellQuote(jsonPath) + " " + shellQuote(o.plotPath);
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "conccl-c3: plotting failed (%s); is matplotlib installed (pip install matplotlib)?\n",
                   cmd.c_str());
      return 1;
    }
    std::printf("# wrote %s\n", o.plotPath.c_str());
  }
  return 0;
}

[[maybe_unused]] void printInfo(const RunInfo& info) {
  std::printf("# conccl-c3 %d.%d.%d  mode %s  device %s  ranks %d  rounds %d  iters %d  warmup %d  baseline %s\n",
              CONCCL_MAJOR, CONCCL_MINOR, CONCCL_PATCH, info.mode.c_str(), info.device.c_str(), info.ranks,
              info.rounds, info.iters, info.warmup, info.baseline.c_str());
  for (const std::string& c : info.caveats) std::printf("# caveat: %s\n", c.c_str());
  std::fflush(stdout);
}

int run(const C3Options& o, const char* argv0) {
  validateOptions(o);
  // A bad calibration file fails here, before any GPU work.
  const std::optional<Calibration> calibration =
      o.calibrationFile.empty() ? std::nullopt : std::optional<Calibration>(loadCalibration(o.calibrationFile));
  const std::vector<Scenario> scenarios = selectScenarios(o);
  if (!o.saveScenariosPath.empty()) {
    saveScenarios(o.saveScenariosPath, scenarios);
    std::printf("# wrote %s\n", o.saveScenariosPath.c_str());
  }
  if (o.listGrid) {
    std::fputs(formatGrid(scenarios, MachineProfile::h200(), calibration ? &*calibration : nullptr).c_str(), stdout);
    return 0;
  }
#ifdef CONCCL_HAVE_CUDA
  auto onRow = [](const ResultRow& r) {
    std::fputs(formatTableRow(r).c_str(), stdout);
    std::fflush(stdout);
  };
  GpuRunOutput out;
  if (o.smSweep) {
    bool smHeaderDone = false;
    bool headerDone = false;
    auto onSmRow = [&](const SmBudgetRow& r) {
      std::string text = formatSmBudgetTable({r});
      if (smHeaderDone) text = text.substr(text.find('\n') + 1);  // the header once
      smHeaderDone = true;
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    };
    auto onProxyRow = [&](const ResultRow& r) {
      if (!headerDone) std::fputs(("\n" + formatTableHeader()).c_str(), stdout);
      headerDone = true;
      onRow(r);
    };
    out = runSmSweep(o, scenarios, printInfo, onSmRow, onProxyRow);
  } else {
    auto onInfo = [](const RunInfo& info) {
      printInfo(info);
      std::fputs(formatTableHeader().c_str(), stdout);
    };
    out = o.calibrateFile.empty() ? runC3(o, scenarios, onInfo, onRow) : runCalibration(o, onInfo, onRow);
    std::fputs(formatSummary(out.rows).c_str(), stdout);
    if (!o.calibrateFile.empty()) {
      saveCalibration(o.calibrateFile, calibrationFromRows(out.rows), out.info.device, out.info.ranks);
      std::printf("# wrote %s (use it with --calibration %s)\n", o.calibrateFile.c_str(), o.calibrateFile.c_str());
    }
  }
  return writeOutputs(o, argv0, out.info, out.rows, out.smRows);
#else
  (void)argv0;
  std::fprintf(stderr,
               "conccl-c3: error: measuring needs a CUDA GPU, and this conccl-c3 was built without CUDA "
               "(CONCCL_ENABLE_CUDA=OFF or no nvcc). --list-grid and --help work without one.\n");
  return 2;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conccl-c3: GEMM + collective overlap (C3) characterisation; see docs/c3.md"};
  C3Options options;
  addC3Options(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options, argv[0]);
  } catch (const conccl::Error& e) {
    std::fprintf(stderr, "conccl-c3: error: %s\n", e.what());
    return e.code() == concclInvalidArgument ? 1 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conccl-c3: error: %s\n", e.what());
    return 3;
  }
}
