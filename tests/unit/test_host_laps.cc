// HostLaps (base/host_laps.h): a call's host time split into named laps under CONCCL_DEBUG=TRACE, and tallied per key
// with CONCCL_HOST_LAPS=1.
//
// The log level is read once per process, at the first use: this file sets CONCCL_DEBUG before anything can log
// (ctest runs each test in its own process; run alone, the binary's tests share the TRACE level, which they all want).
#include "base/host_laps.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/group.h"

namespace conccl {
namespace {

class HostLapsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(setenv("CONCCL_DEBUG", "TRACE", 1), 0);
    ASSERT_EQ(setenv("CONCCL_HOST_LAPS", "1", 1), 0);
  }
};

TEST_F(HostLapsTest, LapsAreNamedTimedAndSumToTheTotal) {
  ASSERT_TRUE(HostLaps::start());
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  HostLaps::lap("first");
  HostLaps::lap("second");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  HostLaps::lap("third");
  const std::string text = HostLaps::take();
  std::smatch m;
  ASSERT_TRUE(std::regex_match(text, m, std::regex(R"(first (\d+) us, second (\d+) us, third (\d+) us, total (\d+) us)")))
      << text;
  const long first = std::stol(m[1]), second = std::stol(m[2]), third = std::stol(m[3]), total = std::stol(m[4]);
  EXPECT_GE(first, 3000);
  EXPECT_LT(second, 1000);  // nothing happened between the marks
  EXPECT_GE(third, 2000);
  EXPECT_GE(total, first + second + third - 2);  // rounding of each lap
  EXPECT_EQ(HostLaps::take(), "") << "take() closes the record";
}

TEST_F(HostLapsTest, NestedStartKeepsTheOuterRecordAndDropCloses) {
  ASSERT_TRUE(HostLaps::start());
  HostLaps::lap("outer");
  EXPECT_FALSE(HostLaps::start()) << "an inner API call must not restart the outer call's record";
  HostLaps::lap("inner");
  const std::string text = HostLaps::take();
  EXPECT_NE(text.find("outer "), std::string::npos) << text;
  EXPECT_NE(text.find(", inner "), std::string::npos) << text;
  ASSERT_TRUE(HostLaps::start());
  HostLaps::drop();
  HostLaps::lap("after drop");
  EXPECT_EQ(HostLaps::take(), "");
}

TEST_F(HostLapsTest, ManyLapsFoldIntoTheLastSlot) {
  ASSERT_TRUE(HostLaps::start());
  for (size_t i = 0; i < HostLaps::kMaxLaps + 8; ++i) HostLaps::lap("step");
  const std::string text = HostLaps::take();
  size_t laps = 0;
  for (size_t at = text.find("step "); at != std::string::npos; at = text.find("step ", at + 1)) ++laps;
  EXPECT_EQ(laps, HostLaps::kMaxLaps) << text;
  EXPECT_NE(text.find("total "), std::string::npos);
}

TEST_F(HostLapsTest, RecordsArePerThread) {
  ASSERT_TRUE(HostLaps::start());
  HostLaps::lap("main");
  std::string other;
  std::thread t([&] {
    HostLaps::lap("no record here");
    other = HostLaps::take();
  });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_NE(HostLaps::take().find("main "), std::string::npos);
}

TEST_F(HostLapsTest, TallyGivesEachKeysMediansAndEmpties) {
  ASSERT_TRUE(HostLaps::tallying());
  (void)HostLaps::tallyLines();  // whatever an earlier test left
  // Three calls of one key: "wait" takes 2, 12 and 4 ms (median 4 ms; far enough from the largest that a loaded CPU's
  // late wake-ups do not blur them); a lap named twice in a call counts once, summed (2 x 1 ms); "rare" is in one call
  // only. One call of another key.
  const int waitMs[] = {2, 12, 4};
  ASSERT_TRUE(HostLaps::start());  // a call that returns just before: the calls below are not after an idle wait
  HostLaps::drop();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(HostLaps::start());
    std::this_thread::sleep_for(std::chrono::milliseconds(waitMs[i]));
    HostLaps::lap("wait");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    HostLaps::lap("twice");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    HostLaps::lap("twice");
    if (i == 0) HostLaps::lap("rare");
    // The time between the last mark and tally() (making the key, in the library) is measurement, not the call.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    HostLaps::tally("concclAllReduce 64 MiB");
    EXPECT_NE(HostLaps::take(), "") << "the TRACE line at the launch";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    HostLaps::drop();  // the call returns: the "return" lap, then the tally
  }
  ASSERT_TRUE(HostLaps::start());
  HostLaps::lap("other");
  HostLaps::tally("concclBroadcast 1 KiB");
  HostLaps::drop();
  ASSERT_TRUE(HostLaps::start());
  HostLaps::lap("not launched");
  HostLaps::drop();  // no tally key: not tallied

  const std::vector<std::string> lines = HostLaps::tallyLines();
  ASSERT_EQ(lines.size(), 2u);
  std::smatch m;
  const std::regex firstKey(R"(concclAllReduce 64 MiB, 3 call\(s\), median: wait (\d+) us, twice (\d+) us, )"
                            R"(rare \d+ us \(1 calls\), return (\d+) us, total (\d+) us)");
  ASSERT_TRUE(std::regex_match(lines[0], m, firstKey)) << lines[0];
  EXPECT_GE(std::stol(m[1]), 4000);
  EXPECT_LT(std::stol(m[1]), 12000) << "the median of 2, 12 and 4 ms, not the largest";
  EXPECT_GE(std::stol(m[2]), 2000) << "both laps named twice, summed";
  EXPECT_GE(std::stol(m[3]), 1000) << "from the launch to drop()";
  EXPECT_GE(std::stol(m[4]), 5000);
  EXPECT_LT(std::stol(m[4]), std::stol(m[1]) + std::stol(m[2]) + std::stol(m[3]) + 10000)
      << "the 20 ms before tally() are left out of the total";
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(R"(concclBroadcast 1 KiB, 1 call\(s\), median: other \d+ us, )"
                                                    R"(return \d+ us, total \d+ us)")))
      << lines[1];
  EXPECT_TRUE(HostLaps::tallyLines().empty()) << "tallyLines() empties the tally";
}

// A group's calls before its end (concclGroupStart, the calls it queues) launch nothing: their time is the group end's
// first lap, and in its total, as the NCCL drop-in's own time for the group counts it.
TEST_F(HostLapsTest, TheGroupsEarlierCallsAreItsEndsFirstLap) {
  auto joiningCall = [](bool opens, int ms) {
    ASSERT_TRUE(HostLaps::start());
    HostLaps::joinGroup(opens);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    HostLaps::drop();
  };
  joiningCall(true, 2);   // concclGroupStart
  joiningCall(false, 3);  // a queued call
  ASSERT_TRUE(HostLaps::start());
  HostLaps::endGroup();
  HostLaps::lap("launch");
  std::string text = HostLaps::take();
  HostLaps::drop();
  std::smatch m;
  const std::regex groupLine(std::string(HostLaps::kGroupCallsLap) + R"( (\d+) us, launch \d+ us, total (\d+) us)");
  ASSERT_TRUE(std::regex_match(text, m, groupLine)) << text;
  EXPECT_GE(std::stol(m[1]), 5000) << "both calls before the end";
  EXPECT_GE(std::stol(m[2]), std::stol(m[1])) << "the total spans the group";

  // Taken once: the next call, in a group or not, starts from nothing.
  ASSERT_TRUE(HostLaps::start());
  HostLaps::lap("alone");
  text = HostLaps::take();
  HostLaps::drop();
  EXPECT_EQ(text.find(HostLaps::kGroupCallsLap), std::string::npos) << text;

  // A group that launched nothing (discarded) leaves nothing for the next group: its start drops what was carried.
  joiningCall(true, 30);
  joiningCall(true, 1);
  ASSERT_TRUE(HostLaps::start());
  HostLaps::endGroup();
  HostLaps::lap("launch");
  text = HostLaps::take();
  HostLaps::drop();
  ASSERT_TRUE(std::regex_match(text, m, groupLine)) << text;
  EXPECT_GE(std::stol(m[1]), 1000);
  EXPECT_LT(std::stol(m[1]), 20000) << "the discarded group's 30 ms are not this group's";

  // A group end that launched nothing drops what its calls carried.
  joiningCall(true, 5);
  ASSERT_TRUE(HostLaps::start());
  HostLaps::endGroup();
  HostLaps::drop();
  ASSERT_TRUE(HostLaps::start());
  HostLaps::endGroup();  // an end without a start of its own (refused by the group layer): nothing carried
  HostLaps::lap("launch");
  text = HostLaps::take();
  HostLaps::drop();
  EXPECT_EQ(text.find(HostLaps::kGroupCallsLap), std::string::npos) << text;
}

// The group layer marks its records (core/group.cc): concclGroupStart and a nested level join, the outermost end
// ends. Here the end's launch is played by take() in the same record (no communicator, so groupEnd launches nothing).
TEST_F(HostLapsTest, GroupStartAndEndMarkTheirRecords) {
  auto apiCall = [](void (*body)(), int ms) {
    ASSERT_TRUE(HostLaps::start());
    body();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    HostLaps::drop();
  };
  apiCall(groupStart, 2);
  apiCall(groupStart, 2);  // nested
  apiCall(groupEnd, 2);    // the nested level's end
  ASSERT_TRUE(HostLaps::start());
  groupEnd();
  HostLaps::lap("launch");
  const std::string text = HostLaps::take();
  HostLaps::drop();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(std::string("^") + HostLaps::kGroupCallsLap + R"( (\d+) us, )")))
      << text;
  EXPECT_GE(std::stol(m[1]), 6000) << "the three calls before the outermost end";
  EXPECT_FALSE(inGroup());
}

TEST_F(HostLapsTest, TheGroupsEarlierCallsAreTalliedAndFitAFullRecord) {
  ASSERT_TRUE(HostLaps::tallying());
  (void)HostLaps::tallyLines();
  ASSERT_TRUE(HostLaps::start());
  HostLaps::joinGroup(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  HostLaps::drop();
  ASSERT_TRUE(HostLaps::start());
  HostLaps::endGroup();
  for (size_t i = 0; i < HostLaps::kMaxLaps; ++i) HostLaps::lap("step");
  HostLaps::tally("concclSend 1 MiB");
  HostLaps::drop();
  const std::vector<std::string> lines = HostLaps::tallyLines();
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(lines[0], m,
                                std::regex(std::string("median: ") + HostLaps::kGroupCallsLap + R"( (\d+) us, step)")))
      << lines[0];
  EXPECT_GE(std::stol(m[1]), 2000) << "the first lap, the last two steps folded into one to make room";
}

TEST_F(HostLapsTest, CallsAfterAnIdleWaitAreTalliedApart) {
  ASSERT_TRUE(HostLaps::tallying());
  (void)HostLaps::tallyLines();
  auto call = [](const char* key) {
    ASSERT_TRUE(HostLaps::start());
    HostLaps::lap("work");
    HostLaps::tally(key);
    HostLaps::drop();
  };
  call("concclAllReduce 1 MiB");  // whatever came before it
  std::this_thread::sleep_for(std::chrono::milliseconds(HostLaps::kIdleGapMs + 5));
  call("concclAllReduce 1 MiB");  // after an idle wait
  call("concclAllReduce 1 MiB");  // back to back
  call("concclAllReduce 1 MiB");
  const std::vector<std::string> lines = HostLaps::tallyLines();
  size_t idle = 0, backToBack = 0;
  for (const std::string& line : lines) {
    if (line.rfind(std::string("concclAllReduce 1 MiB") + HostLaps::kAfterIdleSuffix + ", ", 0) == 0) {
      idle += static_cast<size_t>(std::stoul(line.substr(line.find(", ") + 2)));
    } else if (line.rfind("concclAllReduce 1 MiB, ", 0) == 0) {
      backToBack = static_cast<size_t>(std::stoul(line.substr(line.find(", ") + 2)));
    }
  }
  EXPECT_GE(idle, 1u) << "the call after the wait";
  EXPECT_LE(idle, 2u) << "and at most the first one (whatever came before it)";
  EXPECT_GE(backToBack, 2u);
  EXPECT_EQ(idle + backToBack, 4u);
}

}  // namespace
}  // namespace conccl
