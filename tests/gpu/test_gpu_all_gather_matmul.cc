// conccl::ops::AllGatherMatmul (issue 15, item 2): C = allgather(A_shard) @ B with one cuBLASLt GEMM per shard as
// the shard lands, checked against the unfused computation on the host (double sums of the products) on fresh
// random data, bf16 / fp16 / fp8 e4m3 (B as [n, k]), in place and out of place, 2 and 3 ranks (distinct GPUs where
// present, else GPU 0 shared), from one thread (gather() in a group, then multiply()).
#include <conccl/conccl.h>
#include <conccl/ops/all_gather_matmul.hpp>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_ops_util.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

const char* typeName(concclDataType_t t) {
  return t == concclBfloat16 ? "bf16" : t == concclFloat16 ? "fp16" : "fp8e4m3";
}

void runCase(int n, int64_t mShard, int64_t cols, int64_t k, concclDataType_t type, bool inPlace,
             bool bTransposed = false) {
  SCOPED_TRACE("n=" + std::to_string(n) + " mShard=" + std::to_string(mShard) + " n_cols=" + std::to_string(cols) +
               " k=" + std::to_string(k) + " " + typeName(type) + (inPlace ? " in place" : " out of place") +
               (bTransposed ? " B as [n, k]" : ""));
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices);
  ASSERT_NE(clique, nullptr);
  const int64_t m = mShard * n;
  const size_t es = concclTypeSize(type);
  const concclDataType_t outType = type == concclFloat8e4m3 ? concclBfloat16 : type;
  const size_t outEs = concclTypeSize(outType);
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  const HostMatrix a = HostMatrix::random(m, k, type, rng), b = HostMatrix::random(k, cols, type, rng);
  const std::vector<unsigned char> aBytes = a.bytes(), bBytes = b.bytes(bTransposed);
  struct Rank {
    DeviceMem shard, full, b, c;
    std::unique_ptr<ops::AllGatherMatmul> op;
    ops::AllGatherMatmulArgs args;
  };
  std::vector<Rank> ranks(static_cast<size_t>(n));
  const size_t shardBytes = static_cast<size_t>(mShard * k) * es;
  for (int r = 0; r < n; ++r) {
    Rank& x = ranks[static_cast<size_t>(r)];
    const int dev = devices[static_cast<size_t>(r)];
    CUDA_OK(cudaSetDevice(dev));
    x.full = DeviceMem(static_cast<size_t>(m * k) * es, dev);
    x.b = DeviceMem(bBytes.size(), dev);
    x.c = DeviceMem(static_cast<size_t>(m * cols) * outEs, dev);
    CUDA_OK(cudaMemset(x.full.get(), 0xff, static_cast<size_t>(m * k) * es));  // poison (NaN) where shards land
    CUDA_OK(cudaMemset(x.c.get(), 0xff, static_cast<size_t>(m * cols) * outEs));
    const unsigned char* mine = aBytes.data() + static_cast<size_t>(r) * shardBytes;
    void* shard = x.full.get() + static_cast<size_t>(r) * shardBytes;
    if (!inPlace) {
      x.shard = DeviceMem(shardBytes, dev);
      shard = x.shard.get();
    }
    CUDA_OK(cudaMemcpy(shard, mine, shardBytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(x.b.get(), bBytes.data(), bBytes.size(), cudaMemcpyHostToDevice));
    x.op = std::make_unique<ops::AllGatherMatmul>(clique->comms[static_cast<size_t>(r)]);
    x.args.aShard = shard;
    x.args.aFull = x.full.get();
    x.args.b = x.b.get();
    x.args.c = x.c.get();
    x.args.mShard = mShard;
    x.args.n = cols;
    x.args.k = k;
    x.args.type = type;
    x.args.bTransposed = bTransposed;
  }
  syncAllDevices();
  std::string error;
  CONCCL_OK(concclGroupStart());
  for (int r = 0; r < n; ++r) {
    Rank& x = ranks[static_cast<size_t>(r)];
    ASSERT_EQ(x.op->gather(x.args, clique->streams[static_cast<size_t>(r)], &error), concclSuccess) << error;
  }
  CONCCL_OK(concclGroupEnd());
  for (int r = 0; r < n; ++r) {
    Rank& x = ranks[static_cast<size_t>(r)];
    ASSERT_EQ(x.op->multiply(x.args, clique->streams[static_cast<size_t>(r)], &error), concclSuccess) << error;
  }
  ASSERT_TRUE(clique->sync());
  // The unfused reference: every row of C from the full A and B, accumulated in double.
  std::vector<double> want(static_cast<size_t>(m * cols));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += static_cast<double>(a.at(i, l)) * b.at(l, j);
      want[static_cast<size_t>(i * cols + j)] = acc;
    }
  }
  // fp32 accumulation, one rounding to the output type at the end: |err| <= 2^-8 (bf16) / 2^-11 (fp16) relative to
  // the result plus the fp32 accumulation error, bounded by k * 2^-24 * sum |a||b| <= k * 2^-24 * k.
  const double rel = outType == concclBfloat16 ? 1.0 / 128 : 1.0 / 1024;
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned char> raw(static_cast<size_t>(m * cols) * outEs);
    CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    CUDA_OK(cudaMemcpy(raw.data(), ranks[static_cast<size_t>(r)].c.get(), raw.size(), cudaMemcpyDeviceToHost));
    const std::vector<float> got = decodeAll(raw, outType);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = got[i], w = want[i];
      const double bound = rel * std::fabs(w) + 1e-3 * std::sqrt(static_cast<double>(k));
      if (!(std::fabs(g - w) <= bound)) {
        if (bad++ < 3) ADD_FAILURE() << "rank " << r << " C[" << i / static_cast<size_t>(cols) << "]["
                                     << i % static_cast<size_t>(cols) << "] = " << g << ", unfused " << w;
      }
    }
    EXPECT_EQ(bad, 0u) << "rank " << r;
  }
}

TEST(AllGatherMatmul, MatchesTheUnfusedProduct) {
  SKIP_WITHOUT_GPU();
  for (int n : {2, 3}) {
    for (concclDataType_t type : {concclBfloat16, concclFloat16}) {
      for (bool inPlace : {true, false}) runCase(n, 128, 256, 512, type, inPlace);
    }
  }
  runCase(2, 1024, 1024, 1024, concclBfloat16, true);  // shards above the small-message threshold: copy engines
  // B as nn.Linear stores its weight ([n, k]), and fp8 e4m3 (which needs that layout; C in bf16).
  runCase(2, 128, 256, 512, concclBfloat16, false, true);
  for (int n : {2, 3}) runCase(n, 128, 256, 512, concclFloat8e4m3, true, true);
  runCase(2, 1024, 1024, 1024, concclFloat8e4m3, false, true);
}

TEST(AllGatherMatmul, RefusesBadArguments) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  ops::AllGatherMatmul op(clique->comms[0]);
  ops::AllGatherMatmulArgs args;  // NULL buffers
  std::string error;
  EXPECT_EQ(op.run(args, clique->streams[0], &error), concclInvalidArgument);
  EXPECT_NE(error.find("NULL"), std::string::npos) << error;
  DeviceMem buf(1024);
  args.aShard = args.b = buf.get();
  args.aFull = args.c = buf.get();
  args.mShard = args.n = args.k = 4;
  args.type = concclFloat8e4m3;  // fp8 needs B as [n, k]
  EXPECT_EQ(op.run(args, clique->streams[0], &error), concclNotSupported);
  EXPECT_NE(error.find("bTransposed"), std::string::npos) << error;
}

}  // namespace
}  // namespace conccl::gputest
