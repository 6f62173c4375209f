// What the CUDA executor's graph cache is keyed on, as the communicator hands it over (CPU, no CUDA): a LocalClique
// driving a recording executor. Every call's schedule carries an id that is the same for repeated calls of one shape
// and differs between shapes; the binding names each used buffer's allocation (CallBinding::bufferIds) and marks the
// buffers a rank's program does not touch; prepareCall sees the schedule before any rank launches; and the shapes
// built from it (exec/call_shape_cache.h) repeat exactly when the call repeats.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/config.h"
#include "core/local_clique.h"
#include "exec/call_shape_cache.h"
#include "exec/executor.h"

namespace conccl {
namespace {

// Records what launch() and prepareCall() received; "allocations" are named by a table the test fills.
class RecordingExecutor final : public exec::Executor {
 public:
  struct Launch {
    uint64_t scheduleId = 0;
    int rank = 0;
    exec::CallBinding binding;
  };

  sched::BuildOptions buildOptions() const override { return {}; }
  uint64_t checkBuffer(int, const void* ptr, size_t, const char*, cudaStream_t) const override {
    auto it = allocationOf.find(ptr);
    return it == allocationOf.end() ? exec::kAllocationUnknown : it->second;
  }
  void prepareCall(const sched::Schedule& schedule, const exec::CallBinding&, const std::vector<int>&) override {
    std::lock_guard<std::mutex> lock(mutex);
    prepared.push_back(schedule.id);
  }
  void launch(const sched::Schedule& schedule, const exec::CallBinding& binding, int rank) override {
    std::lock_guard<std::mutex> lock(mutex);
    launches.push_back({schedule.id, rank, binding});
  }
  void synchronize(int) override {}
  void cancel() override {}
  void releaseRank(int) override {}

  std::map<const void*, uint64_t> allocationOf;
  std::mutex mutex;
  std::vector<uint64_t> prepared;
  std::vector<Launch> launches;
};

struct Fixture {
  static constexpr int kRanks = 2;
  RecordingExecutor* executor = nullptr;
  std::unique_ptr<LocalClique> clique;
  char memory[4][256] = {};

  Fixture() {
    auto owned = std::make_unique<RecordingExecutor>();
    executor = owned.get();
    Config config;
    config.backend = concclBackendHost;  // no GPU watchdog
    clique = std::make_unique<LocalClique>(config, std::vector<int>(kRanks, 0), std::move(owned));
    for (int i = 0; i < 4; ++i) executor->allocationOf[memory[i]] = 100 + static_cast<uint64_t>(i);
  }

  // An AllReduce of `count` floats from this thread, rank by rank (each rank posts, then every rank launches).
  void allReduce(size_t count, bool inPlace) {
    std::vector<std::shared_ptr<CallTicket>> tickets;
    for (int r = 0; r < kRanks; ++r) {
      RankArgs a;
      a.kind = sched::CollKind::kAllReduce;
      a.count = count;
      a.sendbuff = memory[2 * r];
      a.recvbuff = inPlace ? memory[2 * r] : memory[2 * r + 1];
      a.inPlace = inPlace;
      a.apiName = "concclAllReduce";
      tickets.push_back(clique->post(r, std::move(a)));
    }
    for (auto& t : tickets) clique->waitAndLaunch(*t);
  }
};

TEST(GraphCacheKeys, RepeatedCallsShareTheScheduleIdOtherShapesDoNot) {
  Fixture f;
  f.allReduce(16, false);
  f.allReduce(16, false);
  f.allReduce(32, false);
  ASSERT_EQ(f.executor->launches.size(), 6u);
  ASSERT_EQ(f.executor->prepared.size(), 3u);
  const uint64_t first = f.executor->launches[0].scheduleId;
  EXPECT_NE(first, 0u);
  EXPECT_EQ(f.executor->launches[1].scheduleId, first) << "both ranks of one call";
  EXPECT_EQ(f.executor->launches[2].scheduleId, first) << "the repeated call";
  EXPECT_NE(f.executor->launches[4].scheduleId, first) << "another count is another schedule";
  EXPECT_EQ(f.executor->prepared[0], first) << "prepareCall sees the call's schedule";
}

TEST(GraphCacheKeys, BindingNamesEachUsedBuffersAllocation) {
  Fixture f;
  f.allReduce(16, false);
  const exec::CallBinding& b = f.executor->launches[0].binding;
  ASSERT_EQ(b.bufferIds.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(b.bufferIds[static_cast<size_t>(r)].size(), 2u);
    EXPECT_EQ(b.bufferIds[static_cast<size_t>(r)][0], 100u + 2 * static_cast<uint64_t>(r)) << "sendbuff of " << r;
    EXPECT_EQ(b.bufferIds[static_cast<size_t>(r)][1], 101u + 2 * static_cast<uint64_t>(r)) << "recvbuff of " << r;
  }
}

TEST(GraphCacheKeys, InPlaceAliasIsMarkedUnused) {
  Fixture f;
  f.allReduce(16, true);
  const exec::CallBinding& b = f.executor->launches[0].binding;
  for (int r = 0; r < 2; ++r) {
    const auto& ids = b.bufferIds[static_cast<size_t>(r)];
    const int used = sched::inPlaceBuffer(sched::CollKind::kAllReduce);
    EXPECT_EQ(ids[static_cast<size_t>(used)], 100u + 2 * static_cast<uint64_t>(r));
    EXPECT_EQ(ids[static_cast<size_t>(1 - used)], exec::kBufferNotUsed);
  }
}

TEST(GraphCacheKeys, ShapesRepeatExactlyWhenTheCallRepeats) {
  Fixture f;
  f.allReduce(16, false);
  f.allReduce(16, false);
  exec::CallShape a, b;
  const auto& l = f.executor->launches;
  ASSERT_TRUE(exec::makeCallShape(l[0].scheduleId, 0, l[0].binding, a));
  ASSERT_TRUE(exec::makeCallShape(l[2].scheduleId, 0, l[2].binding, b));
  EXPECT_EQ(a, b);
  // The same buffers, but one of them now another allocation (freed and allocated again at the same address).
  f.executor->allocationOf[f.memory[3]] = 999;
  f.allReduce(16, false);
  exec::CallShape c;
  ASSERT_TRUE(exec::makeCallShape(l[4].scheduleId, 0, l[4].binding, c));
  EXPECT_FALSE(c == a);
}

TEST(GraphCacheKeys, UnnamedAllocationIsNotCached) {
  Fixture f;
  f.executor->allocationOf.erase(f.memory[1]);  // the driver cannot name rank 0's recvbuff
  f.allReduce(16, false);
  exec::CallShape s;
  EXPECT_FALSE(exec::makeCallShape(f.executor->launches[0].scheduleId, 0, f.executor->launches[0].binding, s));
}

}  // namespace
}  // namespace conccl
