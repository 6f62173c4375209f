// conccl-tp-bench's shape table (tools/tp_bench/tp_shapes.h).
#include <gtest/gtest.h>

#include "base/error.h"
#include "tp_shapes.h"

namespace conccl::tp {
namespace {

TEST(TpShapes, BuiltinModelsAreLlama3) {
  ASSERT_EQ(builtinModels().size(), 2u);
  const std::optional<ModelDims> m70 = findModel("llama3-70b");
  ASSERT_TRUE(m70.has_value());
  EXPECT_EQ(m70->hidden, 8192);
  EXPECT_EQ(m70->ffn, 28672);
  const std::optional<ModelDims> m405 = findModel("llama3-405b");
  ASSERT_TRUE(m405.has_value());
  EXPECT_EQ(m405->hidden, 16384);
  EXPECT_EQ(m405->ffn, 53248);
  EXPECT_FALSE(findModel("llama3-8b").has_value());
}

TEST(TpShapes, UpProjectionIsColumnParallelDownProjectionRowParallel) {
  const ShapeSelection sel =
      builtinShapes({*findModel("llama3-70b")}, {4096}, {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter}, 8);
  ASSERT_EQ(sel.shapes.size(), 2u);
  EXPECT_TRUE(sel.skipped.empty());
  const TpShape& ag = sel.shapes[0];
  EXPECT_EQ(ag.op, TpOp::kAllGatherGemm);
  EXPECT_EQ(ag.m, 4096);
  EXPECT_EQ(ag.n, 28672 / 8);  // ffn / tp
  EXPECT_EQ(ag.k, 8192);       // hidden
  EXPECT_EQ(ag.mShard(), 512);
  EXPECT_EQ(ag.outputElems(), size_t(4096) * 3584);
  const TpShape& rs = sel.shapes[1];
  EXPECT_EQ(rs.op, TpOp::kGemmReduceScatter);
  EXPECT_EQ(rs.m, 4096);
  EXPECT_EQ(rs.n, 8192);       // hidden
  EXPECT_EQ(rs.k, 28672 / 8);  // ffn / tp
  EXPECT_EQ(rs.outputElems(), size_t(512) * 8192);
  // The same arithmetic both ways: the MLP's two GEMMs have the same FLOPs.
  EXPECT_DOUBLE_EQ(ag.flopsPerRank(), 2.0 * 4096 * 3584 * 8192);
  EXPECT_DOUBLE_EQ(ag.flopsPerRank(), rs.flopsPerRank());
}

TEST(TpShapes, DefaultTableOrderAndCount) {
  const ShapeSelection sel =
      builtinShapes(builtinModels(), {2048, 4096, 8192, 16384}, {TpOp::kAllGatherGemm, TpOp::kGemmReduceScatter}, 8);
  EXPECT_EQ(sel.shapes.size(), 2u * 4u * 2u);
  EXPECT_EQ(sel.shapes.front().model, "llama3-70b");
  EXPECT_EQ(sel.shapes.front().m, 2048);
  EXPECT_EQ(sel.shapes.back().model, "llama3-405b");
  EXPECT_EQ(sel.shapes.back().m, 16384);
  EXPECT_EQ(sel.shapes.back().op, TpOp::kGemmReduceScatter);
  EXPECT_EQ(sel.shapes.back().k, 53248 / 8);
}

TEST(TpShapes, IndivisibleCasesAreSkippedWithAReason) {
  // 28672 = 2^12 * 7: tp 3 does not divide it; 2048 is not divisible by 3 either.
  const ShapeSelection sel = builtinShapes({*findModel("llama3-70b")}, {2048, 3000}, {TpOp::kAllGatherGemm}, 3);
  EXPECT_TRUE(sel.shapes.empty());
  ASSERT_EQ(sel.skipped.size(), 2u);
  EXPECT_EQ(sel.skipped[0].what, "llama3-70b ag-gemm tokens=2048");
  EXPECT_EQ(sel.skipped[0].reason, "tokens not divisible by tp=3");
  EXPECT_EQ(sel.skipped[1].what, "llama3-70b ag-gemm tokens=3000");
  EXPECT_EQ(sel.skipped[1].reason, "ffn 28672 not divisible by tp=3");
}

TEST(TpShapes, BytesPerRank) {
  TpShape s;
  s.tp = 4;
  s.m = 8;
  s.n = 16;
  s.k = 32;
  s.op = TpOp::kAllGatherGemm;
  EXPECT_EQ(s.bytesPerRank(false), size_t(8 * 32 + 32 * 16 + 8 * 16) * 2);
  EXPECT_EQ(s.bytesPerRank(true), size_t(8 * 32 + 32 * 16 + 8 * 16 + 8 * 16) * 2);
  s.op = TpOp::kGemmReduceScatter;
  EXPECT_EQ(s.bytesPerRank(false), size_t(8 * 32 + 32 * 16 + 8 * 16 + 2 * 16) * 2);
  EXPECT_EQ(s.bytesPerRank(true), size_t(8 * 32 + 32 * 16 + 8 * 16 + 2 * 2 * 16) * 2);
}

TEST(TpShapes, ParsesShapeSpecs) {
  const std::optional<TpShape> ag = parseShapeSpec("ag:4096x3584x8192", 8);
  ASSERT_TRUE(ag.has_value());
  EXPECT_EQ(ag->model, "custom");
  EXPECT_EQ(ag->op, TpOp::kAllGatherGemm);
  EXPECT_EQ(ag->tp, 8);
  EXPECT_EQ(ag->m, 4096);
  EXPECT_EQ(ag->n, 3584);
  EXPECT_EQ(ag->k, 8192);
  const std::optional<TpShape> rs = parseShapeSpec("gemm-rs:16x32x64", 2);
  ASSERT_TRUE(rs.has_value());
  EXPECT_EQ(rs->op, TpOp::kGemmReduceScatter);
  for (const char* bad : {"", "ag", "ag:", "ag:1x2", "ag:1x2x", "ag:1x2x3x4", "xx:1x2x3", "ag:0x2x3", "ag:-1x2x3",
                          "ag:1xx3", "ag:1x2x3 ", "ag:ax2x3"}) {
    EXPECT_FALSE(parseShapeSpec(bad, 2).has_value()) << bad;
  }
}

TEST(TpShapes, CustomShapes) {
  const ShapeSelection sel = customShapes({"ag:16x8x8", "rs:10x8x8"}, 4);
  ASSERT_EQ(sel.shapes.size(), 1u);
  EXPECT_EQ(sel.shapes[0].m, 16);
  ASSERT_EQ(sel.skipped.size(), 1u);
  EXPECT_EQ(sel.skipped[0].what, "rs:10x8x8");
  EXPECT_EQ(sel.skipped[0].reason, "m not divisible by tp=4");
  EXPECT_THROW(customShapes({"bogus"}, 4), Error);
}

TEST(TpShapes, OpNames) {
  EXPECT_STREQ(opName(TpOp::kAllGatherGemm), "ag-gemm");
  EXPECT_STREQ(opName(TpOp::kGemmReduceScatter), "gemm-rs");
  EXPECT_EQ(parseOp("ag"), TpOp::kAllGatherGemm);
  EXPECT_EQ(parseOp("rs"), TpOp::kGemmReduceScatter);
  EXPECT_FALSE(parseOp("all-gather").has_value());
}

}  // namespace
}  // namespace conccl::tp
