// conccl-tp-bench's option parsing and selections (tools/tp_bench/tp_options.h).
#include <gtest/gtest.h>

#include "base/error.h"
#include "tp_options.h"

namespace conccl::tp {
namespace {

TpOptions parse(const std::string& args) {
  CLI::App app;
  TpOptions o;
  addTpOptions(app, o);
  app.parse(args, false);
  return o;
}

TEST(TpOptions, Defaults) {
  const TpOptions o = parse("");
  EXPECT_EQ(o.ranks, 0);
  EXPECT_TRUE(o.devices.empty());
  EXPECT_EQ(o.models, (std::vector<std::string>{"llama3-70b", "llama3-405b"}));
  EXPECT_EQ(o.tokens, (std::vector<int64_t>{2048, 4096, 8192, 16384}));
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_FALSE(o.check);
  EXPECT_DOUBLE_EQ(o.tolerance, kDefaultBf16Tolerance);
  EXPECT_TRUE(o.jsonPath.empty());
  EXPECT_EQ(o.concclEngine, "copy");
  EXPECT_NO_THROW(validateTpOptions(o));
  EXPECT_EQ(selectedStrategies(o), allStrategies());
  const ShapeSelection sel = selectShapes(o, 8);
  EXPECT_EQ(sel.shapes.size(), 16u);  // 2 models x 4 token counts x 2 ops
  EXPECT_TRUE(sel.skipped.empty());
}

TEST(TpOptions, ParsesEverything) {
  const TpOptions o = parse(
      "-g 4 --devices 4,5,6,7 --models llama3-405b --tokens 1024,8192 --ops rs --strategies conccl-fused,gemm "
      "--iters 7 --warmup 2 --json out.jsonl --check --tolerance 0.05 --timeout 30 --list --conccl-engine auto");
  EXPECT_EQ(o.ranks, 4);
  EXPECT_EQ(o.devices, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(o.models, (std::vector<std::string>{"llama3-405b"}));  // replaces the default, not appended
  EXPECT_EQ(o.tokens, (std::vector<int64_t>{1024, 8192}));
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 2);
  EXPECT_EQ(o.jsonPath, "out.jsonl");
  EXPECT_TRUE(o.check);
  EXPECT_DOUBLE_EQ(o.tolerance, 0.05);
  EXPECT_DOUBLE_EQ(o.timeoutS, 30);
  EXPECT_TRUE(o.list);
  EXPECT_EQ(o.concclEngine, "auto");
  EXPECT_NO_THROW(validateTpOptions(o));
  // The table's order, whatever the command line's.
  EXPECT_EQ(selectedStrategies(o), (std::vector<Strategy>{Strategy::kGemm, Strategy::kConcclFused}));
  const ShapeSelection sel = selectShapes(o, 4);
  ASSERT_EQ(sel.shapes.size(), 2u);
  EXPECT_EQ(sel.shapes[0].op, TpOp::kGemmReduceScatter);
  EXPECT_EQ(sel.shapes[0].k, 53248 / 4);
  EXPECT_EQ(sel.shapes[1].m, 8192);
}

TEST(TpOptions, ShapesReplaceTheModelTable) {
  const TpOptions o = parse("--shapes ag:64x32x16,rs:64x16x32");
  EXPECT_NO_THROW(validateTpOptions(o));
  const ShapeSelection sel = selectShapes(o, 2);
  ASSERT_EQ(sel.shapes.size(), 2u);
  EXPECT_EQ(sel.shapes[0].model, "custom");
  EXPECT_EQ(sel.shapes[1].op, TpOp::kGemmReduceScatter);
}

TEST(TpOptions, RejectsWhatCli11CannotCheck) {
  EXPECT_THROW(validateTpOptions(parse("--models llama2-7b")), Error);
  EXPECT_THROW(validateTpOptions(parse("--ops all-reduce")), Error);
  EXPECT_THROW(validateTpOptions(parse("--strategies fastest")), Error);
  EXPECT_THROW(validateTpOptions(parse("--shapes ag:1x2")), Error);
  EXPECT_THROW(validateTpOptions(parse("-g 2 --devices 0,1,2")), Error);
  EXPECT_THROW(validateTpOptions(parse("--devices 0,0")), Error);  // NCCL: one rank per GPU
  EXPECT_THROW(validateTpOptions(parse("--tokens 0")), Error);
}

TEST(TpOptions, Cli11RejectsBadNumbers) {
  EXPECT_THROW(parse("--iters 0"), CLI::ValidationError);
  EXPECT_THROW(parse("--warmup -1"), CLI::ValidationError);
  EXPECT_THROW(parse("--tolerance 0"), CLI::ValidationError);
  EXPECT_THROW(parse("--iters x"), CLI::ParseError);
  EXPECT_THROW(parse("--conccl-engine sm"), CLI::ValidationError);
}

TEST(TpOptions, AllSelectsEveryStrategy) {
  EXPECT_EQ(selectedStrategies(parse("--strategies gemm,all")), allStrategies());
}

}  // namespace
}  // namespace conccl::tp
