// The schedule checker: proves a schedule correct for its call by simulating the execution model of
// schedule.h exactly (main stream + lanes per rank, program-order rules, flags that carry one signal).
//
// It reports the first problem found, among:
//   (a) malformed ops: ranks, buffers, offsets + sizes within bufferBytes / scratchBytes, lanes, slots,
//       a Copy that does not involve its issuing rank, a Reduce touching another rank's memory, a
//       zero-byte Copy, a reference to the buffer an in-place rank does not use;
//   (b) ordering, with vector clocks per (rank, stream): conflicting accesses (write/write, read/write on
//       overlapping bytes) that no chain of stream order and Signal->Wait orders; an access to rank q's
//       memory by another rank that is not ordered after q's program start or before q's program end; a
//       Signal not ordered after the Wait that consumed the previous signal of the same flag; a flag left
//       set at the end; a deadlock (the simulation cannot make progress);
//   (c) data flow, symbolically: every byte holds Initial(rank, buffer, offset) or Reduced(op, multiset of
//       initial sources); scratch starts undefined and reading it before it was produced in this call is an
//       error; at the end every output byte holds exactly what the collective defines, was written at most
//       once, and every other byte of the call buffers is unchanged and unwritten.
//
// Memory is tracked as interval maps (segments), so the cost grows with the number of ops, not of bytes.
#pragma once

#include <string>

#include "sched/schedule.h"

namespace conccl::sched {

struct CheckResult {
  bool ok = true;
  std::string error;  // empty when ok; otherwise what is wrong, naming the rank, op and bytes
};

// Checks one call: `schedule` must implement `call` (an invalid call is reported as an error too).
CheckResult checkSchedule(const CollectiveCall& call, const Schedule& schedule);

// Checks schedule `a` for `callA` followed, on the same ranks, by `b` for `callB` (each rank starts b when
// it finished a; ranks are not synchronised between the calls). This proves that flags and scratch can be
// reused from one call to the next (use a == b for replays of the same call / CUDA graph).
CheckResult checkSchedulePair(const CollectiveCall& callA, const Schedule& a, const CollectiveCall& callB,
                              const Schedule& b);

// One-line description of an op, for messages and debugging ("Copy{r0.send+0 -> r1.recv+256, 256 B, lane 1}").
std::string describeOp(const Op& op);

}  // namespace conccl::sched
