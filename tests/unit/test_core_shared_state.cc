// CPU tests of two pieces of src/core that the multi-process and the hot path rely on: the shared-memory
// segment (what /dev/shm holds, and when it stops holding it) and the schedule cache.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <string>

#include "core/clique.h"
#include "base/error.h"
#include "core/shared_segment.h"

namespace conccl {
namespace {

std::string uniqueName(const char* what) {
  return "/conccl-test-" + std::string(what) + "-" + std::to_string(getpid());
}

bool shmExists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

TEST(SharedSegment, CreateZeroedOpenSharedUnlink) {
  const std::string name = uniqueName("basic");
  SharedSegment a = SharedSegment::create(name, 8192);
  EXPECT_TRUE(shmExists(name));
  const auto* bytes = static_cast<const unsigned char*>(a.data());
  for (size_t i = 0; i < a.bytes(); ++i) ASSERT_EQ(bytes[i], 0) << "byte " << i << " not zero";
  SharedSegment b = SharedSegment::open(name, 8192);
  static_cast<int*>(a.data())[7] = 1234;  // one memory, two mappings
  EXPECT_EQ(static_cast<int*>(b.data())[7], 1234);
  a.unlink();
  EXPECT_FALSE(shmExists(name));
  a.unlink();  // idempotent
  static_cast<int*>(b.data())[8] = 99;  // the mappings outlive the name
  EXPECT_EQ(static_cast<int*>(a.data())[8], 99);
}

TEST(SharedSegment, TheCreatorRemovesTheNameWhenDestroyedBeforeUnlinking) {
  const std::string name = uniqueName("dtor");
  { SharedSegment a = SharedSegment::create(name, 4096); }
  EXPECT_FALSE(shmExists(name));
  // An opener never removes the name.
  SharedSegment creator = SharedSegment::create(name, 4096);
  { SharedSegment opener = SharedSegment::open(name, 4096); }
  EXPECT_TRUE(shmExists(name));
  creator.unlink();
}

TEST(SharedSegment, ErrorsAreReportedNotCrashedOn) {
  const std::string name = uniqueName("errors");
  SharedSegment a = SharedSegment::create(name, 4096);
  try {
    SharedSegment::create(name, 4096);  // exists already
    FAIL() << "creating an existing segment must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclSystemError);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_THROW(SharedSegment::open(name, 8192), Error);  // wrong size
  EXPECT_THROW(SharedSegment::open(uniqueName("missing"), 4096), Error);
  a.unlink();
}

TEST(SharedSegment, AnotherProcessSeesTheWrites) {
  const std::string name = uniqueName("fork");
  SharedSegment a = SharedSegment::create(name, 4096);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 1;
    try {
      SharedSegment b = SharedSegment::open(name, 4096);
      static_cast<volatile int*>(b.data())[0] = 42;
      code = 0;
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(static_cast<volatile int*>(a.data())[0], 42);
  a.unlink();
}

sched::CollectiveCall allReduce(size_t count, int n) {
  sched::CollectiveCall call;
  call.kind = sched::CollKind::kAllReduce;
  call.nranks = n;
  call.count = count;
  call.inPlace.assign(static_cast<size_t>(n), false);
  return call;
}

TEST(ScheduleCache, SameShapeSameScheduleOtherShapeOther) {
  ScheduleCache cache{sched::BuildOptions{}};
  auto a = cache.get(allReduce(1000, 3));
  auto b = cache.get(allReduce(1000, 3));
  EXPECT_EQ(a.get(), b.get());  // built once
  auto inPlace = allReduce(1000, 3);
  inPlace.inPlace[1] = true;
  EXPECT_NE(cache.get(inPlace).get(), a.get());
  EXPECT_NE(cache.get(allReduce(1001, 3)).get(), a.get());
  auto sum = allReduce(1000, 3);
  sum.op = concclMax;
  EXPECT_NE(cache.get(sum).get(), a.get());
  // A cached schedule is the one buildSchedule makes.
  sched::Schedule fresh = sched::buildSchedule(allReduce(1000, 3), sched::BuildOptions{});
  EXPECT_EQ(a->algorithm, fresh.algorithm);
  ASSERT_EQ(a->programs.size(), fresh.programs.size());
  for (size_t r = 0; r < fresh.programs.size(); ++r) EXPECT_EQ(a->programs[r].ops.size(), fresh.programs[r].ops.size());
}

TEST(ScheduleCache, ACopyEnginePinnedScheduleIsCachedApartWithItsPeersUnbounded) {
  sched::BuildOptions options;
  options.peerReads = true;  // as a process clique whose processes read each other's memory
  ScheduleCache cache{options};
  auto call = allReduce(1000, 3);
  call.callOwner = 2;  // a late reduction: its programs are built from mirrors of the peers
  auto plain = cache.get(call);
  auto pinned = cache.get(call, /*copyEnginesFor=*/1);
  EXPECT_NE(pinned.get(), plain.get());
  EXPECT_NE(pinned->id, plain->id) << "executors cache derived work by id: the two differ in their sizes";
  EXPECT_EQ(cache.get(call, 1).get(), pinned.get()) << "built once";
  EXPECT_NE(cache.get(call, 0).get(), pinned.get()) << "another rank's view";
  ASSERT_EQ(pinned->workBytes.size(), plain->workBytes.size());
  for (size_t r = 0; r < pinned->workBytes.size(); ++r) {
    if (r == 1) {
      EXPECT_EQ(pinned->workBytes[r], plain->workBytes[r]);
    } else {
      EXPECT_EQ(pinned->workBytes[r], std::numeric_limits<size_t>::max()) << "rank " << r;
    }
  }
  ASSERT_EQ(pinned->programs.size(), plain->programs.size());
  for (size_t r = 0; r < plain->programs.size(); ++r) {
    EXPECT_EQ(pinned->programs[r].ops.size(), plain->programs[r].ops.size()) << "the same programs";
  }
}

TEST(ScheduleCache, AllToAllvCountsArePartOfTheShapeAndErrorsAreNotCached) {
  ScheduleCache cache{sched::BuildOptions{}};
  sched::CollectiveCall v;
  v.kind = sched::CollKind::kAllToAllv;
  v.nranks = 2;
  v.inPlace.assign(2, false);
  v.sendCounts = {{1, 2}, {3, 4}};
  v.sendDispls = {{0, 1}, {0, 3}};
  v.recvCounts = {{1, 3}, {2, 4}};
  v.recvDispls = {{0, 1}, {0, 2}};
  auto a = cache.get(v);
  auto w = v;
  w.sendCounts = {{1, 5}, {3, 4}};
  w.recvCounts = {{1, 3}, {5, 4}};
  w.recvDispls = {{0, 1}, {0, 5}};
  EXPECT_NE(cache.get(w).get(), a.get());
  auto bad = v;
  bad.recvCounts = {{1, 3}, {9, 4}};  // rank 1 expects 9 from rank 0, which sends 2
  EXPECT_THROW(cache.get(bad), Error);
  EXPECT_THROW(cache.get(bad), Error);  // still an error: nothing was cached
}

}  // namespace
}  // namespace conccl
