// conccl::ops::MatmulReduceScatter (issue 15, item 2): C_shard = reduce_scatter(A @ B_shard) with the GEMM in pieces
// and concclReduceScatterChunked sending each piece as it is produced, checked against the unfused computation on
// the host (every rank's partial product in double, summed) on fresh random data: 2 and 3 ranks (distinct GPUs where
// present, else GPU 0 shared), bf16, fp16 and fp8 e4m3 (B as [n, kShard]), 1 / 3 / 4 slices per block (3 does not divide every mShard: lowered),
// from one thread (multiply() for every rank, then reduceScatter() in a group) and from a thread per rank (run()).
#include <conccl/conccl.h>
#include <conccl/ops/matmul_reduce_scatter.hpp>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_ops_util.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

const char* typeName(concclDataType_t t) {
  return t == concclBfloat16 ? "bf16" : t == concclFloat16 ? "fp16" : "fp8e4m3";
}

struct Shape {
  int n;
  int64_t mShard, cols, kShard;
  concclDataType_t type;
  int slices;
  bool threadPerRank;
  bool bTransposed = false;
};

void runCase(const Shape& sh) {
  const int n = sh.n;
  SCOPED_TRACE("n=" + std::to_string(n) + " mShard=" + std::to_string(sh.mShard) + " n_cols=" +
               std::to_string(sh.cols) + " kShard=" + std::to_string(sh.kShard) +
               " " + typeName(sh.type) + " slices=" + std::to_string(sh.slices) +
               (sh.threadPerRank ? " thread per rank" : " group") + (sh.bTransposed ? " B as [n, k]" : ""));
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices);
  ASSERT_NE(clique, nullptr);
  const int64_t m = sh.mShard * n, cols = sh.cols, k = sh.kShard;
  const concclDataType_t outType = sh.type == concclFloat8e4m3 ? concclBfloat16 : sh.type;
  const size_t outEs = concclTypeSize(outType);
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  struct Rank {
    HostMatrix aHost, bHost;  // as the device holds them (rounded to the type)
    DeviceMem a, b, partial, c;
    std::unique_ptr<ops::MatmulReduceScatter> op;
    ops::MatmulReduceScatterArgs args;
  };
  std::vector<Rank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    Rank& x = ranks[static_cast<size_t>(r)];
    const int dev = devices[static_cast<size_t>(r)];
    CUDA_OK(cudaSetDevice(dev));
    x.aHost = HostMatrix::random(m, k, sh.type, rng);
    x.bHost = HostMatrix::random(k, cols, sh.type, rng);
    const std::vector<unsigned char> aBytes = x.aHost.bytes(), bBytes = x.bHost.bytes(sh.bTransposed);
    x.a = DeviceMem(aBytes.size(), dev);
    x.b = DeviceMem(bBytes.size(), dev);
    x.partial = DeviceMem(static_cast<size_t>(m * cols) * outEs, dev);
    x.c = DeviceMem(static_cast<size_t>(sh.mShard * cols) * outEs, dev);
    CUDA_OK(cudaMemcpy(x.a.get(), aBytes.data(), aBytes.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(x.b.get(), bBytes.data(), bBytes.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(x.partial.get(), 0xff, static_cast<size_t>(m * cols) * outEs));  // poison (NaN)
    CUDA_OK(cudaMemset(x.c.get(), 0xff, static_cast<size_t>(sh.mShard * cols) * outEs));
    x.op = std::make_unique<ops::MatmulReduceScatter>(clique->comms[static_cast<size_t>(r)]);
    x.args.a = x.a.get();
    x.args.b = x.b.get();
    x.args.partial = x.partial.get();
    x.args.c = x.c.get();
    x.args.mShard = sh.mShard;
    x.args.n = cols;
    x.args.kShard = k;
    x.args.type = sh.type;
    x.args.slicesPerBlock = sh.slices;
    x.args.bTransposed = sh.bTransposed;
  }
  syncAllDevices();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<concclResult_t> results(static_cast<size_t>(n), concclInternalError);
  if (sh.threadPerRank) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        Rank& x = ranks[static_cast<size_t>(r)];
        cudaSetDevice(devices[static_cast<size_t>(r)]);
        results[static_cast<size_t>(r)] =
            x.op->run(x.args, clique->streams[static_cast<size_t>(r)], &errors[static_cast<size_t>(r)]);
      });
    }
    for (auto& t : threads) t.join();
  } else {
    for (int r = 0; r < n; ++r) {
      Rank& x = ranks[static_cast<size_t>(r)];
      results[static_cast<size_t>(r)] =
          x.op->multiply(x.args, clique->streams[static_cast<size_t>(r)], &errors[static_cast<size_t>(r)]);
      ASSERT_EQ(results[static_cast<size_t>(r)], concclSuccess) << errors[static_cast<size_t>(r)];
    }
    CONCCL_OK(concclGroupStart());
    for (int r = 0; r < n; ++r) {
      Rank& x = ranks[static_cast<size_t>(r)];
      results[static_cast<size_t>(r)] =
          x.op->reduceScatter(x.args, clique->streams[static_cast<size_t>(r)], &errors[static_cast<size_t>(r)]);
    }
    CONCCL_OK(concclGroupEnd());
  }
  for (int r = 0; r < n; ++r) ASSERT_EQ(results[static_cast<size_t>(r)], concclSuccess) << errors[static_cast<size_t>(r)];
  ASSERT_TRUE(clique->sync());
  // The unfused reference: every rank's partial product in double; want = their sum, mag = the sum of |partial|.
  std::vector<double> want(static_cast<size_t>(m * cols), 0.0), mag(static_cast<size_t>(m * cols), 0.0);
  for (int p = 0; p < n; ++p) {
    const Rank& x = ranks[static_cast<size_t>(p)];
    std::vector<double> row(static_cast<size_t>(cols));
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t l = 0; l < k; ++l) {
        const double av = x.aHost.at(i, l);
        const float* brow = x.bHost.values.data() + static_cast<size_t>(l * cols);
        for (int64_t j = 0; j < cols; ++j) row[static_cast<size_t>(j)] += av * brow[j];
      }
      for (int64_t j = 0; j < cols; ++j) {
        want[static_cast<size_t>(i * cols + j)] += row[static_cast<size_t>(j)];
        mag[static_cast<size_t>(i * cols + j)] += std::fabs(row[static_cast<size_t>(j)]);
      }
    }
  }
  // Each partial is rounded to the type once (relative 2^-8 bf16 / 2^-11 fp16), the sum once more, plus the fp32
  // accumulation of the GEMM.
  const double rel = outType == concclBfloat16 ? 1.0 / 128 : 1.0 / 1024;
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned char> raw(static_cast<size_t>(sh.mShard * cols) * outEs);
    CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    CUDA_OK(cudaMemcpy(raw.data(), ranks[static_cast<size_t>(r)].c.get(), raw.size(), cudaMemcpyDeviceToHost));
    const std::vector<float> got = decodeAll(raw, outType);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t at = static_cast<size_t>(r * sh.mShard * cols) + i;
      const double g = got[i], w = want[at];
      const double bound = rel * (mag[at] + std::fabs(w)) + 1e-3 * std::sqrt(static_cast<double>(k)) * n;
      if (!(std::fabs(g - w) <= bound)) {
        if (bad++ < 3) ADD_FAILURE() << "rank " << r << " C[" << i / static_cast<size_t>(cols) << "]["
                                     << i % static_cast<size_t>(cols) << "] = " << g << ", unfused " << w;
      }
    }
    EXPECT_EQ(bad, 0u) << "rank " << r;
  }
}

TEST(MatmulReduceScatter, MatchesTheUnfusedComputation) {
  SKIP_WITHOUT_GPU();
  for (int n : {2, 3}) {
    for (concclDataType_t type : {concclBfloat16, concclFloat16}) {
      for (int slices : {1, 3, 4}) runCase(Shape{n, 128, 256, 256, type, slices, false});
    }
  }
  runCase(Shape{2, 128, 256, 256, concclBfloat16, 4, true});
  // Blocks above the small-message threshold (copy engines, several pipeline chunks).
  runCase(Shape{2, 512, 1024, 512, concclBfloat16, 4, false});
  runCase(Shape{2, 512, 1024, 512, concclBfloat16, 4, true});
  // B as nn.Linear stores its weight ([n, kShard]), and fp8 e4m3 (which needs that layout; partials in bf16).
  runCase(Shape{2, 128, 256, 256, concclBfloat16, 4, false, true});
  for (int n : {2, 3}) runCase(Shape{n, 128, 256, 256, concclFloat8e4m3, 4, false, true});
  runCase(Shape{2, 512, 1024, 512, concclFloat8e4m3, 4, true, true});
}

TEST(MatmulReduceScatter, RefusesBadArguments) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  ops::MatmulReduceScatter op(clique->comms[0]);
  ops::MatmulReduceScatterArgs args;  // NULL buffers
  std::string error;
  EXPECT_EQ(op.run(args, clique->streams[0], &error), concclInvalidArgument);
  EXPECT_NE(error.find("NULL"), std::string::npos) << error;
  DeviceMem buf(1024);
  args.a = args.b = buf.get();
  args.partial = args.c = buf.get();
  args.mShard = args.n = args.kShard = 4;
  args.slicesPerBlock = 0;
  EXPECT_EQ(op.multiply(args, clique->streams[0], &error), concclInvalidArgument);
  EXPECT_NE(error.find("slicesPerBlock"), std::string::npos) << error;
  args.slicesPerBlock = 1;
  EXPECT_EQ(op.reduceScatter(args, clique->streams[0], &error), concclInvalidUsage);  // multiply() first
}

}  // namespace
}  // namespace conccl::gputest
