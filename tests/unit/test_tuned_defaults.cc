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

// Knobs the caller left alone take the production row's values; its rows equal Config's defaults today, so the test
// moves them off first (the synthetic-table tests below cover rows that differ from the defaults).
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

// The production rows all equal Config's defaults today, so the tests above cannot see a row being ignored. These
// give applyTunedDefaults a table whose rows differ from Config{} (and from each other) in every knob.
std::vector<TunedDefaults> syntheticTable() {
  const Config d;
  return {
      {1, d.lanes, d.singleStreamBytes, d.minChunkBytes, d.smallMessageBytes, "synthetic row 1: the defaults"},
      {2, 1, d.singleStreamBytes + 111, d.minChunkBytes + 222, d.smallMessageBytes + 333,
       "synthetic row 2: every knob off the defaults"},
      {4, 1, size_t{5} << 20, size_t{16} << 20, size_t{8} << 10, "synthetic row 4: other values again"},
  };
}

void expectKnobsOf(const Config& config, const TunedDefaults& row, unsigned keptBits, const Config& before) {
  EXPECT_EQ(config.lanes, (keptBits & kKnobLanes) ? before.lanes : row.lanes);
  EXPECT_EQ(config.singleStreamBytes,
            (keptBits & kKnobSingleStreamBytes) ? before.singleStreamBytes : row.singleStreamBytes);
  EXPECT_EQ(config.minChunkBytes, (keptBits & kKnobMinChunkBytes) ? before.minChunkBytes : row.minChunkBytes);
  EXPECT_EQ(config.smallMessageBytes,
            (keptBits & kKnobSmallMessageBytes) ? before.smallMessageBytes : row.smallMessageBytes);
}

TEST(TunedDefaults, SyntheticTableRowsDifferInEveryKnob) {
  // Guards the test table itself: were a row equal to the defaults in some knob, ignoring that knob would pass.
  const std::vector<TunedDefaults> rows = syntheticTable();
  const Config d;
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_NE(rows[i].lanes, d.lanes) << "row " << i;
    EXPECT_NE(rows[i].singleStreamBytes, d.singleStreamBytes) << "row " << i;
    EXPECT_NE(rows[i].minChunkBytes, d.minChunkBytes) << "row " << i;
    EXPECT_NE(rows[i].smallMessageBytes, d.smallMessageBytes) << "row " << i;
    EXPECT_NE(rows[i].singleStreamBytes, rows[i - 1].singleStreamBytes) << "row " << i;
    EXPECT_NE(rows[i].minChunkBytes, rows[i - 1].minChunkBytes) << "row " << i;
    EXPECT_NE(rows[i].smallMessageBytes, rows[i - 1].smallMessageBytes) << "row " << i;
  }
}

// From Config's defaults (what a communicator holds before its GPUs are known), every knob the caller did not set
// takes the row's value: for each GPU count and each of the 16 subsets of explicit knobs.
TEST(TunedDefaults, EveryUnsetKnobFollowsTheRowOfAGivenTable) {
  const std::vector<TunedDefaults> rows = syntheticTable();
  for (int gpus : {1, 2, 3, 4, 8}) {
    const TunedDefaults& row = tunedDefaultsFor(gpus, rows);
    EXPECT_EQ(row.gpus, gpus >= 4 ? 4 : gpus >= 2 ? 2 : 1);
    for (unsigned bits = 0; bits < 16; ++bits) {
      Config config;
      config.explicitKnobs = bits;
      const Config before = config;
      const std::string line = applyTunedDefaults(config, gpus, rows);
      SCOPED_TRACE(std::to_string(gpus) + " GPUs, explicit knobs " + std::to_string(bits) + ": " + line);
      expectKnobsOf(config, row, bits, before);
      EXPECT_EQ(config.explicitKnobs, bits);
      EXPECT_NE(line.find("table row " + std::to_string(row.gpus)), std::string::npos);
      EXPECT_NE(line.find(row.evidence), std::string::npos);
      const std::string lanes = "lanes " + std::to_string(config.lanes) + ((bits & kKnobLanes) ? " (set by" : ",");
      EXPECT_NE(line.find(lanes), std::string::npos);
    }
  }
}

// The caller's values win over a row that differs from them, whatever they are.
TEST(TunedDefaults, ExplicitKnobsKeepTheCallersValuesAgainstAGivenTable) {
  const std::vector<TunedDefaults> rows = syntheticTable();
  const TunedDefaults& row = tunedDefaultsFor(2, rows);
  for (unsigned bits = 0; bits < 16; ++bits) {
    Config config;
    config.lanes = 2;
    config.singleStreamBytes = 7777;
    config.minChunkBytes = 88888;
    config.smallMessageBytes = 999;
    config.explicitKnobs = bits;
    const Config before = config;
    applyTunedDefaults(config, 2, rows);
    SCOPED_TRACE("explicit knobs " + std::to_string(bits));
    expectKnobsOf(config, row, bits, before);
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
