// conccl-tp-bench: tensor-parallel dependent overlap on LLaMA-style shapes (issue 15 item 3). One process, one
// host thread, one rank per GPU: for each shape (AG->GEMM up projection, GEMM->RS down projection) it times the
// GEMM alone, the NCCL collective alone, serial NCCL, NCCL with a hand-split GEMM and conccl's fused ops, and
// prints one table row (stdout) and one JSON line (--json) per shape and strategy. See docs/tp-bench.md.
#include <conccl/conccl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "tp_options.h"
#include "tp_report.h"
#include "tp_runner.h"
#include "tp_world.h"

namespace {

using namespace conccl::tp;

// Ranks' devices: --devices, else 0..tp-1 with tp = --ranks or every visible GPU.
std::vector<int> rankDevices(const TpOptions& o) {
  if (!o.devices.empty()) return o.devices;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  CONCCL_REQUIRE(e == cudaSuccess && count > 0,
                 std::string("no CUDA GPU visible (") + cudaGetErrorString(e) + "); --list works without one");
  const int tp = o.ranks > 0 ? o.ranks : count;
  CONCCL_REQUIRE(tp <= count, "--ranks " + std::to_string(tp) + " but only " + std::to_string(count) + " GPUs");
  std::vector<int> devices(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) devices[static_cast<size_t>(r)] = r;
  return devices;
}

int listShapes(const TpOptions& o) {
  int tp = o.ranks > 0 ? o.ranks : int(o.devices.size());
  int count = 0;
  if (tp == 0 && cudaGetDeviceCount(&count) == cudaSuccess && count > 0) tp = count;
  if (tp == 0) {
    tp = 8;
    std::printf("# no GPU visible and no --ranks: listing for tp=8\n");
  }
  const ShapeSelection sel = selectShapes(o, tp);
  std::printf("# tp=%d, bf16; m n k = one rank's GEMM; MiB = buffers per GPU%s\n", tp,
              o.check ? " (with --check)" : "");
  for (const TpShape& s : sel.shapes) {
    std::printf("%-12s %-8s m=%-6lld n=%-6lld k=%-6lld %8.0f MiB %9.2f GFLOP/rank\n", s.model.c_str(), opName(s.op),
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                double(s.bytesPerRank(o.check)) / double(1 << 20), s.flopsPerRank() * 1e-9);
  }
  for (const SkippedShape& s : sel.skipped) std::printf("# skipped: %s: %s\n", s.what.c_str(), s.reason.c_str());
  return 0;
}

int run(const TpOptions& o) {
  validateTpOptions(o);
  if (o.list) return listShapes(o);
  const std::vector<Strategy> strategies = selectedStrategies(o);
  const std::vector<int> devices = rankDevices(o);
  const int tp = int(devices.size());
  const ShapeSelection sel = selectShapes(o, tp);

  std::ofstream json;
  if (!o.jsonPath.empty()) {
    json.open(o.jsonPath);
    CONCCL_REQUIRE(json.good(), "--json: cannot write " + o.jsonPath);
  }
  auto writeJson = [&](const nlohmann::json& j) {
    if (!json.is_open()) return;
    json << j.dump() << '\n';
    json.flush();
  };

  TpWorld world(devices, o.concclEngine == "auto" ? concclEngineAuto : concclEngineCopy, o.timeoutS);
  std::printf("# conccl-tp-bench %d.%d.%d  device %s  tp %d  bf16  iters %d  warmup %d  check %s  conccl engine %s\n",
              CONCCL_MAJOR, CONCCL_MINOR, CONCCL_PATCH, world.deviceName().c_str(), tp, o.iters, o.warmup,
              o.check ? "on" : "off", o.concclEngine.c_str());
  for (const SkippedShape& s : sel.skipped) {
    std::printf("# skipped: %s: %s\n", s.what.c_str(), s.reason.c_str());
    writeJson(jsonSkipped(s.what, s.reason));
  }
  std::fputs(formatTableHeader().c_str(), stdout);
  std::fflush(stdout);

  int failures = 0;
  try {
    for (const TpShape& shape : sel.shapes) {
      if (const std::optional<std::string> why = whyNotFits(world, shape, o.check)) {
        std::printf("# skipped: %s: %s\n", shape.label().c_str(), why->c_str());
        writeJson(jsonSkipped(shape.label(), *why));
        continue;
      }
      for (const TpRow& row : runShape(world, shape, strategies, o)) {
        std::fputs(formatTableRow(row).c_str(), stdout);
        writeJson(jsonRow(row, world.deviceName()));
        failures += !row.error.empty() || row.checkFailed;
      }
      std::fflush(stdout);
    }
  } catch (const TimeoutError& e) {
    // The GPUs may still be running: freeing anything would wait for them. Report and leave at once.
    std::fflush(stdout);
    std::fprintf(stderr, "conccl-tp-bench: error: %s\n", e.what());
    json.close();
    std::_Exit(4);
  } catch (...) {
    world.markBroken();  // a collective may be half-launched: abort the communicators instead of destroying
    throw;
  }
  if (failures > 0) {
    std::printf("# %d row(s) failed or failed --check\n", failures);
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conccl-tp-bench: tensor-parallel AG->GEMM and GEMM->RS overlap on LLaMA shapes; see docs/tp-bench.md"};
  TpOptions options;
  addTpOptions(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const conccl::Error& e) {
    std::fprintf(stderr, "conccl-tp-bench: error: %s\n", e.what());
    return e.code() == concclInvalidArgument ? 1 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conccl-tp-bench: error: %s\n", e.what());
    return 3;
  }
}
