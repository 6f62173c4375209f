// Executor::CheckedRange and CheckedAllocations (exec/executor.h): a buffer of a grouped call is taken as checked only
// when it lies wholly inside an allocation an earlier buffer of the same call was checked in; anything reaching past
// either end, or an allocation whose range the backend could not tell, is checked again.
#include "exec/executor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

using conccl::exec::Executor;

namespace {

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

// An executor whose allocations are given ranges; it records every pointer it is asked to check.
class RangeExecutor final : public conccl::exec::Executor {
 public:
  std::vector<Executor::CheckedRange> allocations;  // size 0: a range the backend cannot tell
  mutable std::vector<const void*> asked;

  conccl::sched::BuildOptions buildOptions() const override { return {}; }
  uint64_t checkBuffer(int, const void*, size_t, const char*, cudaStream_t) const override {
    return conccl::exec::kAllocationUnknown;
  }
  uint64_t checkBufferIn(int, const void* ptr, size_t, const char*, cudaStream_t, CheckedRange* range) const override {
    asked.push_back(ptr);
    *range = CheckedRange{};
    for (const CheckedRange& a : allocations) {
      const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
      if (p >= a.base && p < a.base + (a.size != 0 ? a.size : 1)) *range = a;
    }
    return conccl::exec::kAllocationUnknown;
  }
  void launch(const conccl::sched::Schedule&, const conccl::exec::CallBinding&, int) override {}
  void synchronize(int) override {}
  void cancel() override {}
  void releaseRank(int) override {}
};

}  // namespace

TEST(CheckedRange, CoversSlicesInsideTheAllocation) {
  const Executor::CheckedRange r{0x10000, 4096};
  EXPECT_TRUE(r.covers(at(0x10000), 4096));  // the whole allocation
  EXPECT_TRUE(r.covers(at(0x10000), 1));
  EXPECT_TRUE(r.covers(at(0x10800), 2048));  // the last half, to the last byte
  EXPECT_TRUE(r.covers(at(0x10fff), 1));
  EXPECT_TRUE(r.covers(at(0x11000), 0));  // an empty slice at the end
}

TEST(CheckedRange, RefusesWhatReachesPastEitherEnd) {
  const Executor::CheckedRange r{0x10000, 4096};
  EXPECT_FALSE(r.covers(at(0x10800), 2049));  // one byte past the end
  EXPECT_FALSE(r.covers(at(0x11000), 1));     // starts at the end
  EXPECT_FALSE(r.covers(at(0xffff), 2));      // starts before it
  EXPECT_FALSE(r.covers(at(0x20000), 16));    // another allocation
  EXPECT_FALSE(r.covers(at(0x10001), SIZE_MAX));  // a size that would wrap around
}

TEST(CheckedRange, AnUnknownRangeCoversNothing) {
  const Executor::CheckedRange unknown{0x10000, 0};
  EXPECT_FALSE(unknown.covers(at(0x10000), 0));
  EXPECT_FALSE(unknown.covers(at(0x10000), 1));
  EXPECT_FALSE(Executor::CheckedRange{}.covers(at(0), 0));
}

TEST(CheckedAllocations, AsksOncePerAllocation) {
  RangeExecutor e;
  e.allocations = {{0x10000, 4096}, {0x20000, 4096}};
  Executor::CheckedAllocations checked;
  // An AllToAll of 4 ranks: four Send slices of one tensor, four Recv slices of another.
  for (uintptr_t base : {uintptr_t{0x10000}, uintptr_t{0x20000}}) {
    for (uintptr_t k = 0; k < 4; ++k) checked.check(e, 0, at(base + k * 1024), 1024, "slice", nullptr);
  }
  EXPECT_EQ(e.asked, (std::vector<const void*>{at(0x10000), at(0x20000)}));
}

TEST(CheckedAllocations, AsksAgainForWhatNoCheckedAllocationCovers) {
  RangeExecutor e;
  e.allocations = {{0x10000, 4096}, {0x30000, 0}};
  Executor::CheckedAllocations checked;
  checked.check(e, 0, at(0x10000), 1024, "first", nullptr);
  checked.check(e, 0, at(0x10c00), 2048, "past the end", nullptr);  // reaches past the allocation: the backend refuses
  checked.check(e, 0, at(0x30000), 16, "unknown range", nullptr);
  checked.check(e, 0, at(0x30000), 16, "unknown range again", nullptr);
  EXPECT_EQ(e.asked, (std::vector<const void*>{at(0x10000), at(0x10c00), at(0x30000), at(0x30000)}));
}

TEST(CheckedAllocations, KeepsTheLastFewAndAsksAgainForOneItDropped) {
  RangeExecutor e;
  for (uintptr_t k = 0; k < 6; ++k) e.allocations.push_back({0x100000 * (k + 1), 4096});
  Executor::CheckedAllocations checked;
  for (const Executor::CheckedRange& a : e.allocations) checked.check(e, 0, at(a.base), 8, "buffer", nullptr);
  checked.check(e, 0, at(e.allocations[5].base + 8), 8, "in the last", nullptr);  // kept
  checked.check(e, 0, at(e.allocations[0].base + 8), 8, "in the first", nullptr);  // dropped: asked again
  ASSERT_EQ(e.asked.size(), 7u);
  EXPECT_EQ(e.asked.back(), at(e.allocations[0].base + 8));
}
