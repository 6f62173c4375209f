// The per-GPU-count defaults (core/tuned_defaults.h): the table's shape, which row a GPU count reads, that a knob the
// caller set (config field or environment) is never overridden, and the INFO line that says what is in effect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/tuned_defaults.h"

namespace conccl {
namespace {

TEST(TunedDefaults, TableStartsAtOneGpuAscendsAndNeverRaisesLanes) {
  const std::vector<TunedDefaults>& rows = tunedDefaultsTable();
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().gpus, 1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const TunedDefaults& row = rows[i];
    if (i > 0) {
      EXPECT_GT(row.gpus, rows[i - 1].gpus) << "row " << i;
    }
    // A process communicator sizes its flags from the lanes before it knows its GPUs: a row may only lower them.
    EXPECT_GE(row.lanes, 1) << "row " << i;
    EXPECT_LE(row.lanes, Config{}.lanes) << "row " << i;
    EXPECT_GE(row.minChunkBytes, size_t{4096}) << "row " << i;  // CONCCL_MIN_CHUNK_BYTES's lower bound
    ASSERT_NE(row.evidence, nullptr);
    EXPECT_GT(std::string(row.evidence).size(), 10u) << "row " << i << " says nothing of where it comes from";
  }
}

TEST(TunedDefaults, EachGpuCountReadsTheLastRowAtOrBelowIt) {
  const std::vector<TunedDefaults>& rows = tunedDefaultsTable();
  EXPECT_EQ(&tunedDefaultsFor(0), &rows.front());
  EXPECT_EQ(&tunedDefaultsFor(-3), &rows.front());
  for (int gpus = 1; gpus <= 72; ++gpus) {
    const TunedDefaults* want = &rows.front();
    for (const TunedDefaults& row : rows) {
      if (row.gpus <= gpus) want = &row;
    }
    EXPECT_EQ(&tunedDefaultsFor(gpus), want) << gpus << " GPUs";
    EXPECT_LE(tunedDefaultsFor(gpus).gpus, gpus);
  }
  EXPECT_EQ(tunedDefaultsFor(2).gpus, 2);
  EXPECT_EQ(tunedDefaultsFor(3).gpus, 2);
  EXPECT_EQ(tunedDefaultsFor(8).gpus, 8);
}

// Config's member initialisers are documented as the 2-GPU row (what a communicator uses before its GPUs are known).
TEST(TunedDefaults, ConfigDefaultsAreTheTwoGpuRow) {
  const Config config;
  const TunedDefaults& row = tunedDefaultsFor(2);
  EXPECT_EQ(config.lanes, row.lanes);
  EXPECT_EQ(config.singleStreamBytes, row.singleStreamBytes);
  EXPECT_EQ(config.minChunkBytes, row.minChunkBytes);
  EXPECT_EQ(config.smallMessageBytes, row.smallMessageBytes);
  EXPECT_EQ(config.explicitKnobs, 0u);
}

TEST(TunedDefaults, DistinctGpuCount) {
  EXPECT_EQ(distinctGpuCount({}), 0);
  EXPECT_EQ(distinctGpuCount({0, 0, 0}), 1);
  EXPECT_EQ(distinctGpuCount({0, 1, 0, 1}), 2);
  EXPECT_EQ(distinctGpuCount({3, 1, 2, 0, 7, 6, 5, 4}), 8);
  EXPECT_EQ(distinctGpuCount({-1, -1}), 0);  // the host backend's ranks have no device
}

// Knobs the caller left alone take the row's values; the rows agree today, so the test moves them off first.
TEST(TunedDefaults, UnsetKnobsTakeTheRow) {
  for (int gpus : {1, 2, 4, 8, 16}) {
    Config config;
    config.lanes = 1;
    config.singleStreamBytes = 12345;
    config.minChunkBytes = 999999;
    config.smallMessageBytes = 77;
    const std::string line = applyTunedDefaults(config, gpus);
    const TunedDefaults& row = tunedDefaultsFor(gpus);
    EXPECT_EQ(config.lanes, row.lanes);
    EXPECT_EQ(config.singleStreamBytes, row.singleStreamBytes);
    EXPECT_EQ(config.minChunkBytes, row.minChunkBytes);
    EXPECT_EQ(config.smallMessageBytes, row.smallMessageBytes);
    EXPECT_NE(line.find("defaults for " + std::to_string(gpus) + " GPU(s), table row " + std::to_string(row.gpus)),
              std::string::npos)
        << line;
    EXPECT_EQ(line.find("set by the caller"), std::string::npos) << line;
    EXPECT_NE(line.find(row.evidence), std::string::npos) << line;
  }
}

TEST(TunedDefaults, KnobsFromTheEnvironmentAreKept) {
  setenv("CONCCL_LANES", "1", 1);
  setenv("CONCCL_SINGLE_STREAM_BYTES", "256K", 1);
  setenv("CONCCL_MIN_CHUNK_BYTES", "1M", 1);
  setenv("CONCCL_SMALL_MESSAGE_BYTES", "0", 1);
  Config config = resolveConfig(nullptr, /*cudaAvailable=*/false);
  unsetenv("CONCCL_LANES");
  unsetenv("CONCCL_SINGLE_STREAM_BYTES");
  unsetenv("CONCCL_MIN_CHUNK_BYTES");
  unsetenv("CONCCL_SMALL_MESSAGE_BYTES");
  EXPECT_EQ(config.explicitKnobs,
            unsigned{kKnobLanes | kKnobSingleStreamBytes | kKnobMinChunkBytes | kKnobSmallMessageBytes});
  const std::string line = applyTunedDefaults(config, 8);
  EXPECT_EQ(config.lanes, 1);
  EXPECT_EQ(config.singleStreamBytes, size_t{256} << 10);
  EXPECT_EQ(config.minChunkBytes, size_t{1} << 20);
  EXPECT_EQ(config.smallMessageBytes, 0u);
  EXPECT_NE(line.find("lanes 1 (set by the caller)"), std::string::npos) << line;
  EXPECT_NE(line.find("singleStreamBytes 256 KiB (set by the caller)"), std::string::npos) << line;
  EXPECT_NE(line.find("minChunkBytes 1 MiB (set by the caller)"), std::string::npos) << line;
  EXPECT_NE(line.find("smallMessageBytes 0 B (set by the caller)"), std::string::npos) << line;
}

TEST(TunedDefaults, FieldsOfTheCallersStructAreKept) {
  concclConfig_t user = CONCCL_CONFIG_INITIALIZER;
  user.lanes = 1;
  user.smallMessageBytes = 4096;
  Config config = resolveConfig(&user, /*cudaAvailable=*/false);
  EXPECT_EQ(config.explicitKnobs, unsigned{kKnobLanes | kKnobSmallMessageBytes});
  config.singleStreamBytes = 1;  // not the caller's: the row's value replaces it
  applyTunedDefaults(config, 4);
  EXPECT_EQ(config.lanes, 1);
  EXPECT_EQ(config.smallMessageBytes, 4096u);
  EXPECT_EQ(config.singleStreamBytes, tunedDefaultsFor(4).singleStreamBytes);
}

}  // namespace
}  // namespace conccl
