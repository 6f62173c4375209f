#include "exec/call_path.h"

#include <algorithm>
#include <variant>

#include "base/config.h"
#include "base/error.h"
#include "base/types.h"

namespace conccl::exec {

// The default SM budget (a config default, core/config.h) is the auto reduction's maximum: with neither reduceCtas nor
// smBudget given, the auto rule must reach its maximum without being clipped, and no higher.
static_assert(kAutoReduceMaxCtas == kDefaultSmBudget, "kDefaultSmBudget must be the auto reduction's maximum CTAs");

namespace {

// The per-rank sizes from the schedule when the builder filled them in (hand-made schedules: from the programs).
bool hasProgramStats(const sched::Schedule& schedule) {
  return schedule.workBytes.size() == schedule.programs.size() &&
         schedule.activeOps.size() == schedule.programs.size() &&
         schedule.reduceInputs.size() == schedule.programs.size();
}
size_t programReduceInputs(const sched::Schedule& schedule, int r) {
  const size_t i = static_cast<size_t>(r);
  return hasProgramStats(schedule) ? schedule.reduceInputs[i] : sched::programReduceInputs(schedule.programs[i]);
}
bool programFitsSmallKernel(const sched::Schedule& schedule, int r) {
  const size_t i = static_cast<size_t>(r);
  return fitsSmallProgram(hasProgramStats(schedule) ? schedule.activeOps[i] : sched::programActiveOps(schedule.programs[i]),
                          programReduceInputs(schedule, r));
}

}  // namespace

size_t rankWorkBytes(const sched::Schedule& schedule, int r) {
  const size_t i = static_cast<size_t>(r);
  return hasProgramStats(schedule) ? schedule.workBytes[i] : sched::programWorkBytes(schedule.programs[i]);
}

bool takesSmallPath(const sched::Schedule& schedule, int rank, size_t smallBytes) {
  bool reduces = false;
  for (int p = 0; p < schedule.nranks; ++p) reduces = reduces || programReduceInputs(schedule, p) > 0;
  const size_t limit = reduces ? smallBytes : smallBytes * kSmallMovementFactor;
  if (smallBytes == 0 || rankWorkBytes(schedule, rank) > limit) return false;
  for (int p = 0; p < schedule.nranks; ++p) {
    if (rankWorkBytes(schedule, p) > limit || !programFitsSmallKernel(schedule, p)) return false;
  }
  return true;
}

int reductionCtas(int reduceCtas, int smBudget, size_t inputBytes) {
  CONCCL_ASSERT(smBudget >= 1);
  int ctas = reduceCtas;
  if (ctas <= 0) {
    const size_t auto_ = (inputBytes + kAutoReduceBytesPerCta - 1) / kAutoReduceBytesPerCta;
    ctas = static_cast<int>(std::clamp<size_t>(auto_, 1, kAutoReduceMaxCtas));
  }
  return std::min(ctas, smBudget);
}

concclCallResources_t callResources(const sched::Schedule& schedule, int rank, const PathLimits& limits,
                                    const std::vector<int>& devices) {
  CONCCL_ASSERT(rank >= 0 && rank < schedule.nranks && static_cast<int>(devices.size()) == schedule.nranks);
  concclCallResources_t out{};
  out.path = concclPathCopyEngines;
  out.highPriority = limits.highPriority ? 1 : 0;
  if (launchesNothing(schedule, rank)) return out;  // no kernel, no copy
  if (takesSmallPath(schedule, rank, limits.smallBytes)) {
    out.path = concclPathSmallKernel;
    out.ctas = kSmallKernelCtas;
  } else {
    for (const sched::Op& op : schedule.programs[static_cast<size_t>(rank)].ops) {
      if (const auto* r = std::get_if<sched::Reduce>(&op); r != nullptr && r->count > 0) {
        // The same count the executor launches with (copy_engine_program.cc).
        const size_t inputBytes = r->count * typeSize(r->dtype) * r->inputs.size();
        out.ctas = std::max(out.ctas, reductionCtas(limits.reduceCtas, limits.smBudget, inputBytes));
        out.path = concclPathReduceKernel;
      } else if (const auto* c = std::get_if<sched::Copy>(&op); c != nullptr && c->bytes > 0) {
        const int src = devices[static_cast<size_t>(c->src.rank)];
        const int dst = devices[static_cast<size_t>(c->dst.rank)];
        if (src == dst) out.sameDeviceCopyBytes += c->bytes;
      }
    }
  }
  out.sms = out.ctas;
  return out;
}

}  // namespace conccl::exec
