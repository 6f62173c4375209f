// Defaults that depend on how many GPUs a communicator spans (issue 11 item 4). The tuning knobs below were chosen
// from sweeps on one machine size; a 4- or 8-GPU node may want others (more peers per call, more NVLink ports, other
// copy-engine counts). Each row of the table names the GPU count it is for and the measurement it comes from, and a
// knob the caller set (config field or CONCCL_* variable) is never overridden.
//
// When: once per communicator, as soon as its ranks' devices are known and before anything is sized from the knobs
// (LocalClique: in createClique; ProcessClique: after the bootstrap, where every process knows every rank's device and
// therefore picks the same row). The GPU count is the number of distinct devices among the ranks, so ranks sharing
// one GPU (a test setup) read the 1-GPU row.
//
// How a row is filled: docs/tuning.md (the sweep, `scripts/gpu.sh tune`, and
// `tools/bench/pick_defaults.py`, which turns the sweep into a row).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/config.h"

namespace conccl {

// Bits of Config::explicitKnobs: the knobs below that the caller or the environment set.
enum TunedKnob : unsigned {
  kKnobLanes = 1u << 0,
  kKnobSingleStreamBytes = 1u << 1,
  kKnobMinChunkBytes = 1u << 2,
  kKnobSmallMessageBytes = 1u << 3,
};

struct TunedDefaults {
  int gpus;                  // the row applies from this many GPUs up to the next row's count
  int lanes;                 // Config::lanes
  size_t singleStreamBytes;  // Config::singleStreamBytes
  size_t minChunkBytes;      // Config::minChunkBytes
  size_t smallMessageBytes;  // Config::smallMessageBytes
  const char* evidence;      // where the values come from (docs/results/...), or why they are another row's
};

// The table, ascending by `gpus`, first row for 1 GPU.
const std::vector<TunedDefaults>& tunedDefaultsTable();

// The row of `table` (ascending by `gpus`, not empty; the production table unless a test passes its own) for a
// communicator over `gpuCount` distinct GPUs: the last row whose `gpus` is at most gpuCount (the first row for
// gpuCount < 1).
const TunedDefaults& tunedDefaultsFor(int gpuCount, const std::vector<TunedDefaults>& table = tunedDefaultsTable());

// Distinct devices among `devices` (negative entries, the host backend's, are not devices).
int distinctGpuCount(const std::vector<int>& devices);

// Sets every knob of `config` that is not in config.explicitKnobs from the row of `table` for `gpuCount`. Returns one
// line for the INFO log: the GPU count, the values in effect and which came from the caller.
std::string applyTunedDefaults(Config& config, int gpuCount,
                               const std::vector<TunedDefaults>& table = tunedDefaultsTable());

}  // namespace conccl
