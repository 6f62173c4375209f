// conccl::ops::AllGatherMatmul (issue 15, item 2): C = allgather(A_shard) @ B with one cuBLASLt GEMM per shard as
// the shard lands, checked against the unfused computation on the host (fp32 sums of the bf16 / fp16 products) on
// fresh random data, in place and out of place, 2 and 3 ranks (distinct GPUs where present, else GPU 0 shared),
// from one thread (gather() in a group, then multiply()).
#include <conccl/conccl.h>
#include <conccl/ops/all_gather_matmul.hpp>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

// Bits of a bf16 / fp16 value and back, through the types' raw views (no memcpy into their classes).
uint16_t toBits(float f, concclDataType_t type) {
  if (type == concclBfloat16) {
    const __nv_bfloat16_raw raw = __float2bfloat16_rn(f);
    return raw.x;
  }
  const __half_raw raw = __float2half_rn(f);
  return raw.x;
}
float fromBits(uint16_t u, concclDataType_t type) {
  if (type == concclBfloat16) {
    __nv_bfloat16_raw raw;
    raw.x = u;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = u;
  return __half2float(__half(raw));
}

void runCase(int n, int64_t mShard, int64_t cols, int64_t k, concclDataType_t type, bool inPlace) {
  SCOPED_TRACE("n=" + std::to_string(n) + " mShard=" + std::to_string(mShard) + " n_cols=" + std::to_string(cols) +
               " k=" + std::to_string(k) + (type == concclBfloat16 ? " bf16" : " fp16") +
               (inPlace ? " in place" : " out of place"));
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices);
  ASSERT_NE(clique, nullptr);
  const int64_t m = mShard * n;
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Host copies as the device holds them (rounded to the type).
  std::vector<uint16_t> aHost(static_cast<size_t>(m * k)), bHost(static_cast<size_t>(k * cols));
  for (auto& v : aHost) v = toBits(dist(rng), type);
  for (auto& v : bHost) v = toBits(dist(rng), type);
  struct Rank {
    DeviceMem shard, full, b, c;
    std::unique_ptr<ops::AllGatherMatmul> op;
    ops::AllGatherMatmulArgs args;
  };
  std::vector<Rank> ranks(static_cast<size_t>(n));
  const size_t shardBytes = static_cast<size_t>(mShard * k) * 2;
  for (int r = 0; r < n; ++r) {
    Rank& x = ranks[static_cast<size_t>(r)];
    const int dev = devices[static_cast<size_t>(r)];
    CUDA_OK(cudaSetDevice(dev));
    x.full = DeviceMem(static_cast<size_t>(m * k) * 2, dev);
    x.b = DeviceMem(static_cast<size_t>(k * cols) * 2, dev);
    x.c = DeviceMem(static_cast<size_t>(m * cols) * 2, dev);
    CUDA_OK(cudaMemset(x.full.get(), 0xff, static_cast<size_t>(m * k) * 2));  // poison (NaN) where shards land
    CUDA_OK(cudaMemset(x.c.get(), 0xff, static_cast<size_t>(m * cols) * 2));
    const uint16_t* mine = aHost.data() + static_cast<size_t>(r * mShard * k);
    void* shard = x.full.get() + static_cast<size_t>(r) * shardBytes;
    if (!inPlace) {
      x.shard = DeviceMem(shardBytes, dev);
      shard = x.shard.get();
    }
    CUDA_OK(cudaMemcpy(shard, mine, shardBytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(x.b.get(), bHost.data(), bHost.size() * 2, cudaMemcpyHostToDevice));
    x.op = std::make_unique<ops::AllGatherMatmul>(clique->comms[static_cast<size_t>(r)]);
    x.args.aShard = shard;
    x.args.aFull = x.full.get();
    x.args.b = x.b.get();
    x.args.c = x.c.get();
    x.args.mShard = mShard;
    x.args.n = cols;
    x.args.k = k;
    x.args.type = type;
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
  std::vector<float> want(static_cast<size_t>(m * cols));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) {
        acc += static_cast<double>(fromBits(aHost[static_cast<size_t>(i * k + l)], type)) *
               fromBits(bHost[static_cast<size_t>(l * cols + j)], type);
      }
      want[static_cast<size_t>(i * cols + j)] = static_cast<float>(acc);
    }
  }
  // fp32 accumulation, one rounding to the type at the end: |err| <= 2^-8 (bf16) / 2^-11 (fp16) relative to the
  // result plus the fp32 accumulation error, bounded by k * 2^-24 * sum |a||b| <= k * 2^-24 * k.
  const double rel = type == concclBfloat16 ? 1.0 / 128 : 1.0 / 1024;
  for (int r = 0; r < n; ++r) {
    std::vector<uint16_t> got(static_cast<size_t>(m * cols));
    CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    CUDA_OK(cudaMemcpy(got.data(), ranks[static_cast<size_t>(r)].c.get(), got.size() * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = fromBits(got[i], type), w = want[i];
      const double bound = rel * std::fabs(w) + 1e-3 * std::sqrt(static_cast<double>(k));
      if (!(std::fabs(g - w) <= bound)) {
        if (bad++ < 3) ADD_FAILURE() << "rank " << r << " C[" << i / cols << "][" << i % cols << "] = " << g
                                     << ", unfused " << w;
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
}

}  // namespace
}  // namespace conccl::gputest
