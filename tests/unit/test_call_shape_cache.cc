// The pure half of the CUDA executor's graph cache (exec/call_shape_cache.h): what makes two calls the same shape,
// and the bounded least-recently-used cache of what was built per shape. The CUDA half (capture, replay) runs in
// tests/gpu/test_gpu_graph_cache.cc.
#include "exec/call_shape_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

namespace conccl::exec {
namespace {

// Two ranks, each with a sendbuff and a recvbuff, in distinct allocations 1..4.
CallBinding twoRankBinding() {
  CallBinding b;
  static char mem[4][64];
  b.buffers = {{mem[0], mem[1]}, {mem[2], mem[3]}};
  b.streams = {nullptr, nullptr};
  b.bufferIds = {{1, 2}, {3, 4}};
  return b;
}

CallShape shapeOf(uint64_t scheduleId, int rank, const CallBinding& binding) {
  CallShape s;
  EXPECT_TRUE(makeCallShape(scheduleId, rank, binding, s));
  return s;
}

TEST(CallShape, EqualCallsHaveEqualShapes) {
  const CallBinding b = twoRankBinding();
  const CallShape a = shapeOf(7, 0, b), c = shapeOf(7, 0, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(a.hash(), c.hash());
}

TEST(CallShape, ScheduleRankPointerAndAllocationEachMatter) {
  const CallBinding b = twoRankBinding();
  const CallShape base = shapeOf(7, 0, b);
  EXPECT_FALSE(shapeOf(8, 0, b) == base) << "another schedule";
  EXPECT_FALSE(shapeOf(7, 1, b) == base) << "another rank's program";
  CallBinding moved = b;
  moved.buffers[1][1] = static_cast<char*>(moved.buffers[1][1]) + 4;  // a peer's recvbuff elsewhere
  EXPECT_FALSE(shapeOf(7, 0, moved) == base) << "a peer's buffer moved";
  CallBinding reallocated = b;
  reallocated.bufferIds[0][0] = 99;  // same address, new allocation (freed and allocated again)
  EXPECT_FALSE(shapeOf(7, 0, reallocated) == base) << "same address, another allocation";
}

TEST(CallShape, StreamsAreNotPartOfTheShape) {
  // A graph is launched into whatever stream the call names.
  const CallBinding b = twoRankBinding();
  CallBinding other = b;
  other.streams = {reinterpret_cast<cudaStream_t>(0x10), reinterpret_cast<cudaStream_t>(0x20)};
  EXPECT_EQ(shapeOf(7, 0, other), shapeOf(7, 0, b));
}

TEST(CallShape, BuffersTheProgramDoesNotTouchAreIgnored) {
  // An in-place rank's alias (or a non-root's unused buffer) may hold any address: the graph never names it.
  CallBinding b = twoRankBinding();
  b.bufferIds[1][0] = kBufferNotUsed;
  const CallShape base = shapeOf(7, 0, b);
  CallBinding other = b;
  other.buffers[1][0] = reinterpret_cast<void*>(0x1234);
  EXPECT_EQ(shapeOf(7, 0, other), base);
}

TEST(CallShape, RefusedWithoutScheduleIdOrWithAnUnnamedAllocation) {
  CallBinding b = twoRankBinding();
  CallShape s;
  EXPECT_FALSE(makeCallShape(0, 0, b, s)) << "hand-made schedules have no id";
  b.bufferIds[1][1] = kAllocationUnknown;
  EXPECT_FALSE(makeCallShape(7, 0, b, s)) << "an allocation the driver could not name";
}

TEST(CallShape, WithoutAllocationIdsTheAddressesDecide) {
  // Several processes: the binding has no ids; the executor drops its graphs when mappings change instead.
  CallBinding b = twoRankBinding();
  b.bufferIds.clear();
  const CallShape base = shapeOf(7, 0, b);
  EXPECT_EQ(shapeOf(7, 0, b), base);
  CallBinding moved = b;
  moved.buffers[0][0] = static_cast<char*>(moved.buffers[0][0]) + 1;
  EXPECT_FALSE(shapeOf(7, 0, moved) == base);
}

TEST(CallShape, ReuseDoesNotKeepOldWords) {
  const CallBinding b = twoRankBinding();
  CallShape s;
  ASSERT_TRUE(makeCallShape(7, 0, b, s));
  ASSERT_TRUE(makeCallShape(7, 1, b, s));
  EXPECT_EQ(s, shapeOf(7, 1, b));
  EXPECT_EQ(s.hash(), shapeOf(7, 1, b).hash());
}

CallShape numbered(uint64_t n) {
  CallShape s;
  s.add(n);
  return s;
}

// Counts live values, so that eviction and clearing are seen to destroy what was built.
struct Tracked {
  explicit Tracked(int* live) : live_(live) { ++*live_; }
  Tracked(Tracked&& o) noexcept : live_(std::exchange(o.live_, nullptr)) {}
  Tracked& operator=(Tracked&&) = delete;
  Tracked(const Tracked&) = delete;
  ~Tracked() {
    if (live_ != nullptr) --*live_;
  }
  int* live_;
};

TEST(CallShapeCache, CountsUsesPerShape) {
  CallShapeCache<int> cache(4);
  EXPECT_EQ(cache.use(numbered(1)).uses, 1u);
  EXPECT_EQ(cache.use(numbered(1)).uses, 2u);
  EXPECT_EQ(cache.use(numbered(2)).uses, 1u);
  EXPECT_EQ(cache.use(numbered(1)).uses, 3u);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(CallShapeCache, EvictsTheLeastRecentlyUsedAndDestroysItsValue) {
  int live = 0;
  CallShapeCache<Tracked> cache(2);
  cache.use(numbered(1)).value.emplace(&live);
  cache.use(numbered(2)).value.emplace(&live);
  EXPECT_EQ(live, 2);
  cache.use(numbered(1));  // 1 is now the most recently used: 2 goes first
  cache.use(numbered(3));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_EQ(live, 1);
  auto& one = cache.use(numbered(1));
  EXPECT_TRUE(one.value.has_value()) << "shape 1 kept its value";
  EXPECT_EQ(one.uses, 3u);
  auto& two = cache.use(numbered(2));
  EXPECT_FALSE(two.value.has_value()) << "shape 2 was evicted and starts over";
  EXPECT_EQ(two.uses, 1u);
  cache.clear();
  EXPECT_EQ(live, 0);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(CallShapeCache, ManyShapesKeepTheirOwnValues) {
  CallShapeCache<int> cache(1000);
  for (uint64_t i = 0; i < 1000; ++i) cache.use(numbered(i)).value = static_cast<int>(i);
  for (uint64_t i = 0; i < 1000; ++i) {
    auto& e = cache.use(numbered(i));
    ASSERT_TRUE(e.value.has_value());
    EXPECT_EQ(*e.value, static_cast<int>(i));
  }
  EXPECT_EQ(cache.evictions(), 0u);
}

TEST(CallShapeCache, FindDoesNotCountButRefreshes) {
  CallShapeCache<int> cache(2);
  EXPECT_EQ(cache.find(numbered(1)), nullptr);
  EXPECT_EQ(cache.size(), 0u) << "find never inserts";
  cache.use(numbered(1));
  cache.use(numbered(2));
  auto* one = cache.find(numbered(1));
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->uses, 1u) << "find does not count a call";
  cache.use(numbered(3));  // evicts 2, the least recently used since find touched 1
  EXPECT_NE(cache.find(numbered(1)), nullptr);
  EXPECT_EQ(cache.find(numbered(2)), nullptr);
}

TEST(CallShapeCache, RefusedShapesStayRefused) {
  CallShapeCache<int> cache(4);
  cache.use(numbered(5)).refused = true;
  EXPECT_TRUE(cache.use(numbered(5)).refused);
}

TEST(CallShapeCache, ForEachValueSeesOnlyBuiltValues) {
  CallShapeCache<int> cache(8);
  cache.use(numbered(1)).value = 10;
  cache.use(numbered(2));
  cache.use(numbered(3)).value = 30;
  int sum = 0, count = 0;
  cache.forEachValue([&](int& v) {
    sum += v;
    ++count;
  });
  EXPECT_EQ(count, 2);
  EXPECT_EQ(sum, 40);
}

TEST(CallShapeCache, CapacityZeroMeansOne) {
  // The executor does not make a cache when the knob is 0; a cache asked for 0 still works (holds one shape).
  CallShapeCache<int> cache(0);
  cache.use(numbered(1));
  cache.use(numbered(2));
  EXPECT_EQ(cache.size(), 1u);
}

}  // namespace
}  // namespace conccl::exec
