// conccl-bench option parsing and size sweeps (tools/bench/options.h).
#include <gtest/gtest.h>

#include <vector>

#include "options.h"

namespace conccl::bench {
namespace {

ParseResult Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "conccl-bench");
  return ParseOptions(static_cast<int>(args.size()), args.data());
}

TEST(BenchOptions, ParseBytesSuffixes) {
  EXPECT_EQ(ParseBytes("8"), 8u);
  EXPECT_EQ(ParseBytes("64K"), 64u << 10);
  EXPECT_EQ(ParseBytes("1M"), 1u << 20);
  EXPECT_EQ(ParseBytes("2g"), size_t{2} << 30);
  EXPECT_EQ(ParseBytes("16MB"), 16u << 20);
  EXPECT_EQ(ParseBytes("0"), 0u);
  EXPECT_FALSE(ParseBytes(""));
  EXPECT_FALSE(ParseBytes("M"));
  EXPECT_FALSE(ParseBytes("12Q"));
  EXPECT_FALSE(ParseBytes("99999999999999999999999"));
}

TEST(BenchOptions, SizeSweepLikeNcclTests) {
  EXPECT_EQ(SizeSweep(8, 128, 2.0, 0), (std::vector<size_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(SizeSweep(8, 100, 2.0, 0), (std::vector<size_t>{8, 16, 32, 64}));
  EXPECT_EQ(SizeSweep(1024, 4096, 1.0, 1024), (std::vector<size_t>{1024, 2048, 3072, 4096}));
  EXPECT_EQ(SizeSweep(0, 4, 2.0, 0), (std::vector<size_t>{0, 1, 2, 4}));
  EXPECT_EQ(SizeSweep(32, 32, 1.0, 0), (std::vector<size_t>{32}));
}

TEST(BenchOptions, Defaults) {
  ParseResult r = Parse({});
  ASSERT_TRUE(r.options) << r.error;
  const BenchOptions& o = *r.options;
  EXPECT_EQ(o.min_bytes, 32u << 20);
  EXPECT_EQ(o.nranks, 1);
  EXPECT_TRUE(o.check);
  EXPECT_FALSE(o.graph);
  EXPECT_EQ(o.types, std::vector<concclDataType_t>{concclFloat32});
  EXPECT_EQ(o.ops, std::vector<concclRedOp_t>{concclSum});
  EXPECT_TRUE(o.backends.empty());
  EXPECT_EQ(o.lanes, CONCCL_CONFIG_UNDEF_INT);
}

TEST(BenchOptions, NcclTestsFlags) {
  ParseResult r = Parse({"-b",
                         "8",
                         "-e",
                         "128M",
                         "-f",
                         "2",
                         "-n",
                         "7",
                         "-w",
                         "3",
                         "-g",
                         "4",
                         "-c",
                         "0",
                         "-G",
                         "1",
                         "-d",
                         "bfloat16,int8",
                         "-o",
                         "max",
                         "-r",
                         "2",
                         "--coll",
                         "allreduce,reduce_scatter",
                         "--backend",
                         "host,nccl",
                         "--json",
                         "out.jsonl",
                         "--lanes",
                         "3",
                         "--reduce-ctas",
                         "8"});
  ASSERT_TRUE(r.options) << r.error;
  const BenchOptions& o = *r.options;
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_DOUBLE_EQ(o.step_factor, 2.0);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 3);
  EXPECT_EQ(o.nranks, 4);
  EXPECT_FALSE(o.check);
  EXPECT_TRUE(o.graph);
  EXPECT_EQ(o.types, (std::vector<concclDataType_t>{concclBfloat16, concclInt8}));
  EXPECT_EQ(o.ops, std::vector<concclRedOp_t>{concclMax});
  EXPECT_EQ(o.root, 2);
  ASSERT_EQ(o.colls.size(), 2u);
  EXPECT_STREQ(o.colls[0]->name, "all_reduce");
  EXPECT_STREQ(o.colls[1]->name, "reduce_scatter");
  EXPECT_EQ(o.backends, (std::vector<std::string>{"host", "nccl"}));
  EXPECT_EQ(o.json_path, "out.jsonl");
  EXPECT_EQ(o.lanes, 3);
  EXPECT_EQ(o.reduce_ctas, 8);
}

TEST(BenchOptions, AllExpandsTypesOpsAndColls) {
  ParseResult r = Parse({"-d", "all", "-o", "all", "--coll", "all"});
  ASSERT_TRUE(r.options) << r.error;
  EXPECT_EQ(r.options->types.size(), 12u);
  EXPECT_EQ(r.options->ops.size(), 5u);
  EXPECT_EQ(r.options->colls.size(), 9u);
}

TEST(BenchOptions, DevicesSetRankCount) {
  ParseResult r = Parse({"--devices", "0,1,1,2"});
  ASSERT_TRUE(r.options) << r.error;
  EXPECT_EQ(r.options->nranks, 4);
  EXPECT_EQ(r.options->devices, (std::vector<int>{0, 1, 1, 2}));
  EXPECT_FALSE(Parse({"--devices", "0,1", "-g", "3"}).options);
}

TEST(BenchOptions, ThreadsMultiplyGpusLikeNcclTests) {
  ParseResult r = Parse({"-t", "2", "-g", "1"});
  ASSERT_TRUE(r.options) << r.error;
  EXPECT_EQ(r.options->threads, 2);
  EXPECT_EQ(r.options->nranks, 2);  // ranks in all: -g per thread x -t
  r = Parse({"--nthreads", "2", "-g", "2"});
  ASSERT_TRUE(r.options) << r.error;
  EXPECT_EQ(r.options->nranks, 4);
  r = Parse({"-t", "2", "--devices", "0,1"});
  ASSERT_TRUE(r.options) << r.error;
  EXPECT_EQ(r.options->nranks, 2);
  r = Parse({"-t", "2", "-g", "2", "--devices", "0,1,2,3"});
  ASSERT_TRUE(r.options) << r.error;
  EXPECT_EQ(r.options->nranks, 4);
  EXPECT_EQ(Parse({}).options->threads, 1);
  EXPECT_TRUE(Parse({"-t", "2", "-r", "1"}).options);  // the root counts among all ranks
}

TEST(BenchOptions, ThreadErrors) {
  EXPECT_FALSE(Parse({"-t", "0"}).options);
  EXPECT_FALSE(Parse({"-t", "2", "--devices", "0,1,2"}).options);               // 3 ranks over 2 threads
  EXPECT_FALSE(Parse({"-t", "2", "-g", "1", "--devices", "0,1,2,3"}).options);  // 2 x 1 != 4
  EXPECT_FALSE(Parse({"-t", "2", "-G", "1"}).options);                          // graphs need one thread
  EXPECT_TRUE(Parse({"-t", "1", "-G", "1"}).options);
}

TEST(BenchOptions, Errors) {
  EXPECT_FALSE(Parse({"-d", "float17"}).options);
  EXPECT_FALSE(Parse({"-o", "xor"}).options);
  EXPECT_FALSE(Parse({"--coll", "allfoo"}).options);
  EXPECT_FALSE(Parse({"--backend", "mpi"}).options);
  EXPECT_FALSE(Parse({"-r", "1"}).options);  // root outside 1 rank
  EXPECT_FALSE(Parse({"-b", "1G", "-e", "1M"}).options);
  EXPECT_FALSE(Parse({"-c", "2"}).options);
  ParseResult bad = Parse({"--nonsense"});
  EXPECT_FALSE(bad.options);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_FALSE(bad.error.empty());
}

TEST(BenchOptions, HelpExitsZeroWithText) {
  ParseResult r = Parse({"--help"});
  EXPECT_FALSE(r.options);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--backend"), std::string::npos);
}

}  // namespace
}  // namespace conccl::bench
