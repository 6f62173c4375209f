// Lifetime and error paths of the public API on the host backend: abort or destroy while peers are blocked in a
// call, destroy after a timeout, groups that meet a communicator out of service, concclGetLastError across
// threads, config structs of other sizes. Every test is bounded: a broken fix fails, it never hangs for minutes.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "common/host_driver.h"

namespace conccl::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kLongTimeoutMs = 30000;  // a blocked call must be woken by abort/destroy, well before this

concclResult_t asyncError(concclComm_t comm) {
  concclResult_t e = concclInternalError;
  EXPECT_EQ(concclCommGetAsyncError(comm, &e), concclSuccess);
  return e;
}

// Starts rank `r`'s AllReduce on its own thread; the future holds its result.
std::future<concclResult_t> startAllReduce(concclComm_t comm, std::vector<float>& buf) {
  return std::async(std::launch::async, [comm, &buf] {
    return concclAllReduce(buf.data(), buf.data(), buf.size(), concclFloat32, concclSum, comm, nullptr);
  });
}

// Waits for `f` for at most `limit`; a hang fails the test instead of blocking the suite (the thread is then
// joined by the future's destructor once the long timeout hits).
concclResult_t resultWithin(std::future<concclResult_t>& f, milliseconds limit) {
  if (f.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "blocked call did not return within " << limit.count() << " ms";
  }
  return f.get();
}

TEST(ApiLifecycle, AbortWakesRankBlockedWaitingForIt) {
  auto comms = makeHostComms(2, kLongTimeoutMs);
  std::vector<float> buf(16, 1.0f);
  auto blocked = startAllReduce(comms[1], buf);
  std::this_thread::sleep_for(milliseconds(100));  // rank 1 is now waiting for rank 0 to call
  ASSERT_EQ(blocked.wait_for(milliseconds(0)), std::future_status::timeout);
  auto start = Clock::now();
  ASSERT_EQ(concclCommAbort(comms[0]), concclSuccess) << concclGetLastError(nullptr);
  EXPECT_EQ(resultWithin(blocked, milliseconds(5000)), concclInvalidUsage);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_NE(std::string(concclGetLastError(comms[1])).find("aborted"), std::string::npos)
      << concclGetLastError(comms[1]);
  EXPECT_EQ(asyncError(comms[1]), concclInvalidUsage);
  // Out of service: fails fast.
  EXPECT_EQ(concclAllReduce(buf.data(), buf.data(), 16, concclFloat32, concclSum, comms[1], nullptr),
            concclInvalidUsage);
  EXPECT_EQ(concclCommDestroy(comms[1]), concclSuccess) << concclGetLastError(nullptr);
}

TEST(ApiLifecycle, AbortWakesSeveralBlockedRanksThenAbortTheRest) {
  auto comms = makeHostComms(4, kLongTimeoutMs);
  std::vector<std::vector<float>> bufs(4, std::vector<float>(1000, 1.0f));
  std::vector<std::future<concclResult_t>> blocked;
  for (int r = 1; r < 4; ++r) blocked.push_back(startAllReduce(comms[r], bufs[r]));
  std::this_thread::sleep_for(milliseconds(100));
  // The one rank that never called aborts (a comm must not be aborted while its own thread is inside a call:
  // the handle is freed by the abort).
  ASSERT_EQ(concclCommAbort(comms[0]), concclSuccess);
  for (auto& f : blocked) EXPECT_EQ(resultWithin(f, milliseconds(5000)), concclInvalidUsage);
  for (int r : {1, 2, 3}) EXPECT_EQ(concclCommAbort(comms[r]), concclSuccess) << concclGetLastError(nullptr);
}

TEST(ApiLifecycle, AbortWakesBlockingSendRecv) {
  auto comms = makeHostComms(3, kLongTimeoutMs);
  std::vector<float> buf(8, 1.0f);
  auto blocked = std::async(std::launch::async, [&] {
    return concclSend(buf.data(), 8, concclFloat32, 2, comms[0], nullptr);
  });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_EQ(concclCommAbort(comms[1]), concclSuccess);  // not even a partner: the whole clique goes
  EXPECT_EQ(resultWithin(blocked, milliseconds(5000)), concclInvalidUsage);
  for (int r : {0, 2}) EXPECT_EQ(concclCommAbort(comms[r]), concclSuccess);
}

TEST(ApiLifecycle, DestroyWakesRankBlockedWaitingForIt) {
  auto comms = makeHostComms(3, kLongTimeoutMs);
  std::vector<float> buf(16, 1.0f);
  auto blocked = startAllReduce(comms[1], buf);
  std::this_thread::sleep_for(milliseconds(100));
  // A graceful destroy of a rank the call needs: that rank will never call, so the waiter fails now, not after
  // the 30 s timeout.
  ASSERT_EQ(concclCommDestroy(comms[0]), concclSuccess);
  EXPECT_EQ(resultWithin(blocked, milliseconds(5000)), concclInvalidUsage);
  EXPECT_NE(std::string(concclGetLastError(comms[1])).find("rank 0 was destroyed"), std::string::npos)
      << concclGetLastError(comms[1]);
  // Later collectives fail at once too; Send/Recv between the remaining ranks still works.
  auto start = Clock::now();
  EXPECT_EQ(concclAllReduce(buf.data(), buf.data(), 16, concclFloat32, concclSum, comms[2], nullptr),
            concclInvalidUsage);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  float x = 5.0f, y = 0.0f;
  auto results = forEachRank(2, Drive::kThreads, [&](int i) {
    return i == 0 ? concclSend(&x, 1, concclFloat32, 2, comms[1], nullptr)
                  : concclRecv(&y, 1, concclFloat32, 1, comms[2], nullptr);
  });
  EXPECT_EQ(results[0], concclSuccess) << concclGetLastError(comms[1]);
  EXPECT_EQ(results[1], concclSuccess) << concclGetLastError(comms[2]);
  EXPECT_EQ(y, 5.0f);
  // A blocking Send to the destroyed rank fails at once, and the sender can post again afterwards.
  EXPECT_EQ(concclSend(&x, 1, concclFloat32, 0, comms[1], nullptr), concclInvalidUsage);
  results = forEachRank(2, Drive::kThreads, [&](int i) {
    return i == 0 ? concclSend(&x, 1, concclFloat32, 2, comms[1], nullptr)
                  : concclRecv(&y, 1, concclFloat32, 1, comms[2], nullptr);
  });
  EXPECT_EQ(results[0], concclSuccess) << concclGetLastError(comms[1]);
  EXPECT_EQ(results[1], concclSuccess) << concclGetLastError(comms[2]);
  EXPECT_EQ(concclCommDestroy(comms[1]), concclSuccess);
  EXPECT_EQ(concclCommDestroy(comms[2]), concclSuccess);
}

TEST(ApiLifecycle, DestroyAfterTimeout) {
  auto comms = makeHostComms(2, /*timeoutMs=*/150);
  std::vector<float> buf(4, 1.0f);
  auto start = Clock::now();
  EXPECT_EQ(concclAllReduce(buf.data(), buf.data(), 4, concclFloat32, concclSum, comms[0], nullptr), concclTimeout);
  EXPECT_GE(Clock::now() - start, milliseconds(140));
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_EQ(asyncError(comms[0]), concclTimeout);
  EXPECT_EQ(asyncError(comms[1]), concclTimeout);
  // Graceful destroy (not abort) of both ranks works after a timeout, and does not wait for anything.
  start = Clock::now();
  EXPECT_EQ(concclCommDestroy(comms[1]), concclSuccess) << concclGetLastError(nullptr);
  EXPECT_EQ(concclCommDestroy(comms[0]), concclSuccess) << concclGetLastError(nullptr);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST(ApiLifecycle, GroupTimeoutThenDestroy) {
  auto comms = makeHostComms(3, /*timeoutMs=*/200);
  std::vector<std::vector<float>> bufs(3, std::vector<float>(4, 1.0f));
  // Rank 2 is never called: the group's launch times out on the ranks it drives.
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(concclAllReduce(bufs[r].data(), bufs[r].data(), 4, concclFloat32, concclSum, comms[r], nullptr),
              concclSuccess);
  }
  EXPECT_EQ(concclGroupEnd(), concclTimeout);
  EXPECT_NE(std::string(concclGetLastError(nullptr)).find("rank(s) 2"), std::string::npos)
      << concclGetLastError(nullptr);
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(std::string(concclGetLastError(comms[r])).empty());
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

// A group that names a communicator out of service and a healthy one: the healthy clique's calls still run, so
// its peers are not left waiting; GroupEnd reports the failure.
TEST(ApiLifecycle, GroupWithOneCommOutOfService) {
  auto bad = makeHostComms(2, /*timeoutMs=*/100);
  auto good = makeHostComms(2, kLongTimeoutMs);
  std::vector<float> x(4, 1.0f);
  ASSERT_EQ(concclAllReduce(x.data(), x.data(), 4, concclFloat32, concclSum, bad[0], nullptr), concclTimeout);
  std::vector<std::vector<float>> bufs(2, std::vector<float>(4, 2.0f));
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  ASSERT_EQ(concclAllReduce(bufs[0].data(), bufs[0].data(), 4, concclFloat32, concclSum, good[0], nullptr),
            concclSuccess);
  ASSERT_EQ(concclAllReduce(x.data(), x.data(), 4, concclFloat32, concclSum, bad[1], nullptr), concclSuccess);
  ASSERT_EQ(concclAllReduce(bufs[1].data(), bufs[1].data(), 4, concclFloat32, concclSum, good[1], nullptr),
            concclSuccess);
  EXPECT_EQ(concclGroupEnd(), concclInvalidUsage);
  EXPECT_EQ(bufs[0][3], 4.0f);
  EXPECT_EQ(bufs[1][3], 4.0f);
  EXPECT_EQ(asyncError(good[0]), concclSuccess);
  EXPECT_FALSE(std::string(concclGetLastError(bad[1])).empty());
  EXPECT_TRUE(std::string(concclGetLastError(good[1])).empty()) << concclGetLastError(good[1]);
  for (auto c : bad) EXPECT_EQ(concclCommAbort(c), concclSuccess);
  for (auto c : good) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

// A group whose calls are all on one communicator (run without the general group run, group.cc runOnOneComm), on a
// communicator out of service: GroupEnd reports the failure, records it on the communicator, and none of the calls
// runs.
TEST(ApiLifecycle, GroupOnOneCommOutOfService) {
  auto bad = makeHostComms(2, /*timeoutMs=*/100);
  std::vector<float> x(4, 1.0f);
  ASSERT_EQ(concclAllReduce(x.data(), x.data(), 4, concclFloat32, concclSum, bad[0], nullptr), concclTimeout);
  std::vector<float> a(4, 2.0f), b(4, 3.0f);
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  ASSERT_EQ(concclAllReduce(a.data(), a.data(), 4, concclFloat32, concclSum, bad[1], nullptr), concclSuccess);
  ASSERT_EQ(concclAllReduce(b.data(), b.data(), 4, concclFloat32, concclMax, bad[1], nullptr), concclSuccess);
  EXPECT_EQ(concclGroupEnd(), concclInvalidUsage);
  EXPECT_EQ(a[0], 2.0f);
  EXPECT_EQ(b[0], 3.0f);
  const std::string onComm = concclGetLastError(bad[1]);
  EXPECT_NE(onComm.find("out of service"), std::string::npos) << onComm;
  const std::string onThread = concclGetLastError(nullptr);
  EXPECT_NE(onThread.find("concclGroupEnd"), std::string::npos) << onThread;
  EXPECT_NE(onThread.find(onComm), std::string::npos) << onThread;
  for (auto c : bad) EXPECT_EQ(concclCommAbort(c), concclSuccess);
}

// Destroying a communicator whose call is recorded in the calling thread's open group: the group must not touch
// the freed handle at concclGroupEnd.
TEST(ApiLifecycle, DestroyInsideOpenGroup) {
  auto comms = makeHostComms(1, kLongTimeoutMs);
  auto other = makeHostComms(1, kLongTimeoutMs);
  std::vector<float> a(4, 1.0f), b(4, 3.0f);
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  ASSERT_EQ(concclAllReduce(a.data(), a.data(), 4, concclFloat32, concclSum, comms[0], nullptr), concclSuccess);
  ASSERT_EQ(concclAllReduce(b.data(), b.data(), 4, concclFloat32, concclMax, other[0], nullptr), concclSuccess);
  ASSERT_EQ(concclCommDestroy(comms[0]), concclSuccess);
  EXPECT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(nullptr);
  EXPECT_EQ(b[0], 3.0f);
  EXPECT_EQ(concclCommDestroy(other[0]), concclSuccess);
}

TEST(ApiLifecycle, LastErrorFromAnotherThread) {
  auto comms = makeHostComms(2, kLongTimeoutMs);
  float buf[4] = {};
  std::thread([&] {
    EXPECT_EQ(concclBroadcast(buf, buf, 1, concclFloat32, 7, comms[0], nullptr), concclInvalidArgument);
  }).join();
  // The communicator's message is visible from any thread; the thread-local one only in the failing thread.
  std::string onComm = concclGetLastError(comms[0]);
  EXPECT_NE(onComm.find("root 7"), std::string::npos) << onComm;
  EXPECT_EQ(std::string(concclGetLastError(comms[1])), "");
  EXPECT_EQ(std::string(concclGetLastError(nullptr)).find("root 7"), std::string::npos);

  // Many threads failing on and reading the same communicator at once (for the sanitizers), and each thread's
  // own NULL-comm message stays its own.
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        int badRoot = 100 + t;
        concclBroadcast(buf, buf, 1, concclFloat32, badRoot, comms[0], nullptr);
        std::string mine = concclGetLastError(nullptr);
        if (mine.find("root " + std::to_string(badRoot)) == std::string::npos) ++mismatches;
        std::string shared = concclGetLastError(comms[0]);
        if (shared.find("is not a rank of this communicator") == std::string::npos) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

TEST(ApiLifecycle, ConfigStructSizes) {
  concclComm_t comm = nullptr;
  // Current header: accepted.
  concclConfig_t current = CONCCL_CONFIG_INITIALIZER;
  current.backend = concclBackendHost;
  ASSERT_EQ(concclCommInitAll(&comm, 1, nullptr, &current), concclSuccess) << concclGetLastError(nullptr);

  // An older header's struct can only be a prefix that still covers every current field (the tail padding
  // is the only difference possible today): accepted.
  const size_t minSize = offsetof(concclConfig_t, timeoutMs) + sizeof(int);
  concclConfig_t older = current;
  older.size = minSize;
  concclComm_t comm2 = nullptr;
  EXPECT_EQ(concclCommInitAll(&comm2, 1, nullptr, &older), concclSuccess) << concclGetLastError(nullptr);
  if (comm2 != nullptr) {
    EXPECT_EQ(concclCommDestroy(comm2), concclSuccess);
  }

  // A newer header's (larger) struct: refused, clearly, and nothing is created.
  concclConfig_t newer = current;
  newer.size = sizeof(concclConfig_t) + 8;
  concclComm_t untouched = nullptr;
  EXPECT_EQ(concclCommInitAll(&untouched, 1, nullptr, &newer), concclInvalidArgument);
  EXPECT_NE(std::string(concclGetLastError(nullptr)).find("newer"), std::string::npos) << concclGetLastError(nullptr);
  EXPECT_EQ(untouched, nullptr);
  // Too small to hold the known fields: refused.
  concclConfig_t tiny = current;
  tiny.size = minSize - 1;
  EXPECT_EQ(concclCommInitAll(&untouched, 1, nullptr, &tiny), concclInvalidArgument);
  EXPECT_EQ(untouched, nullptr);

  // GetConfig writes no more than the caller's size, and refuses a size that is not a config's.
  concclConfig_t out;
  std::memset(static_cast<void*>(&out), 0xAB, sizeof(out));
  out.size = minSize;
  ASSERT_EQ(concclCommGetConfig(comm, &out), concclSuccess) << concclGetLastError(comm);
  EXPECT_EQ(out.size, minSize);
  EXPECT_EQ(out.backend, concclBackendHost);
  EXPECT_EQ(out.magic, CONCCL_CONFIG_MAGIC);
  for (size_t i = minSize; i < sizeof(out); ++i) {
    EXPECT_EQ(reinterpret_cast<const unsigned char*>(&out)[i], 0xAB) << "byte " << i << " beyond the caller's size";
  }
  concclConfig_t garbage = CONCCL_CONFIG_INITIALIZER;
  garbage.size = 3;
  EXPECT_EQ(concclCommGetConfig(comm, &garbage), concclInvalidArgument);
  EXPECT_EQ(concclCommGetConfig(comm, nullptr), concclInvalidArgument);
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
}

}  // namespace
}  // namespace conccl::test
