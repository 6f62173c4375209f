// A rank's log of retired exports (src/core/retire_log.h): records are applied in order, only once the reader has
// finished every call that may name them, never overwritten before every reader read them, and a writer and readers
// on different threads see every record exactly once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/process_segment.h"
#include "core/retire_log.h"
#include "core/shared_segment.h"

namespace conccl {
namespace {

using Ids = std::vector<uint64_t>;

std::unique_ptr<RetireLog> freshLog() {
  auto log = std::make_unique<RetireLog>();
  log->written.store(0);
  return log;
}

TEST(RetireLog, ARecordWaitsUntilTheReaderFinishedEveryCallThatMayNameIt) {
  auto log = freshLog();
  uint64_t first = 99;
  ASSERT_EQ(appendRetirements(*log, 0, {7, 8}, /*beforeSeq=*/5, &first), 2u);
  EXPECT_EQ(first, 0u);
  ASSERT_EQ(appendRetirements(*log, 0, {9}, /*beforeSeq=*/6, &first), 1u);
  EXPECT_EQ(first, 2u);

  Ids applied;
  auto apply = [&](uint64_t id) { applied.push_back(id); };
  uint64_t cursor = readRetirements(*log, 0, /*doneThrough=*/4, apply);
  EXPECT_EQ(cursor, 0u) << "call 4 may still name ids 7 and 8: the reader has not finished it";
  EXPECT_TRUE(applied.empty());
  cursor = readRetirements(*log, cursor, 5, apply);
  EXPECT_EQ(cursor, 2u);
  EXPECT_EQ(applied, (Ids{7, 8}));
  cursor = readRetirements(*log, cursor, 5, apply);
  EXPECT_EQ(cursor, 2u) << "id 9 may be named by call 5";
  cursor = readRetirements(*log, cursor, 100, apply);
  EXPECT_EQ(cursor, 3u);
  EXPECT_EQ(applied, (Ids{7, 8, 9}));
  EXPECT_EQ(readRetirements(*log, cursor, 100, apply), 3u) << "each record once";
  EXPECT_EQ(applied.size(), 3u);
}

TEST(RetireLog, AFullLogTakesNoMoreUntilEveryReaderReadPast) {
  auto log = freshLog();
  Ids many(kRetireLogRecords + 10);
  for (size_t i = 0; i < many.size(); ++i) many[i] = 1000 + i;
  uint64_t first = 0;
  EXPECT_EQ(appendRetirements(*log, 0, many, 1, &first), kRetireLogRecords) << "the rest waits";
  EXPECT_EQ(appendRetirements(*log, 0, {1}, 1, &first), 0u) << "no reader has read anything: every slot is in use";
  EXPECT_EQ(appendRetirements(*log, 3, {1, 2, 3, 4}, 1, &first), 3u) << "the least reader read 3 records";
  EXPECT_EQ(first, kRetireLogRecords);

  // A reader at 3 sees the wrapped records in order.
  Ids applied;
  const uint64_t cursor = readRetirements(*log, 3, 1, [&](uint64_t id) { applied.push_back(id); });
  EXPECT_EQ(cursor, kRetireLogRecords + 3u);
  ASSERT_EQ(applied.size(), kRetireLogRecords);
  EXPECT_EQ(applied.front(), 1003u);
  EXPECT_EQ(applied[kRetireLogRecords - 4], 1000u + kRetireLogRecords - 1) << "the last of the first append";
  EXPECT_EQ(applied.back(), 3u) << "the wrapped records, in slots 0-2";
}

TEST(RetireLog, AWriterAndTwoReadersOnThreadsApplyEveryIdOnceInOrder) {
  auto log = freshLog();
  constexpr uint64_t kIds = 20000;
  std::atomic<uint64_t> read[2] = {0, 0};
  std::atomic<uint64_t> doneThrough{0};  // the readers' finished calls, raised as the writer goes
  std::vector<Ids> applied(2);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      uint64_t cursor = 0;
      while (!stop.load() || cursor < log->written.load()) {
        cursor = readRetirements(*log, cursor, doneThrough.load(), [&](uint64_t id) { applied[r].push_back(id); });
        read[r].store(cursor);
        std::this_thread::yield();
      }
    });
  }
  uint64_t next = 0, seq = 0;
  while (next < kIds) {
    Ids batch;
    for (uint64_t i = 0; i < 7 && next + i < kIds; ++i) batch.push_back(next + i);
    uint64_t first = 0;
    const size_t n = appendRetirements(*log, std::min(read[0].load(), read[1].load()), batch, seq, &first);
    EXPECT_EQ(first, next);
    next += n;
    raiseTo(doneThrough, seq);  // the readers finish the calls before this batch's beforeSeq
    if (n == batch.size()) ++seq;
    std::this_thread::yield();
  }
  raiseTo(doneThrough, seq + 1);
  stop.store(true);
  for (auto& t : readers) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(applied[r].size(), kIds) << "reader " << r;
    for (uint64_t i = 0; i < kIds; ++i) ASSERT_EQ(applied[r][i], i) << "reader " << r << ", record " << i;
  }
}

// As ProcessClique lays them out in its segment: a log per rank and a cursor per (reader, writer), in memory two
// processes map. The child reads the parent's log through its own mapping and acks through its cursor, and the parent
// waits for the ack before it writes over the slots the child has read.
TEST(RetireLog, AReaderInAnotherProcessSeesEveryRecordThroughTheSegment) {
  constexpr int kRanks = 2;
  ProcessClique::Layout layout(kRanks, /*slots=*/4);
  const std::string name = "/conccl-test-retire-log-" + std::to_string(getpid());
  SharedSegment segment = SharedSegment::create(name, layout.totalBytes);
  layout.base = static_cast<char*>(segment.data());
  constexpr uint64_t kIds = 3 * kRetireLogRecords + 17;  // wraps the ring three times
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Reader (rank 1) of rank 0's log: every id in order, then exit 0; anything else exits 1.
    SharedSegment mine = SharedSegment::open(name, layout.totalBytes);
    ProcessClique::Layout view(kRanks, 4);
    view.base = static_cast<char*>(mine.data());
    uint64_t cursor = 0, expect = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (expect < kIds && std::chrono::steady_clock::now() < deadline) {
      bool inOrder = true;
      cursor = readRetirements(view.retireLog(0), cursor, UINT64_MAX, [&](uint64_t id) { inOrder &= id == expect++; });
      if (!inOrder) _exit(1);
      view.retireRead(1, 0).store(cursor, std::memory_order_release);
    }
    _exit(expect == kIds ? 0 : 1);
  }
  uint64_t next = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (next < kIds && std::chrono::steady_clock::now() < deadline) {
    std::vector<uint64_t> batch;
    for (uint64_t i = next; i < std::min(kIds, next + 100); ++i) batch.push_back(i);
    uint64_t first = 0;
    next += appendRetirements(layout.retireLog(0), layout.retireRead(1, 0).load(std::memory_order_acquire), batch,
                              /*beforeSeq=*/0, &first);
  }
  EXPECT_EQ(next, kIds) << "the child did not read fast enough for the parent to append everything within 20 s";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child saw a record missing or out of order";
  segment.unlink();
}

TEST(RetireLog, EveryRanksLogAndCursorsLieInsideTheSegmentApart) {
  for (int n : {1, 2, 3, 8, 64}) {
    ProcessClique::Layout layout(n, 8);
    EXPECT_GE(layout.retireLogOffset, layout.p2pOffset) << n << " ranks";
    EXPECT_EQ(layout.retireLogOffset % 64, 0u);
    EXPECT_GE(layout.retireLogStride, sizeof(RetireLog));
    EXPECT_GE(layout.retireReadOffset, layout.retireLogOffset + layout.retireLogStride * static_cast<size_t>(n));
    EXPECT_EQ(layout.totalBytes,
              layout.retireReadOffset + sizeof(uint64_t) * static_cast<size_t>(n) * static_cast<size_t>(n));
  }
}

TEST(RetireLog, RaiseToNeverLowers) {
  std::atomic<uint64_t> v{5};
  raiseTo(v, 3);
  EXPECT_EQ(v.load(), 5u);
  raiseTo(v, 9);
  EXPECT_EQ(v.load(), 9u);
}

}  // namespace
}  // namespace conccl
