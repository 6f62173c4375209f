// A rank's log of retired exports (src/core/retire_log.h): records are applied in order, only once the reader has
// finished every call that may name them, never overwritten before every reader read them, and a writer and readers
// on different threads see every record exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/retire_log.h"

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

TEST(RetireLog, RaiseToNeverLowers) {
  std::atomic<uint64_t> v{5};
  raiseTo(v, 3);
  EXPECT_EQ(v.load(), 5u);
  raiseTo(v, 9);
  EXPECT_EQ(v.load(), 9u);
}

}  // namespace
}  // namespace conccl
