// Command-line options of conccl-c3, factored out of main() so that parsing and scenario selection are
// unit-tested on the CPU (tests/unit/c3/test_c3_options.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "c3/planner.h"
#include "c3/scenario.h"

namespace conccl::c3 {

struct C3Options {
  int ranks = 0;             // 0: one rank per visible GPU (at most 8), or the devices listed
  std::vector<int> devices;  // CUDA devices of ranks 0..g-1; empty: 0..g-1
  std::string strategies = "all";
  std::string scenariosFile;
  std::string grid = "builtin";
  std::string filter;  // keep scenarios whose name contains this
  int rounds = 5;  // interleaved rounds (T_g, T_c, own T_c, T_c3, T_g, ...) per strategy and scenario
  int iters = 10;  // gated runs per measurement in a round (its median is the round's value)
  int warmup = 2;  // untimed runs of each measurement before the first round
  std::string calibrationFile;  // --calibration: measured slowdowns for the planner (auto, predictions)
  std::string calibrateFile;    // --calibrate: measure the calibration scenarios and write this file
  std::string jsonPath;
  std::string plotPath;
  std::string saveScenariosPath;
  bool smSweep = false;
  bool listGrid = false;
  int rpCollCtas = 8;  // nccl+RP: NCCL maxCTAs; conccl+RP: reduceCtas
  int rpGemmSms = 0;   // RP strategies: GEMM SM-count target (0: SMs - rpCollCtas)
  std::vector<int> sweepSms = {132, 128, 104, 64};
  std::vector<int> sweepCopyCtas = {8, 32, 132};
};

// Registers every option on `app` (bound to `options`).
void addC3Options(CLI::App& app, C3Options& options);

// Checks values CLI11 cannot (iters >= 1, devices >= 0, ...); throws conccl::Error(concclInvalidArgument).
void validateOptions(const C3Options& options);

// The strategies asked for (all known ones for "all"); whether they are available is decided at run time.
std::vector<Strategy> selectedStrategies(const C3Options& options);

// The scenarios to run: --scenarios FILE if given, else --grid, then --filter. Throws on an unknown grid,
// a bad file or an empty selection.
std::vector<Scenario> selectScenarios(const C3Options& options);

}  // namespace conccl::c3
