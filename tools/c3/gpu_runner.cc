// Runs conccl-c3's measurements and turns them into report rows: the grid (runC3), the calibration
// (runCalibration) and the one-GPU sweep (runSmSweep). How a GEMM, a collective or a strategy runs, the start
// gate and the rounds live in their own files (see gpu_runner.h).
#include "gpu_runner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "c3/calibration.h"
#include "c3/planner.h"
#include "c3_check.h"
#include "green_context.h"
#include "harness.h"
#include "rounds.h"
#include "strategy_exec.h"

namespace conccl::c3 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* kOneGpuCaveat =
    "on one GPU every device-to-device copy runs on SMs (FACTS.md, probe 1), so conccl's copy-engine benefit "
    "cannot be shown here: same-GPU conccl rows are correctness/SM-budget data, not copy-engine results";

struct DeviceSetup {
  std::vector<int> rankDevices;
  int sms = 132;
  std::string name;
};

DeviceSetup resolveDevices(const C3Options& o, bool oneGpu) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    CONCCL_THROW(concclSystemError, std::string("conccl-c3 needs a CUDA GPU: ") +
                                        (e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found"));
  }
  DeviceSetup s;
  if (!o.devices.empty()) {
    s.rankDevices = o.devices;
  } else if (oneGpu) {
    s.rankDevices.assign(size_t(o.ranks > 0 ? o.ranks : 4), 0);  // ranks share GPU 0
  } else {
    const int ranks = o.ranks > 0 ? o.ranks : std::min(count, 8);
    for (int r = 0; r < ranks; ++r) s.rankDevices.push_back(r);
  }
  if (oneGpu) s.rankDevices.assign(s.rankDevices.size(), s.rankDevices.front());
  for (int d : s.rankDevices) {
    CONCCL_REQUIRE(d < count, "device " + std::to_string(d) + " does not exist (" + std::to_string(count) +
                                  " CUDA devices; use --devices or --ranks)");
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, s.rankDevices.front()));
  s.sms = prop.multiProcessorCount;
  s.name = prop.name;
  return s;
}

RoundsConfig roundsConfig(const C3Options& o) { return {o.rounds, o.iters, o.warmup}; }

// The GEMMs of one scenario: one per distinct device, per SM target, made on first use.
class GemmSets {
 public:
  GemmSets(const std::vector<int>& devices, const GemmShape& shape) : devices_(devices), shape_(shape) {}
  std::vector<const Gemm*> get(int smTarget) {
    auto& set = sets_[smTarget];
    if (set.empty()) {
      for (int d : devices_) set.push_back(std::make_unique<Gemm>(d, shape_, smTarget));
    }
    std::vector<const Gemm*> v;
    for (auto& g : set) v.push_back(g.get());
    return v;
  }

 private:
  std::vector<int> devices_;
  GemmShape shape_;
  std::map<int, std::vector<std::unique_ptr<Gemm>>> sets_;
};

// The planner over one scenario's measured rows: each fixed row gets the model's T_c3 (from its measured T_g,
// baseline T_c, own T_c and the calibration; never from its T_c3), and the auto row is the measured row of
// the strategy with the least predicted T_c3.
ResultRow planScenario(const Scenario& s, std::vector<ResultRow*> rows, const Calibration& calibration,
                       const MachineProfile& machine, double halfPeak) {
  std::vector<Strategy> candidates;
  std::map<Strategy, double> own;
  std::vector<double> tG, tC;
  for (ResultRow* r : rows) {
    const std::optional<Strategy> st = parseStrategy(r->strategy);
    if (!r->ok() || !st) continue;
    candidates.push_back(*st);
    own[*st] = r->metrics.tCOwn;
    tG.push_back(r->metrics.tG);
    tC.push_back(r->metrics.tC);
  }
  if (candidates.empty()) {
    return makeSkippedRow(s, strategyName(Strategy::kAuto),
                          "skipped: auto picks among the measured strategies, and none was measured", machine, halfPeak);
  }
  const Plan p = plan(s.gemm, s.coll, medianOf(tG), medianOf(tC), calibration, candidates, machine, own);
  const ResultRow* chosen = nullptr;
  const ResultRow* fastest = nullptr;
  for (ResultRow* r : rows) {
    if (!r->ok()) continue;
    for (const Prediction& pr : p.predictions) {
      if (strategyName(pr.strategy) == r->strategy) r->predictedTC3 = pr.tC3;
    }
    if (r->strategy == strategyName(p.best)) chosen = r;
    if (fastest == nullptr || r->metrics.tC3 < fastest->metrics.tC3) fastest = r;
  }
  if (chosen == nullptr) {
    return makeSkippedRow(s, strategyName(Strategy::kAuto), "skipped: the planner found no candidate", machine,
                          halfPeak);
  }
  ResultRow autoRow = *chosen;
  autoRow.strategy = strategyName(Strategy::kAuto);
  autoRow.choice = chosen->strategy;
  autoRow.bestFixed = fastest->strategy;
  autoRow.bestFixedTC3 = fastest->metrics.tC3;
  return autoRow;
}

// The grid or the calibration scenarios on `setup`'s GPUs.
GpuRunOutput runScenarios(const C3Options& o, const DeviceSetup& setup, const std::vector<Scenario>& scenarios,
                          const std::string& mode, const InfoCallback& onInfo, const RowCallback& onRow) {
  const int ranks = int(setup.rankDevices.size());
  const bool sharedGpu = std::set<int>(setup.rankDevices.begin(), setup.rankDevices.end()).size() != size_t(ranks);
  const MachineProfile machine = MachineProfile::h200();
  const CommProfile comm;
  const Calibration calibration = o.calibrationFile.empty() ? Calibration::defaults() : loadCalibration(o.calibrationFile);

  std::vector<Strategy> strategies = selectedStrategies(o);
  const bool wantAuto = std::find(strategies.begin(), strategies.end(), Strategy::kAuto) != strategies.end();
  std::erase(strategies, Strategy::kAuto);
  if (mode == "calibrate" && strategies.empty()) strategies = allStrategies();

  Backends backends(setup.rankDevices, {setup.sms, o.rpCollCtas, o.rpGemmSms});

  GpuRunOutput out;
  out.info.mode = mode;
  out.info.device =
      std::to_string(std::set<int>(setup.rankDevices.begin(), setup.rankDevices.end()).size()) + "x " + setup.name;
  out.info.devices = setup.rankDevices;
  out.info.ranks = ranks;
  out.info.iters = o.iters;
  out.info.warmup = o.warmup;
  out.info.rounds = o.rounds;
  out.info.baseline = backends.baselineName();
  out.info.calibration = o.calibrationFile;
  if (sharedGpu || ranks == 1) out.info.caveats.push_back(kOneGpuCaveat);
  if (!backends.noNcclReason().empty()) {
    out.info.caveats.push_back("baseline T_c is conccl's, because NCCL is absent: " + backends.noNcclReason());
  }
  out.info.caveats.push_back(
      "S, S_ideal, F, R and the class use the baseline's T_c for every strategy; own(ms) is the strategy's own "
      "collective alone. T_g is the GEMM alone on all SMs for every strategy, so RP rows' GEMM slowdown includes "
      "the cost of the SM budget; coll bound uses the alpha-beta model's half-peak size (docs/c3.md)");
  if (wantAuto) {
    out.info.caveats.push_back(
        "auto rows repeat the measured rounds of the strategy the planner picks from T_g, each strategy's own T_c "
        "and the calibration (" +
        (o.calibrationFile.empty() ? std::string("built-in priors") : o.calibrationFile) + "), never from T_c3");
  }
  if (onInfo) onInfo(out.info);

  Harness harness(setup.rankDevices);
  for (const Scenario& base : scenarios) {
    Scenario s = base;
    s.coll.ranks = ranks;  // bytes stay what nccl-tests counts per rank; the per-call count follows the ranks
    const double halfPeak = modelHalfPeakSize(s.coll.kind, ranks, comm);
    const size_t first = out.rows.size();
    auto emit = [&](ResultRow row) {
      row.baseline = backends.baselineName();
      if (onRow) onRow(row);
      out.rows.push_back(std::move(row));
    };
    auto emitAll = [&](const std::string& status) {
      for (Strategy st : strategies) emit(makeSkippedRow(s, strategyName(st), status, machine, halfPeak));
    };
    if (s.coll.callCount() == 0) {
      emitAll("skipped: too few bytes for the ranks");
      continue;
    }
    try {
      GemmSets gemms(harness.devices(), s.gemm);
      const std::vector<const Gemm*> full = gemms.get(0);
      const std::unique_ptr<Collective> baseline = backends.baseline(s.coll);
      for (Strategy st : strategies) {
        const std::string name = strategyName(st);
        try {
          const StrategyRun run = backends.prepare(st, s.coll);
          if (!run.coll) {
            emit(makeSkippedRow(s, name, run.unavailable, machine, halfPeak));
            continue;
          }
          const std::vector<RoundTimes> rounds =
              measureRounds(harness, full, gemms.get(run.gemmSmTarget), *baseline, run, roundsConfig(o));
          emit(makeRow(s, name, summarizeRounds(rounds), machine, halfPeak));
        } catch (const Error& e) {
          emit(makeSkippedRow(s, name, std::string("error: ") + e.what(), machine, halfPeak));
        }
      }
    } catch (const Error& e) {  // the GEMM or the baseline failed: every strategy of the scenario
      emitAll(std::string("error: ") + e.what());
      continue;
    }
    std::vector<ResultRow*> rows;
    for (size_t i = first; i < out.rows.size(); ++i) rows.push_back(&out.rows[i]);
    ResultRow autoRow = planScenario(s, rows, calibration, machine, halfPeak);
    if (wantAuto) emit(std::move(autoRow));
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
GpuRunOutput runC3(const C3Options& o, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                   const RowCallback& onRow) {
  return runScenarios(o, resolveDevices(o, false), scenarios, "c3", onInfo, onRow);
}

GpuRunOutput runCalibration(const C3Options& o, const InfoCallback& onInfo, const RowCallback& onRow) {
  const DeviceSetup setup = resolveDevices(o, false);
  return runScenarios(o, setup, calibrationScenarios(int(setup.rankDevices.size())), "calibrate", onInfo, onRow);
}

// ---------------------------------------------------------------------------------------------------
GpuRunOutput runSmSweep(const C3Options& o, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                        const SmRowCallback& onSmRow, const RowCallback& onRow) {
  const DeviceSetup setup = resolveDevices(o, true);
  const int device = setup.rankDevices.front();
  const MachineProfile machine = MachineProfile::h200();
  const CommProfile comm;

  GpuRunOutput out;
  out.info.mode = "sm-sweep";
  out.info.device = "1x " + setup.name;
  out.info.devices = {device};
  out.info.ranks = int(setup.rankDevices.size());
  out.info.iters = o.iters;
  out.info.warmup = o.warmup;
  out.info.rounds = o.rounds;
  out.info.baseline = "own";
  out.info.caveats.push_back(kOneGpuCaveat);
  out.info.caveats.push_back(
      "sm-copy:<n>cta rows are an SM-collective proxy: a copy kernel with n CTAs moving the collective's bytes "
      "within the GPU; NCCL cannot run two ranks on one GPU, so every row's baseline T_c is its own collective");
  if (onInfo) onInfo(out.info);

  Harness single({device});
  exec::DeviceGuard guard(device);
  const exec::Stream stream = exec::Stream::createNonBlocking(0);
  const exec::Event t0 = exec::Event::createForTiming(), t1 = exec::Event::createForTiming();
  auto timeOn = [&](const Gemm& g, cudaStream_t st) {
    for (int i = 0; i < std::max(1, o.warmup); ++i) g.enqueue(st);
    std::vector<double> v;
    for (int i = 0; i < o.iters * o.rounds; ++i) {
      CUDA_CHECK(cudaEventRecord(t0.get(), st));
      g.enqueue(st);
      CUDA_CHECK(cudaEventRecord(t1.get(), st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      v.push_back(elapsedSeconds(t0, t1));
    }
    return medianOf(v);
  };

  // 1. GEMM time vs SM budget, once per distinct GEMM shape.
  std::vector<GemmShape> seen;
  for (const Scenario& s : scenarios) {
    if (std::find(seen.begin(), seen.end(), s.gemm) != seen.end()) continue;
    seen.push_back(s.gemm);
    auto emit = [&](SmBudgetRow r) {
      if (onSmRow) onSmRow(r);
      out.smRows.push_back(std::move(r));
    };
    double full = kNaN;
    try {
      const Gemm g(device, s.gemm, 0);
      full = timeOn(g, stream.get());
      emit({s.name, s.gemm, "full", setup.sms, full, 1.0, "ok"});
    } catch (const Error& e) {
      emit({s.name, s.gemm, "full", setup.sms, kNaN, kNaN, std::string("error: ") + e.what()});
      continue;
    }
    for (int sms : o.sweepSms) {
      if (sms >= setup.sms) continue;  // the full GPU is the baseline row
      try {
        const Gemm g(device, s.gemm, sms);
        const double t = timeOn(g, stream.get());
        emit({s.name, s.gemm, "sm-target", sms, t, t / full, "ok"});
      } catch (const Error& e) {
        emit({s.name, s.gemm, "sm-target", sms, kNaN, kNaN, std::string("error: ") + e.what()});
      }
      for (bool withTarget : {false, true}) {
        const char* method = withTarget ? "green-ctx+target" : "green-ctx";
        try {
          const GreenContext green(device, sms);
          const Gemm g(device, s.gemm, withTarget ? green.sms() : 0);
          const double t = timeOn(g, green.stream());
          emit({s.name, s.gemm, method, green.sms(), t, t / full, "ok"});
        } catch (const Error& e) {
          emit({s.name, s.gemm, method, sms, kNaN, kNaN, std::string("error: ") + e.what()});
        }
      }
    }
  }

  // 2. Each GEMM beside SM-collective proxies, and beside conccl with the ranks sharing this GPU, in rounds
  // whose baseline is the row's own collective.
  std::unique_ptr<ConcclComms> conccl;
  std::string concclError;
  try {
    conccl = std::make_unique<ConcclComms>(setup.rankDevices);
  } catch (const Error& e) {
    concclError = e.what();
  }
  Harness shared(setup.rankDevices);
  for (const Scenario& base : scenarios) {
    Scenario s = base;
    const double halfPeak = modelHalfPeakSize(s.coll.kind, s.coll.ranks, comm);
    auto emit = [&](ResultRow r) {
      r.baseline = "own";
      if (onRow) onRow(r);
      out.rows.push_back(std::move(r));
    };
    std::unique_ptr<Gemm> gemm;
    try {
      gemm = std::make_unique<Gemm>(device, s.gemm, 0);
    } catch (const Error& e) {
      emit(makeSkippedRow(s, "gemm", std::string("error: ") + e.what(), machine, halfPeak));
      continue;
    }
    auto measure = [&](Harness& h, const std::string& name, std::unique_ptr<Collective> coll) {
      StrategyRun run;
      run.coll = std::move(coll);
      run.ownIsBaseline = true;
      const std::vector<RoundTimes> rounds = measureRounds(h, {gemm.get()}, {gemm.get()}, *run.coll, run, roundsConfig(o));
      emit(makeRow(s, name, summarizeRounds(rounds), machine, halfPeak));
    };
    for (int ctas : o.sweepCopyCtas) {
      const std::string name = "sm-copy:" + std::to_string(ctas) + "cta";
      try {
        measure(single, name, makeSmCopyCollective(device, s.coll.bytes, ctas));
      } catch (const Error& e) {
        emit(makeSkippedRow(s, name, std::string("error: ") + e.what(), machine, halfPeak));
      }
    }
    const std::string name = "conccl:1gpu-" + std::to_string(setup.rankDevices.size()) + "r";
    if (!conccl) {
      emit(makeSkippedRow(s, name, "skipped: conccl: " + concclError, machine, halfPeak));
      continue;
    }
    try {
      s.coll.ranks = int(setup.rankDevices.size());
      CONCCL_REQUIRE(s.coll.callCount() > 0, "too few bytes for the ranks");
      measure(shared, name, makeConcclCollective(*conccl, s.coll));
    } catch (const Error& e) {
      emit(makeSkippedRow(s, name, std::string("error: ") + e.what(), machine, halfPeak));
    }
  }
  return out;
}

}  // namespace conccl::c3
