#include "tp_runner.h"

#include <algorithm>

#include "tp_workload.h"

namespace conccl::tp {

namespace {

// NCCL's channel buffers, cuBLASLt's and the ops' workspaces, conccl's scratch: generous, so that a shape that is
// run does not fail half-way for want of memory.
constexpr size_t kReserveBytes = size_t{4} << 30;

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", double(bytes) / double(size_t{1} << 30));
  return buf;
}

bool checksResult(Strategy s) { return s == Strategy::kNcclSplit || s == Strategy::kConcclFused; }

}  // namespace

std::optional<std::string> whyNotFits(TpWorld& world, const TpShape& shape, bool check) {
  size_t leastFree = SIZE_MAX;
  for (int r = 0; r < world.size(); ++r) {
    exec::DeviceGuard guard(world.rank(r).device);
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    leastFree = std::min(leastFree, free);
  }
  const size_t need = shape.bytesPerRank(check) + kReserveBytes;
  if (need <= leastFree) return std::nullopt;
  return "needs " + gib(need) + " per GPU (buffers " + gib(shape.bytesPerRank(check)) + " + " + gib(kReserveBytes) +
         " reserve), " + gib(leastFree) + " free";
}

std::vector<TpRow> runShape(TpWorld& world, const TpShape& shape, const std::vector<Strategy>& strategies,
                            const TpOptions& o) {
  std::vector<TpRow> rows;
  std::unique_ptr<Workload> work;
  std::string setupError;
  try {
    work = makeWorkload(world, shape, o.check);
  } catch (const TimeoutError&) {
    throw;
  } catch (const std::exception& e) {
    setupError = std::string("allocating the shape's buffers: ") + e.what();
  }
  bool haveReference = false;
  for (Strategy s : strategies) {
    TpRow row;
    row.shape = shape;
    row.strategy = s;
    if (!work) {
      row.error = setupError;
      rows.push_back(row);
      continue;
    }
    try {
      const std::function<void()> launch = work->strategy(s);
      row.timesMs = world.time(launch, o.warmup, o.iters);
      if (o.check && checksResult(s)) {
        if (!haveReference) {
          work->poison();
          work->strategy(Strategy::kSerialNccl)();
          work->saveReference();
          world.synchronize();
          haveReference = true;
        }
        work->poison();
        launch();
        world.synchronize();
        row.checkError = work->compareWithReference();
        row.checkFailed = !withinTolerance(*row.checkError, o.tolerance);
      }
    } catch (const TimeoutError&) {
      throw;
    } catch (const std::exception& e) {
      row.timesMs.clear();
      row.checkError.reset();
      row.error = e.what();
      // What the failed strategy had launched must finish (or time out) before the next one starts.
      world.synchronize();
    }
    rows.push_back(row);
  }
  finalizeShapeRows(rows);
  return rows;
}

}  // namespace conccl::tp
