// The CUDA executor and its reduction kernel below the API: hand-built schedules (lanes, signals, waits,
// reduce), abort of a stuck Wait, the synchronize timeout, checkBuffer's messages, and the kernel against the
// host reference for every type, op, input count and alignment.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "base/error.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/executor.h"
#include "exec/host/host_reduce.h"
#include "gpu/gpu_test_util.h"
#include "sched/schedule.h"

namespace conccl::gputest {
namespace {

using exec::CallBinding;
using sched::Copy;
using sched::Location;
using sched::Schedule;

// Random values of `dtype`: floats in [-4, 4) (no NaN/Inf so comparisons are exact), integers full range.
std::vector<unsigned char> randomValues(concclDataType_t dtype, size_t count, std::mt19937_64& rng) {
  const size_t es = concclTypeSize(dtype);
  std::vector<unsigned char> out(count * es);
  std::uniform_real_distribution<float> uni(-4.0f, 4.0f);
  for (size_t i = 0; i < count; ++i) {
    unsigned char* p = out.data() + i * es;
    const float f = uni(rng);
    const uint64_t bits = rng();
    switch (dtype) {
      case concclFloat16: {
        uint16_t h = exec::floatToHalf(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case concclBfloat16: {
        uint16_t b = exec::floatToBf16(f);
        std::memcpy(p, &b, 2);
        break;
      }
      case concclFloat32:
        std::memcpy(p, &f, 4);
        break;
      case concclFloat64: {
        double d = static_cast<double>(f) + static_cast<double>(bits % 1000) * 1e-9;
        std::memcpy(p, &d, 8);
        break;
      }
      default:
        std::memcpy(p, &bits, es);
        break;
    }
  }
  return out;
}

TEST(ReduceKernel, MatchesHostReferenceBitExact) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  const std::vector<concclDataType_t> types = {concclInt8,    concclUint8,  concclInt32,   concclUint32,
                                               concclInt64,   concclUint64, concclFloat16, concclBfloat16,
                                               concclFloat32, concclFloat64};
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Buffers allocated once at the largest size (cudaMalloc per case would dominate the run time).
  constexpr size_t kBig = (size_t{1} << 18) + 3;
  std::vector<DeviceMem> dev;
  for (int j = 0; j < exec::kMaxReduceInputs; ++j) dev.emplace_back(kBig * 8 + 32);
  DeviceMem outMem(kBig * 8 + 32);
  for (concclDataType_t dtype : types) {
    const size_t es = concclTypeSize(dtype);
    for (int opi = 0; opi < concclNumOps; ++opi) {
      const auto op = static_cast<concclRedOp_t>(opi);
      for (int k : {1, 2, 3, 8, 16}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{4099}, kBig}) {
          // misalign = 1 shifts every pointer by one element: the scalar path (unless es is 16-aligned).
          for (size_t misalign : {size_t{0}, size_t{1}}) {
            for (bool inPlace : {false, true}) {
              // The large size once per type/op (vector path with many grid-stride iterations).
              if (count == kBig && (k != 8 || misalign != 0 || inPlace)) continue;
              const size_t bytes = count * es;
              std::vector<std::vector<unsigned char>> host;
              exec::ReduceArgs args;
              args.k = k;
              args.count = count;
              std::vector<const void*> hostPtrs;
              for (int j = 0; j < k; ++j) {
                host.push_back(randomValues(dtype, count, rng));
                char* p = dev[static_cast<size_t>(j)].get() + misalign * es;
                if (bytes) CUDA_OK(cudaMemcpy(p, host.back().data(), bytes, cudaMemcpyHostToDevice));
                args.inputs[j] = p;
              }
              syncAllDevices();
              for (auto& h : host) hostPtrs.push_back(h.data());
              args.output = inPlace ? const_cast<void*>(args.inputs[0]) : outMem.get() + misalign * es;
              std::vector<unsigned char> expected(bytes);
              if (count) exec::reduceHost(hostPtrs, expected.data(), count, dtype, op);
              exec::launchReduce(args, dtype, op, 4, 0, stream);
              CUDA_OK(cudaStreamSynchronize(stream));
              std::vector<unsigned char> got(bytes);
              if (bytes) CUDA_OK(cudaMemcpy(got.data(), args.output, bytes, cudaMemcpyDeviceToHost));
              ASSERT_TRUE(got == expected) << "dtype " << dtype << " op " << op << " k " << k << " count " << count
                                           << " misalign " << misalign << " inPlace " << inPlace;
            }
          }
        }
      }
    }
  }
  cudaStreamDestroy(stream);
}

TEST(ReduceKernel, RejectsTooManyInputsAndFp8) {
  SKIP_WITHOUT_GPU();
  exec::ReduceArgs args;
  args.k = exec::kMaxReduceInputs + 1;
  args.count = 1;
  try {
    exec::launchReduce(args, concclFloat32, concclSum, 4, 0, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclNotSupported);
  }
  args.k = 2;
  try {
    exec::launchReduce(args, concclFloat8e4m3, concclSum, 4, 0, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclNotSupported);
  }
}

Config testConfig(int timeoutMs = 60000) {
  Config c;
  c.backend = concclBackendCuda;
  // The internal Config skips resolveConfig; CONCCL_HIGH_PRIORITY still chooses the kernels' launch priority here so
  // that one binary can compare both.
  if (const char* p = std::getenv("CONCCL_HIGH_PRIORITY")) c.highPriority = std::string(p) != "0";
  c.lanes = 2;
  c.reduceCtas = 4;
  c.scratchBytes = size_t{1} << 20;
  c.timeoutMs = timeoutMs;
  return c;
}

struct TwoRanks {
  std::unique_ptr<exec::Executor> ex;
  std::vector<cudaStream_t> streams;
  explicit TwoRanks(const Config& c) {
    ex = exec::makeCudaExecutor({0, 0}, c);
    for (int r = 0; r < 2; ++r) {
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      streams.push_back(s);
    }
  }
  ~TwoRanks() {
    ex.reset();
    for (auto s : streams) cudaStreamDestroy(s);
  }
};

// Rank 0 pushes its buffer 0 to rank 1's buffer 0 in two halves on two lanes, each lane signalling rank 1;
// rank 1 waits for both and reduces (sum) its buffers 0 and 1 into buffer 2 on its main stream.
Schedule pushAndReduceSchedule(size_t count) {
  const size_t half = count / 2 * 4, rest = count * 4 - half;
  Schedule s;
  s.nranks = 2;
  s.lanes = 2;
  s.slots = 2;
  s.programs.resize(2);
  s.programs[0].ops.push_back(Copy{Location{0, 0, 0}, Location{1, 0, 0}, half, 0});
  s.programs[0].ops.push_back(Copy{Location{0, 0, half}, Location{1, 0, half}, rest, 1});
  s.programs[0].ops.push_back(sched::Signal{1, 0, 0});
  s.programs[0].ops.push_back(sched::Signal{1, 1, 1});
  s.programs[1].ops.push_back(sched::Wait{0});
  s.programs[1].ops.push_back(sched::Wait{1});
  sched::Reduce red;
  red.inputs = {Location{1, 0, 0}, Location{1, 1, 0}};
  red.output = Location{1, 2, 0};
  red.count = count;
  red.dtype = concclFloat32;
  red.op = concclSum;
  s.programs[1].ops.push_back(red);
  return s;
}

TEST(Executor, LanesSignalsWaitsAndReduce) {
  SKIP_WITHOUT_GPU();
  TwoRanks t(testConfig());
  const size_t count = 100003;
  DeviceMem a0(count * 4), b0(count * 4), b1(count * 4), b2(count * 4);
  std::vector<float> x(count), y(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = static_cast<float>(i % 97) + 1;
    y[i] = static_cast<float>(i % 13) + 0.5f;
  }
  CUDA_OK(cudaMemcpy(a0.get(), x.data(), count * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b1.get(), y.data(), count * 4, cudaMemcpyHostToDevice));
  syncAllDevices();
  CallBinding binding;
  binding.buffers = {{a0.get()}, {b0.get(), b1.get(), b2.get()}};
  binding.streams = t.streams;
  Schedule s = pushAndReduceSchedule(count);
  for (int iter = 0; iter < 20; ++iter) {
    CUDA_OK(cudaMemset(b2.get(), 0, count * 4));
    // Alternate which rank is enqueued first: the waiting rank's Waits must block the GPU, not the host.
    // (Even iterations enqueue the signaller first, which also keeps this test usable under
    // compute-sanitizer, which may serialise streams.)
    t.ex->launch(s, binding, iter % 2 == 0 ? 0 : 1);
    t.ex->launch(s, binding, iter % 2 == 0 ? 1 : 0);
    t.ex->synchronize(0);
    t.ex->synchronize(1);
    std::vector<float> got(count);
    CUDA_OK(cudaMemcpy(got.data(), b2.get(), count * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], x[i] + y[i]) << "element " << i << " iteration " << iter;
  }
}

TEST(Executor, GraphReplayOfLanesSignalsWaitsAndReduce) {
  SKIP_WITHOUT_GPU();
  TwoRanks t(testConfig());
  const size_t count = 100003;
  DeviceMem a0(count * 4), b0(count * 4), b1(count * 4), b2(count * 4);
  std::vector<float> x(count), y(count);
  for (size_t i = 0; i < count; ++i) {
    x[i] = static_cast<float>(i % 97) + 1;
    y[i] = static_cast<float>(i % 13) + 0.5f;
  }
  CUDA_OK(cudaMemcpy(b1.get(), y.data(), count * 4, cudaMemcpyHostToDevice));
  syncAllDevices();
  CallBinding binding;
  binding.buffers = {{a0.get()}, {b0.get(), b1.get(), b2.get()}};
  binding.streams = t.streams;
  Schedule s = pushAndReduceSchedule(count);
  // The programs captured into one graph per rank and replayed.
  std::vector<cudaGraphExec_t> execs(2);
  for (int r = 1; r >= 0; --r) {
    cudaGraph_t g = nullptr;
    CUDA_OK(cudaStreamBeginCapture(t.streams[r], cudaStreamCaptureModeThreadLocal));
    t.ex->launch(s, binding, r);
    CUDA_OK(cudaStreamEndCapture(t.streams[r], &g));
    CUDA_OK(cudaGraphInstantiate(&execs[r], g, 0));
    cudaGraphDestroy(g);
  }
  for (int replay = 0; replay < 100; ++replay) {
    for (size_t i = 0; i < count; i += 1000) x[i] = static_cast<float>(replay);
    CUDA_OK(cudaMemcpy(a0.get(), x.data(), count * 4, cudaMemcpyHostToDevice));
    syncAllDevices();  // the new input has landed before rank 0's graph copies it (see syncAllDevices)
    CUDA_OK(cudaGraphLaunch(execs[1], t.streams[1]));
    CUDA_OK(cudaGraphLaunch(execs[0], t.streams[0]));
    ASSERT_TRUE(syncStreams(t.streams, {}));
    std::vector<float> got(count);
    CUDA_OK(cudaMemcpy(got.data(), b2.get(), count * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], x[i] + y[i]) << "element " << i << " replay " << replay;
  }
  for (auto e : execs) cudaGraphExecDestroy(e);
}

TEST(Executor, AbortReleasesAStuckWait) {
  SKIP_WITHOUT_GPU();
  TwoRanks t(testConfig());
  Schedule s;
  s.nranks = 2;
  s.slots = 1;
  s.programs.resize(2);
  // Three calls' worth of Waits that no one signals: abort must drain all of them.
  for (int i = 0; i < 3; ++i) s.programs[0].ops.push_back(sched::Wait{0});
  CallBinding binding;
  binding.buffers = {{}, {}};
  binding.streams = t.streams;
  t.ex->launch(s, binding, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cudaStreamQuery(t.streams[0]), cudaErrorNotReady);
  const auto start = std::chrono::steady_clock::now();
  t.ex->cancel();
  t.ex->synchronize(0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(cudaStreamQuery(t.streams[0]), cudaSuccess);
  try {
    t.ex->launch(s, binding, 0);
    FAIL() << "launch after abort must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidUsage);
  }
}

TEST(Executor, SynchronizeTimesOut) {
  SKIP_WITHOUT_GPU();
  TwoRanks t(testConfig(/*timeoutMs=*/200));
  Schedule s;
  s.nranks = 2;
  s.slots = 1;
  s.programs.resize(2);
  s.programs[0].ops.push_back(sched::Wait{0});
  CallBinding binding;
  binding.buffers = {{}, {}};
  binding.streams = t.streams;
  t.ex->launch(s, binding, 0);
  try {
    t.ex->synchronize(0);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclTimeout);
  }
  t.ex->cancel();
  t.ex->releaseRank(0);
  t.ex->releaseRank(1);
  EXPECT_EQ(cudaStreamQuery(t.streams[0]), cudaSuccess);
}

TEST(Executor, RejectsTwoRanksOnOneStream) {
  SKIP_WITHOUT_GPU();
  TwoRanks t(testConfig());
  Schedule s;
  s.nranks = 2;
  s.programs.resize(2);
  CallBinding binding;
  binding.buffers = {{}, {}};
  binding.streams = {t.streams[0], t.streams[0]};
  try {
    t.ex->launch(s, binding, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidUsage);
  }
}

TEST(Executor, CheckBufferMessages) {
  SKIP_WITHOUT_GPU();
  TwoRanks t(testConfig());
  std::vector<char> host(1024);
  DeviceMem dev(1000);
  auto expectInvalid = [&](const void* p, size_t bytes, const std::string& needle) {
    try {
      t.ex->checkBuffer(0, p, bytes, "sendbuff", nullptr);
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), concclInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expectInvalid(host.data(), 16, "sendbuff is a host pointer, the CUDA backend needs device memory");
  expectInvalid(dev.get(), 1001, "sendbuff is too small");
  expectInvalid(dev.get() + 500, 501, "too small");
  EXPECT_NO_THROW(t.ex->checkBuffer(0, dev.get() + 500, 500, "sendbuff", nullptr));
  EXPECT_NO_THROW(t.ex->checkBuffer(1, dev.get(), 1000, "recvbuff", nullptr));
  // Pinned host memory is still host memory for this backend.
  void* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, 64));
  expectInvalid(pinned, 16, "host pointer");
  cudaFreeHost(pinned);
}

TEST(Executor, CheckBufferRejectsAnotherDevicesMemory) {
  SKIP_WITHOUT_GPUS(2);
  auto ex = exec::makeCudaExecutor({0, 1}, testConfig());
  DeviceMem onOne(256, 1);
  try {
    ex->checkBuffer(0, onOne.get(), 256, "recvbuff", nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("device 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace conccl::gputest
