// A rank's log of retired exports in the ProcessClique segment (core/process_segment.h): how the peers of a rank that
// makes no further call still learn which of its allocations they may unmap.
//
// A rank retires an export when its memory was freed (or its VMM pieces unmapped, or it was deregistered) and tells its
// peers with its next call (MailboxEntry::retired). A communicator that makes no further call (a subgroup used once,
// a job between steps, PyTorch's out-of-memory retry, which frees its cache and allocates again at once) would leave
// the peers mapping that memory, and so keep it allocated, for as long as the communicator lives. So a rank whose
// communicator has published no call for a housekeeping period appends its pending retirements to its log instead,
// and every peer's housekeeping reads the log and unmaps them.
//
// A record says which calls may still name the id: those before `beforeSeq` (the owner's published calls when it
// wrote the record; a retired export is never named by a later call). A peer applies a record only once it has
// finished the host part (its mappings included) of every call before beforeSeq, so that no call of its own maps the
// export again afterwards. The owner keeps a retired VMM unit served until every peer still here has read past its
// record (exec/retire_after_peers.h).
//
// One writer per log (its rank's housekeeping) and one cursor per reader (written by that reader alone). A record
// slot is written again only once every reader still here has read past it. Pure memory operations, unit-tested on
// the CPU (tests/unit/test_retire_log.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace conccl {

inline constexpr uint32_t kRetireLogRecords = 256;

struct RetireRecord {
  uint64_t id;
  uint64_t beforeSeq;  // the calls that may name `id` are those before this one
};

struct RetireLog {
  std::atomic<uint64_t> written;  // records appended so far (record i in slot i % kRetireLogRecords)
  RetireRecord records[kRetireLogRecords];
};

// Appends the first ids that fit, given the least count of records every reader still here has read (`leastRead`);
// returns how many, their first record's index in *firstIndex. `beforeSeq` may not be less than an earlier append's.
inline size_t appendRetirements(RetireLog& log, uint64_t leastRead, const std::vector<uint64_t>& ids,
                                uint64_t beforeSeq, uint64_t* firstIndex) {
  const uint64_t written = log.written.load(std::memory_order_relaxed);  // this thread's own value
  *firstIndex = written;
  const uint64_t inUse = written - std::min(leastRead, written);
  const size_t room = inUse >= kRetireLogRecords ? 0 : static_cast<size_t>(kRetireLogRecords - inUse);
  const size_t n = std::min(room, ids.size());
  for (size_t i = 0; i < n; ++i) log.records[(written + i) % kRetireLogRecords] = RetireRecord{ids[i], beforeSeq};
  log.written.store(written + n, std::memory_order_release);
  return n;
}

// Applies the records from `from` (the reader's cursor) in order, stopping at the first whose calls the reader has not
// all finished (beforeSeq > `doneThrough`, the count of calls whose host part the reader has finished); returns the
// new cursor. If `apply` throws, the exception leaves the caller's cursor where it was (apply must be idempotent).
template <typename Apply>
uint64_t readRetirements(const RetireLog& log, uint64_t from, uint64_t doneThrough, Apply&& apply) {
  const uint64_t written = log.written.load(std::memory_order_acquire);
  uint64_t i = from;
  for (; i < written; ++i) {
    const RetireRecord r = log.records[i % kRetireLogRecords];
    if (r.beforeSeq > doneThrough) break;
    apply(r.id);
  }
  return i;
}

// Raises `value` to `to` unless it is already there or beyond.
inline void raiseTo(std::atomic<uint64_t>& value, uint64_t to) {
  uint64_t seen = value.load(std::memory_order_relaxed);
  while (seen < to && !value.compare_exchange_weak(seen, to, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

}  // namespace conccl
