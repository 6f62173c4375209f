// The built-in scenario grids and scenario JSON (src/c3/scenario.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "c3/scenario.h"
#include "base/error.h"

namespace conccl::c3 {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kGiB = uint64_t(1) << 30;

TEST(C3Grid, BuiltinCoversTheModelsKindsBoundsAndSizes) {
  const std::vector<Scenario> grid = builtinGrid();
  ASSERT_GE(grid.size(), 12u);
  EXPECT_NO_THROW(validateScenarios(grid));
  const MachineProfile h200 = MachineProfile::h200();
  std::set<CollKind> kinds;
  std::set<GemmBound> bounds;
  uint64_t minBytes = UINT64_MAX, maxBytes = 0;
  bool llama70 = false, llama405 = false, moe = false, fp8 = false;
  for (const Scenario& s : grid) {
    kinds.insert(s.coll.kind);
    bounds.insert(classifyGemm(s.gemm, h200));
    minBytes = std::min(minBytes, s.coll.bytes);
    maxBytes = std::max(maxBytes, s.coll.bytes);
    llama70 |= s.name.starts_with("llama70b");
    llama405 |= s.name.starts_with("llama405b");
    moe |= s.coll.kind == CollKind::kAllToAll;
    fp8 |= s.gemm.dtype == Dtype::kFp8E4M3;
    EXPECT_EQ(s.coll.ranks, 8) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
    // nccl-tests sizes must split evenly over the ranks, so that bytes are exactly what is moved.
    EXPECT_EQ(s.coll.callCount() * 8 * dtypeSize(s.coll.dtype), s.coll.bytes) << s.name;
  }
  EXPECT_TRUE(llama70 && llama405 && moe && fp8);
  EXPECT_EQ(kinds, (std::set<CollKind>{CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllToAll}));
  EXPECT_EQ(bounds.size(), 2u) << "needs both compute- and memory-bound GEMMs";
  EXPECT_LE(minBytes, 1 * kMiB);  // spans 1 MB ..
  EXPECT_GE(maxBytes, 512 * kMiB);
  EXPECT_LE(maxBytes, 1 * kGiB);  // .. 1 GB
}

TEST(C3Grid, ShapesComeFromTheModels) {
  const std::vector<Scenario> grid = builtinGrid();
  auto find = [&](const std::string& name) -> const Scenario& {
    for (const Scenario& s : grid) {
      if (s.name == name) return s;
    }
    ADD_FAILURE() << "no scenario " << name;
    return grid.front();
  };
  // TP=8 all-gather of 4096 tokens x hidden 8192 bf16 = 64 MiB beside the gate/up shard (2 x 28672 / 8).
  const Scenario& tp = find("llama70b-tp8-ag-t4096");
  EXPECT_EQ(tp.coll.bytes, 64 * kMiB);
  EXPECT_EQ(tp.gemm, (GemmShape{4096, 7168, 8192, Dtype::kBf16}));
  // FSDP gather of LLaMA-405B's fp8 up projection (16384 x 53248 bytes).
  EXPECT_EQ(find("llama405b-fsdp-ag-fp8-w1-t2048").coll.bytes, uint64_t(16384) * 53248);
  EXPECT_EQ(find("llama70b-tp8-rs-t64").coll.bytes, 1 * kMiB);
}

TEST(C3Grid, SmallGridAndNames) {
  EXPECT_NO_THROW(validateScenarios(smallGrid()));
  EXPECT_GE(smallGrid().size(), 3u);
  EXPECT_TRUE(gridByName("builtin").has_value());
  EXPECT_TRUE(gridByName("small").has_value());
  EXPECT_FALSE(gridByName("huge").has_value());
}

TEST(C3Scenario, ValidationRejectsBadScenarios) {
  Scenario good = smallGrid().front();
  EXPECT_NO_THROW(validateScenario(good));
  Scenario s = good;
  s.name = "has space";
  EXPECT_THROW(validateScenario(s), Error);
  s = good;
  s.gemm.k = 0;
  EXPECT_THROW(validateScenario(s), Error);
  s = good;
  s.coll.bytes = 4;  // fewer elements than ranks
  EXPECT_THROW(validateScenario(s), Error);
  s = good;
  s.coll.kind = CollKind::kReduceScatter;
  s.coll.dtype = Dtype::kFp8E4M3;  // fp8 has no reductions
  EXPECT_THROW(validateScenario(s), Error);
  for (CollKind other : {CollKind::kReduce, CollKind::kGather, CollKind::kScatter, CollKind::kAllToAllv,
                         CollKind::kSendRecv}) {
    s = good;
    s.coll.kind = other;  // a collective kind of the library that C3 scenarios do not take
    EXPECT_THROW(validateScenario(s), Error) << sched::collKindName(other);
  }
  EXPECT_THROW(validateScenarios({good, good}), Error);  // duplicate names
}

TEST(C3ScenarioJson, RoundTrip) {
  const std::vector<Scenario> grid = builtinGrid();
  EXPECT_EQ(scenariosFromJson(scenariosToJson(grid)), grid);
  const auto path = std::filesystem::temp_directory_path() / "conccl_c3_scenarios_test.json";
  saveScenarios(path.string(), smallGrid());
  EXPECT_EQ(loadScenarios(path.string()), smallGrid());
  std::filesystem::remove(path);
}

TEST(C3ScenarioJson, BareArrayAndDefaults) {
  const std::vector<Scenario> s = scenariosFromJson(R"([
    {"name": "mine", "gemm": {"m": 4096, "n": 4096, "k": 4096},
     "collective": {"kind": "allgather", "bytes": 16777216}}])");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].gemm.dtype, Dtype::kBf16);
  EXPECT_EQ(s[0].coll.dtype, Dtype::kBf16);
  EXPECT_EQ(s[0].coll.ranks, 8);
  EXPECT_EQ(s[0].coll.kind, CollKind::kAllGather);
}

TEST(C3ScenarioJson, ErrorsNameTheProblem) {
  auto message = [](const char* text) {
    try {
      scenariosFromJson(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), concclInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("{not json").find("scenario JSON"), std::string::npos);
  EXPECT_NE(message(R"({"x": []})").find("scenarios"), std::string::npos);
  EXPECT_NE(
      message(R"([{"name": "a", "gemm": {"m": 1, "n": 1}, "collective": {"kind": "ag", "bytes": 64}}])").find("'k'"),
      std::string::npos);
  EXPECT_NE(message(R"([{"name": "a", "gemm": {"m": 1, "n": 1, "k": 1},
                         "collective": {"kind": "gossip", "bytes": 64}}])")
                .find("gossip"),
            std::string::npos);
  EXPECT_NE(message(R"([{"name": "a", "gemm": {"m": 1, "n": 1, "k": "x"},
                         "collective": {"kind": "ag", "bytes": 64}}])")
                .find("'k'"),
            std::string::npos);
  EXPECT_NE(message(R"([{"name": "a", "gemm": {"m": 1, "n": 1, "k": -2},
                         "collective": {"kind": "ag", "bytes": 64}}])")
                .find("positive"),
            std::string::npos);
  EXPECT_THROW(loadScenarios("/nonexistent/dir/file.json"), Error);
}

}  // namespace
}  // namespace conccl::c3
