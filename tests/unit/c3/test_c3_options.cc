// conccl-c3's option parsing and scenario selection (tools/c3/c3_options.h).
#include <gtest/gtest.h>

#include <filesystem>

#include "c3_options.h"
#include "base/error.h"

namespace conccl::c3 {
namespace {

C3Options parse(const std::string& args) {
  CLI::App app;
  C3Options o;
  addC3Options(app, o);
  app.parse(args, false);
  return o;
}

TEST(C3Options, Defaults) {
  const C3Options o = parse("");
  EXPECT_EQ(o.ranks, 0);
  EXPECT_EQ(o.grid, "builtin");
  std::vector<Strategy> withAuto = allStrategies();
  withAuto.push_back(Strategy::kAuto);
  EXPECT_EQ(selectedStrategies(o), withAuto);
  EXPECT_EQ(o.rounds, 5);  // FACTS.md: >= 5 interleaved rounds
  EXPECT_TRUE(o.calibrationFile.empty());
  EXPECT_TRUE(o.calibrateFile.empty());
  EXPECT_FALSE(o.smSweep);
  EXPECT_NO_THROW(validateOptions(o));
  EXPECT_EQ(selectScenarios(o).size(), builtinGrid().size());
}

TEST(C3Options, ParsesEverything) {
  const C3Options o = parse(
      "-g 4 --devices 0,1,2,3 --strategies serial,nccl+RP,conccl --grid small --iters 7 --warmup 2 "
      "--json out.json --plot out.png --rp-coll-ctas 16 --rp-gemm-sms 112 --sm-sweep --sweep-sms 132,64 "
      "--filter ag --rounds 7 --calibration cal.json");
  EXPECT_EQ(o.ranks, 4);
  EXPECT_EQ(o.devices, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(selectedStrategies(o), (std::vector<Strategy>{Strategy::kSerial, Strategy::kNcclRp, Strategy::kConccl}));
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 2);
  EXPECT_EQ(o.rounds, 7);
  EXPECT_EQ(o.calibrationFile, "cal.json");
  EXPECT_EQ(o.jsonPath, "out.json");
  EXPECT_EQ(o.plotPath, "out.png");
  EXPECT_EQ(o.rpCollCtas, 16);
  EXPECT_EQ(o.rpGemmSms, 112);
  EXPECT_TRUE(o.smSweep);
  EXPECT_EQ(o.sweepSms, (std::vector<int>{132, 64}));
  EXPECT_NO_THROW(validateOptions(o));
  for (const Scenario& s : selectScenarios(o)) EXPECT_NE(s.name.find("ag"), std::string::npos);
}

TEST(C3Options, RejectsBadValues) {
  EXPECT_THROW(parse("--grid huge"), CLI::ValidationError);
  EXPECT_THROW(parse("--iters 0"), CLI::ValidationError);
  EXPECT_THROW(parse("--rounds 0"), CLI::ValidationError);
  EXPECT_THROW(validateOptions(parse("--sm-sweep --calibrate cal.json")), Error);
  EXPECT_THROW(parse("--ranks -1"), CLI::ValidationError);
  EXPECT_THROW(parse("--bogus"), CLI::ExtrasError);
  EXPECT_THROW(validateOptions(parse("--strategies nccl,foo")), Error);
  EXPECT_THROW(validateOptions(parse("-g 2 --devices 0,1,2")), Error);
  EXPECT_THROW(selectScenarios(parse("--filter no-such-scenario")), Error);
}

TEST(C3Options, ScenarioFileWinsOverGrid) {
  const auto path = std::filesystem::temp_directory_path() / "conccl_c3_options_test.json";
  saveScenarios(path.string(), smallGrid());
  const std::vector<Scenario> s = selectScenarios(parse("--grid builtin --scenarios " + path.string()));
  EXPECT_EQ(s, smallGrid());
  std::filesystem::remove(path);
  EXPECT_THROW(selectScenarios(parse("--scenarios " + path.string())), Error);
}

}  // namespace
}  // namespace conccl::c3
