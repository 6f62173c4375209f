// Soak (issue 13, item 4): many copy-engine calls of >= 1 MB, thread per rank and grouped, 0 wrong, no memory
// growth. x <- AllReduce_sum(x) over 3 ranks on uint32: after k calls every rank holds 3^(k-1) x (the sum of the
// initial inputs), and multiplying by 3 is a bijection modulo 2^32, so a lost, repeated, overtaken or torn call
// changes the result for good. Checked every CONCCL_SOAK_CHECK_EVERY calls (default 1000) against that host
// reference, over the whole buffer.
//
// Env: CONCCL_SOAK_CALLS (default 2000: the short version scripts/gpu.sh tests runs; 100000 is the long one),
// CONCCL_SOAK_BYTES (default 1 MiB per rank), CONCCL_SOAK_CHECK_EVERY. Memory: free device memory
// (cudaMemGetInfo) and the process's resident set (/proc/self/statm) after a warm-up and at the end; growth beyond
// 16 MiB of device memory or 64 MiB of RSS fails the test.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

constexpr int kRanks = 3;  // odd: x3 is a bijection modulo 2^32

size_t envSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  const long long x = std::atoll(v);
  return x > 0 ? static_cast<size_t>(x) : fallback;
}

size_t rssBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

size_t freeDeviceBytes() {
  size_t freeB = 0, total = 0;
  if (cudaMemGetInfo(&freeB, &total) != cudaSuccess) return 0;
  return freeB;
}

uint32_t pow3(uint64_t e) {
  uint32_t result = 1, base = 3;
  while (e > 0) {
    if (e & 1) result *= base;
    base *= base;
    e >>= 1;
  }
  return result;
}

enum class Mode { kGrouped, kThreadPerRank };

class Soak : public ::testing::TestWithParam<Mode> {};

TEST_P(Soak, CopyEngineAllReduceManyCallsNoWrongNoGrowth) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  const Mode mode = GetParam();
  const size_t calls = envSize("CONCCL_SOAK_CALLS", 2000);
  const size_t bytes = envSize("CONCCL_SOAK_BYTES", size_t{1} << 20) / 4 * 4;
  const size_t checkEvery = envSize("CONCCL_SOAK_CHECK_EVERY", 1000);
  const size_t count = bytes / 4;
  ASSERT_GE(bytes, size_t{1} << 20) << "the soak is about copy-engine calls of at least 1 MB";
  // Copy engines only (smallMessageBytes = 0), so every call takes the copy-engine path whatever its size.
  auto clique = Clique::create(kRanks, CONCCL_CONFIG_UNDEF_INT, {}, 0);
  ASSERT_NE(clique, nullptr);

  std::vector<DeviceMem> bufs;
  std::vector<uint32_t> sum(count, 0);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<uint32_t> init(count);
    fillRandomBytes(init.data(), bytes, static_cast<uint64_t>(r) * 7777 + 12345 + (mode == Mode::kGrouped ? 0 : 99));
    for (size_t i = 0; i < count; ++i) sum[i] += init[i];
    bufs.emplace_back(bytes);
    ASSERT_NE(bufs.back().get(), nullptr);
    CUDA_OK(cudaMemcpy(bufs.back().get(), init.data(), bytes, cudaMemcpyHostToDevice));
  }
  syncAllDevices();

  size_t done = 0;  // calls completed so far
  auto runCalls = [&](size_t k) -> bool {
    if (mode == Mode::kGrouped) {
      for (size_t c = 0; c < k; ++c) {
        if (concclGroupStart() != concclSuccess) return false;
        for (int r = 0; r < kRanks; ++r) {
          if (concclAllReduce(bufs[r].get(), bufs[r].get(), count, concclUint32, concclSum, clique->comms[r],
                              clique->streams[r]) != concclSuccess) {
            concclGroupEnd();
            ADD_FAILURE() << "call " << done + c << ": " << concclGetLastError(clique->comms[r]);
            return false;
          }
        }
        if (concclGroupEnd() != concclSuccess) {
          ADD_FAILURE() << "group " << done + c << ": " << concclGetLastError(clique->comms[0]);
          return false;
        }
      }
      return true;
    }
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        for (size_t c = 0; c < k && failures == 0; ++c) {
          if (concclAllReduce(bufs[r].get(), bufs[r].get(), count, concclUint32, concclSum, clique->comms[r],
                              clique->streams[r]) != concclSuccess) {
            ++failures;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    if (failures != 0) {
      ADD_FAILURE() << "a thread-per-rank call failed near call " << done << ": "
                    << concclGetLastError(clique->comms[0]);
      return false;
    }
    return true;
  };
  size_t wrong = 0;
  auto check = [&]() -> bool {
    if (!clique->sync()) return false;
    const uint32_t factor = pow3(done - 1);
    for (int r = 0; r < kRanks; ++r) {
      std::vector<uint32_t> got(count);
      if (cudaMemcpy(got.data(), bufs[r].get(), bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
      size_t bad = 0, first = count;
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != sum[i] * factor) {
          if (bad++ == 0) first = i;
        }
      }
      if (bad != 0) {
        wrong += bad;
        ADD_FAILURE() << "after " << done << " calls: rank " << r << " has " << bad << " wrong elements (first at "
                      << first << ")";
        return false;
      }
    }
    return true;
  };

  // Warm-up (first calls allocate nothing, but let the runtime and allocator settle), then the baseline.
  const size_t warm = std::min<size_t>(100, calls);
  ASSERT_TRUE(runCalls(warm));
  done += warm;
  ASSERT_TRUE(check());
  const size_t rss0 = rssBytes(), free0 = freeDeviceBytes();
  const auto t0 = std::chrono::steady_clock::now();
  while (done < calls) {
    const size_t k = std::min(checkEvery, calls - done);
    ASSERT_TRUE(runCalls(k));
    done += k;
    ASSERT_TRUE(check());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t rss1 = rssBytes(), free1 = freeDeviceBytes();
  const long long rssGrowth = static_cast<long long>(rss1) - static_cast<long long>(rss0);
  const long long devGrowth = static_cast<long long>(free0) - static_cast<long long>(free1);
  std::fprintf(stderr,
               "soak %s: %zu calls of %zu B on %d ranks, %zu wrong, %.1f s (%.1f us/call); RSS %+lld KiB, device "
               "memory in use %+lld KiB\n",
               mode == Mode::kGrouped ? "grouped" : "thread-per-rank", done, bytes, kRanks, wrong, secs,
               done > warm ? secs * 1e6 / static_cast<double>(done - warm) : 0.0, rssGrowth / 1024, devGrowth / 1024);
  RecordProperty("calls", static_cast<int>(done));
  RecordProperty("wrong", static_cast<int>(wrong));
  RecordProperty("rss_growth_kib", static_cast<int>(rssGrowth / 1024));
  RecordProperty("device_growth_kib", static_cast<int>(devGrowth / 1024));
  EXPECT_EQ(wrong, 0u);
  EXPECT_LE(devGrowth, 16ll << 20) << "device memory grew";
  EXPECT_LE(rssGrowth, 64ll << 20) << "resident memory grew";
}

INSTANTIATE_TEST_SUITE_P(CopyEngines, Soak, ::testing::Values(Mode::kGrouped, Mode::kThreadPerRank),
                         [](const auto& param_info) {
                           return std::string(param_info.param == Mode::kGrouped ? "Grouped" : "ThreadPerRank");
                         });

}  // namespace
}  // namespace conccl::gputest
