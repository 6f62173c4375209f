// The fused ops' C interface on a GPU (label gpu; skips without one): the checks that need CUDA (buffers that are not
// device memory, or memory of another device than the rank's), and both ops through it from one thread (the group
// variants) and from a thread per rank, against the unfused computation on the host on fresh random data. Ranks on
// distinct GPUs where there are enough, else on GPU 0 together. Links the shared libconccl, as Python does.
#include <conccl/conccl.h>
#include <conccl/ops/conccl_ops.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

uint16_t toBf16(float f) {
  const __nv_bfloat16_raw raw = __float2bfloat16_rn(f);
  return raw.x;
}
float fromBf16(uint16_t u) {
  __nv_bfloat16_raw raw;
  raw.x = u;
  return __bfloat162float(__nv_bfloat16(raw));
}

std::vector<int> devicesFor(int n) {
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  return devices;
}

std::vector<uint16_t> randomBf16(size_t count, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = toBf16(dist(rng) * scale);
  return v;
}

DeviceMem upload(const std::vector<uint16_t>& host, int device) {
  DeviceMem mem(host.size() * 2, device);
  EXPECT_EQ(cudaMemcpy(mem.get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  return mem;
}

std::vector<uint16_t> download(const DeviceMem& mem, size_t count) {
  std::vector<uint16_t> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), mem.get(), count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// out[rows, n] = a[rows, k] @ b[k, n] in fp32 on the host, from bf16 inputs.
std::vector<float> hostMatmul(const uint16_t* a, const uint16_t* b, int64_t rows, int64_t n, int64_t k) {
  std::vector<float> out(static_cast<size_t>(rows * n), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const float x = fromBf16(a[i * k + p]);
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(i * n + j)] += x * fromBf16(b[p * n + j]);
    }
  }
  return out;
}

// max |got - want| over max |want|: the results are bf16 (8 significant bits), so one rounding of the result is
// 2^-8 of it; the partial products of the reduce-scatter are rounded once more before they are summed.
double relativeError(const std::vector<uint16_t>& got, const float* want, size_t count) {
  double err = 0.0, scale = 1e-30;
  for (size_t i = 0; i < count; ++i) {
    err = std::max(err, static_cast<double>(std::fabs(fromBf16(got[i]) - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return err / scale;
}

constexpr double kTolerance = 1.0 / 64;

// Releases the op objects of a clique's communicators before the clique destroys them.
struct Released {
  Clique* clique;
  ~Released() {
    for (concclComm_t c : clique->comms) concclOpsReleaseComm(c);
  }
};

TEST(GpuOpsCApi, BuffersMustBeDeviceMemoryOfTheRank) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(1, CONCCL_CONFIG_UNDEF_INT, {0});
  ASSERT_NE(clique, nullptr);
  Released released{clique.get()};
  DeviceMem a(4096), full(4096), b(4096), c(4096);
  std::vector<char> host(4096);
  concclComm_t comm = clique->comms[0];
  cudaStream_t s = clique->streams[0];
  EXPECT_EQ(concclOpsAllGatherMatmul(comm, a.get(), full.get(), host.data(), c.get(), 4, 8, 16, concclBfloat16, s),
            concclInvalidArgument);
  EXPECT_NE(std::string(concclOpsGetLastError()).find("b is not device memory"), std::string::npos)
      << concclOpsGetLastError();
  EXPECT_EQ(concclOpsMatmulReduceScatter(comm, a.get(), b.get(), host.data(), c.get(), 4, 8, 16, concclBfloat16, s),
            concclInvalidArgument);
  EXPECT_NE(std::string(concclOpsGetLastError()).find("partial is not device memory"), std::string::npos)
      << concclOpsGetLastError();
  if (deviceCount() >= 2) {
    DeviceMem elsewhere(4096, 1);
    EXPECT_EQ(
        concclOpsAllGatherMatmul(comm, a.get(), full.get(), b.get(), elsewhere.get(), 4, 8, 16, concclBfloat16, s),
        concclInvalidArgument);
    EXPECT_NE(std::string(concclOpsGetLastError()).find("c is memory of device 1"), std::string::npos)
        << concclOpsGetLastError();
  }
  // Nothing was enqueued by the refused calls; a valid call still works afterwards.
  EXPECT_EQ(concclOpsAllGatherMatmul(comm, a.get(), full.get(), b.get(), c.get(), 4, 8, 16, concclBfloat16, s),
            concclSuccess)
      << concclOpsGetLastError();
  EXPECT_TRUE(clique->sync());
}

// Both ops for `n` ranks, from one thread (group variants) or a thread per rank, checked on the host.
// Thread per rank: rank r's call on its own thread (its device current), every result expected concclSuccess.
void expectEveryThreadSucceeds(const std::vector<int>& devices, const std::function<concclResult_t(size_t)>& call) {
  const size_t nz = devices.size();
  std::vector<concclResult_t> res(nz, concclInternalError);
  std::vector<std::string> why(nz);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < nz; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(devices[r]);
      res[r] = call(r);
      why[r] = concclOpsGetLastError();
    });
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < nz; ++r) EXPECT_EQ(res[r], concclSuccess) << "rank " << r << ": " << why[r];
}

void runBoth(int n, bool threadPerRank) {
  SCOPED_TRACE(std::to_string(n) + " ranks, " + (threadPerRank ? "thread per rank" : "one thread, groups"));
  const std::vector<int> devices = devicesFor(n);
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices);
  ASSERT_NE(clique, nullptr);
  Released released{clique.get()};
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  const auto nz = static_cast<size_t>(n);

  // AllGather -> GEMM: shards [mShard, k], B [k, n] the same everywhere, C [n*mShard, cols].
  {
    const int64_t mShard = 24, cols = 40, k = 64, m = mShard * n;
    const std::vector<uint16_t> aHost = randomBf16(static_cast<size_t>(m * k), rng, 1.0f);
    const std::vector<uint16_t> bHost = randomBf16(static_cast<size_t>(k * cols), rng, 1.0f / 8);
    std::vector<DeviceMem> shard, full, b, c;
    for (size_t r = 0; r < nz; ++r) {
      const auto first = aHost.begin() + static_cast<int64_t>(r) * mShard * k;
      shard.push_back(upload(std::vector<uint16_t>(first, first + mShard * k), devices[r]));
      full.emplace_back(static_cast<size_t>(m * k) * 2, devices[r]);
      b.push_back(upload(bHost, devices[r]));
      c.emplace_back(static_cast<size_t>(m * cols) * 2, devices[r]);
    }
    syncAllDevices();
    if (threadPerRank) {
      expectEveryThreadSucceeds(devices, [&](size_t r) {
        return concclOpsAllGatherMatmul(clique->comms[r], shard[r].get(), full[r].get(), b[r].get(), c[r].get(),
                                        mShard, cols, k, concclBfloat16, clique->streams[r]);
      });
    } else {
      std::vector<const void*> shardPtr, bPtr;
      std::vector<void*> fullPtr, cPtr;
      for (size_t r = 0; r < nz; ++r) {
        shardPtr.push_back(shard[r].get());
        fullPtr.push_back(full[r].get());
        bPtr.push_back(b[r].get());
        cPtr.push_back(c[r].get());
      }
      ASSERT_EQ(concclOpsAllGatherMatmulGroup(n, clique->comms.data(), shardPtr.data(), fullPtr.data(), bPtr.data(),
                                              cPtr.data(), mShard, cols, k, concclBfloat16, clique->streams.data()),
                concclSuccess)
          << concclOpsGetLastError();
    }
    ASSERT_TRUE(clique->sync());
    const std::vector<float> want = hostMatmul(aHost.data(), bHost.data(), m, cols, k);
    for (size_t r = 0; r < nz; ++r) {
      EXPECT_EQ(download(full[r], static_cast<size_t>(m * k)), aHost) << "rank " << r << ": gathered A";
      EXPECT_LE(relativeError(download(c[r], static_cast<size_t>(m * cols)), want.data(), want.size()), kTolerance)
          << "rank " << r << ": C";
    }
  }

  // GEMM -> ReduceScatter: per rank A [n*mShard, kShard] and B [kShard, cols]; C [mShard, cols] = its rows of the sum.
  {
    const int64_t mShard = 16, cols = 48, kShard = 32, m = mShard * n;
    std::vector<std::vector<uint16_t>> aHost, bHost;
    std::vector<DeviceMem> a, b, partial, c;
    for (size_t r = 0; r < nz; ++r) {
      aHost.push_back(randomBf16(static_cast<size_t>(m * kShard), rng, 1.0f));
      bHost.push_back(randomBf16(static_cast<size_t>(kShard * cols), rng, 1.0f / 8));
      a.push_back(upload(aHost.back(), devices[r]));
      b.push_back(upload(bHost.back(), devices[r]));
      partial.emplace_back(static_cast<size_t>(m * cols) * 2, devices[r]);
      c.emplace_back(static_cast<size_t>(mShard * cols) * 2, devices[r]);
    }
    syncAllDevices();
    if (threadPerRank) {
      expectEveryThreadSucceeds(devices, [&](size_t r) {
        return concclOpsMatmulReduceScatter(clique->comms[r], a[r].get(), b[r].get(), partial[r].get(), c[r].get(),
                                            mShard, cols, kShard, concclBfloat16, clique->streams[r]);
      });
    } else {
      std::vector<const void*> aPtr, bPtr;
      std::vector<void*> partialPtr, cPtr;
      for (size_t r = 0; r < nz; ++r) {
        aPtr.push_back(a[r].get());
        bPtr.push_back(b[r].get());
        partialPtr.push_back(partial[r].get());
        cPtr.push_back(c[r].get());
      }
      ASSERT_EQ(
          concclOpsMatmulReduceScatterGroup(n, clique->comms.data(), aPtr.data(), bPtr.data(), partialPtr.data(),
                                            cPtr.data(), mShard, cols, kShard, concclBfloat16, clique->streams.data()),
          concclSuccess)
          << concclOpsGetLastError();
    }
    ASSERT_TRUE(clique->sync());
    std::vector<float> sum(static_cast<size_t>(m * cols), 0.0f);
    for (size_t r = 0; r < nz; ++r) {
      const std::vector<float> p = hostMatmul(aHost[r].data(), bHost[r].data(), m, cols, kShard);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
    }
    for (size_t r = 0; r < nz; ++r) {
      const float* rows = sum.data() + r * static_cast<size_t>(mShard * cols);
      EXPECT_LE(
          relativeError(download(c[r], static_cast<size_t>(mShard * cols)), rows, static_cast<size_t>(mShard * cols)),
          kTolerance)
          << "rank " << r << ": C";
    }
  }
}

TEST(GpuOpsCApi, GroupsMatchUnfused) {
  SKIP_WITHOUT_GPU();
  for (int n : {2, 3}) runBoth(n, /*threadPerRank=*/false);
}

TEST(GpuOpsCApi, ThreadPerRankMatchesUnfused) {
  SKIP_WITHOUT_GPU();
  runBoth(2, /*threadPerRank=*/true);
}

}  // namespace
}  // namespace conccl::gputest
