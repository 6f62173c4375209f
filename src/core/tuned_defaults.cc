#include "core/tuned_defaults.h"

#include <set>

#include "base/bytes_text.h"
#include "base/error.h"

namespace conccl {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// Lanes never exceed Config{}.lanes: a process communicator sizes its shared flag area from the lanes before it knows
// its GPUs (ProcessClique), so a row may lower them, never raise them (checked by tests/unit/test_tuned_defaults.cc).
const std::vector<TunedDefaults>& table() {
  static const std::vector<TunedDefaults> rows = {
      {1, 2, 4 * kMiB, 8 * kMiB, 64 * kKiB,
       "ranks sharing one GPU (a test setup: its copies run on SMs, nothing to tune); the 2-GPU values"},
      {2, 2, 4 * kMiB, 8 * kMiB, 64 * kKiB,
       "2 x H200, 2026-11-30 (docs/results/2026-11-30-h200-x2-sweep-peer-reduce-c3, runs 2 and 4): "
       "single-stream 4 MiB beat 256 KiB up to "
       "8 MB and 64 MiB at 32 MB; 8 MiB pieces beat 512 KiB-2 MiB below 16 MiB; the small kernel won up to 64 KiB "
       "for reductions; lanes not swept"},
      {4, 2, 4 * kMiB, 8 * kMiB, 64 * kKiB,
       "not swept on 4 GPUs with this code (2026-11-29's 1-lane-beats-4 run predates the single-stream threshold); "
       "the 2-GPU values"},
      {8, 2, 4 * kMiB, 8 * kMiB, 64 * kKiB, "never measured on 8 GPUs; the 2-GPU values"},
  };
  return rows;
}

}  // namespace

const std::vector<TunedDefaults>& tunedDefaultsTable() { return table(); }

const TunedDefaults& tunedDefaultsFor(int gpuCount, const std::vector<TunedDefaults>& rows) {
  CONCCL_ASSERT(!rows.empty());
  const TunedDefaults* pick = &rows.front();
  for (const TunedDefaults& row : rows) {
    if (row.gpus <= gpuCount) pick = &row;
  }
  return *pick;
}

int distinctGpuCount(const std::vector<int>& devices) {
  std::set<int> unique;
  for (int d : devices) {
    if (d >= 0) unique.insert(d);
  }
  return static_cast<int>(unique.size());
}

std::string applyTunedDefaults(Config& config, int gpuCount, const std::vector<TunedDefaults>& rows) {
  const TunedDefaults& row = tunedDefaultsFor(gpuCount, rows);
  CONCCL_ASSERT(row.lanes >= 1 && row.lanes <= Config{}.lanes);
  const unsigned mine = config.explicitKnobs;
  if (!(mine & kKnobLanes)) config.lanes = row.lanes;
  if (!(mine & kKnobSingleStreamBytes)) config.singleStreamBytes = row.singleStreamBytes;
  if (!(mine & kKnobMinChunkBytes)) config.minChunkBytes = row.minChunkBytes;
  if (!(mine & kKnobSmallMessageBytes)) config.smallMessageBytes = row.smallMessageBytes;
  auto by = [mine](unsigned bit) { return (mine & bit) ? " (set by the caller)" : ""; };
  std::string line = "defaults for " + std::to_string(gpuCount) + " GPU(s), table row " + std::to_string(row.gpus) +
                     ": lanes " + std::to_string(config.lanes) + by(kKnobLanes) + ", singleStreamBytes " +
                     bytesText(config.singleStreamBytes) + by(kKnobSingleStreamBytes) + ", minChunkBytes " +
                     bytesText(config.minChunkBytes) + by(kKnobMinChunkBytes) + ", smallMessageBytes " +
                     bytesText(config.smallMessageBytes) + by(kKnobSmallMessageBytes);
  return line + "; from: " + row.evidence;
}

}  // namespace conccl
