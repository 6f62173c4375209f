// Usage patterns beyond one call: two communicators at once, 10,000 back-to-back calls, one thread per rank,
// and bad buffers (host memory, another device's memory, too small).
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

TEST(Usage, TwoCommunicatorsConcurrently) {
  SKIP_WITHOUT_GPU();
  auto a = Clique::create(2);
  auto b = Clique::create(3);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::atomic<int> failures{0};
  // Buffers are allocated once per thread, before the loop: cudaFree synchronises the whole device, so a
  // cudaFree in one thread while the other thread is between two ranks' launches of a group (rank 0 waiting
  // on the GPU for rank 1's signal, not yet enqueued) can deadlock. Same rule as NCCL's: no cudaFree while
  // another thread may be in the middle of a collective (caching allocators avoid it).
  CaseSpec specA, specB;
  specA.coll = Coll::kAllReduce;
  specA.count = 1000;
  specB.coll = Coll::kAllGather;
  specB.count = 1001;
  CollCase caseA(specA, a->size()), caseB(specB, b->size());
  auto drive = [&failures](Clique* clique, CollCase* c, uint64_t seed) {
    for (int i = 0; i < 50 && failures == 0; ++i) {
      if (!c->runEager(*clique, seed + static_cast<uint64_t>(i))) ++failures;
    }
  };
  std::thread ta(drive, a.get(), &caseA, 1);
  std::thread tb(drive, b.get(), &caseB, 100000);
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Usage, TwoCommunicatorsInOneGroup) {
  SKIP_WITHOUT_GPU();
  auto a = Clique::create(2);
  auto b = Clique::create(2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (int i = 0; i < 20; ++i) {
    CaseSpec sa, sb;
    sa.coll = Coll::kAllReduce;
    sa.count = 333;
    sb.coll = Coll::kAllToAll;
    sb.count = 77;
    CollCase ca(sa, 2), cb(sb, 2);
    ca.prepare(static_cast<uint64_t>(i));
    cb.prepare(static_cast<uint64_t>(i) + 500);
    CONCCL_OK(concclGroupStart());
    for (int r = 0; r < 2; ++r) {
      CONCCL_OK(ca.call(r, a->comms[r], a->streams[r]));
      CONCCL_OK(cb.call(r, b->comms[r], b->streams[r]));
    }
    CONCCL_OK(concclGroupEnd());
    ASSERT_TRUE(a->sync());
    ASSERT_TRUE(b->sync());
    ASSERT_TRUE(ca.check("comm a"));
    ASSERT_TRUE(cb.check("comm b"));
  }
}

// x <- AllReduce_sum(x) on 3 ranks, 10,000 times, synchronised once at the end. Multiplying by 3 is a
// bijection modulo 2^32, so a lost, repeated or overtaken call changes the result.
TEST(Usage, TenThousandBackToBackCalls) {
  SKIP_WITHOUT_GPU();
  constexpr int kN = 3;
  constexpr int kCalls = 10000;
  constexpr size_t kCount = 7;
  Clique* clique = sharedClique(kN);
  ASSERT_NE(clique, nullptr);
  std::vector<DeviceMem> bufs;
  std::vector<uint32_t> sum(kCount, 0);
  for (int r = 0; r < kN; ++r) {
    std::vector<uint32_t> init(kCount);
    fillRandomBytes(init.data(), init.size() * 4, static_cast<uint64_t>(r) + 42);
    for (size_t i = 0; i < kCount; ++i) sum[i] += init[i];
    bufs.emplace_back(kCount * 4);
    CUDA_OK(cudaMemcpy(bufs.back().get(), init.data(), kCount * 4, cudaMemcpyHostToDevice));
  }
  syncAllDevices();
  std::vector<uint32_t> expected = sum;
  for (int c = 1; c < kCalls; ++c) {
    for (auto& v : expected) v *= 3u;
  }
  for (int c = 0; c < kCalls; ++c) {
    CONCCL_OK(concclGroupStart());
    for (int r = 0; r < kN; ++r) {
      CONCCL_OK(concclAllReduce(bufs[r].get(), bufs[r].get(), kCount, concclUint32, concclSum, clique->comms[r],
                                clique->streams[r]));
    }
    CONCCL_OK(concclGroupEnd());
  }
  ASSERT_TRUE(clique->sync());
  for (int r = 0; r < kN; ++r) {
    std::vector<uint32_t> got(kCount);
    CUDA_OK(cudaMemcpy(got.data(), bufs[r].get(), kCount * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, expected) << "rank " << r;
  }
}

// One std::thread per rank, no group: each rank's calls rendezvous on the host (for peer addresses) but
// never wait for the GPU.
TEST(Usage, OneThreadPerRank) {
  SKIP_WITHOUT_GPU();
  for (int n : {2, 4}) {
    Clique* clique = sharedClique(n);
    ASSERT_NE(clique, nullptr);
    for (Coll coll : {Coll::kAllGather, Coll::kAllReduce, Coll::kReduceScatter, Coll::kBroadcast, Coll::kAllToAll,
                      Coll::kGather, Coll::kScatter, Coll::kReduce}) {
      for (int iter = 0; iter < 5; ++iter) {
        CaseSpec spec;
        spec.coll = coll;
        spec.count = 4099;
        spec.dtype = concclFloat32;
        spec.root = iter % n;
        spec.inPlace = iter % 2 == 1 && hasInPlace(coll);
        CollCase c(spec, n);
        c.prepare(static_cast<uint64_t>(iter) * 31 + 7);
        std::vector<concclResult_t> results(static_cast<size_t>(n), concclInternalError);
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            results[static_cast<size_t>(r)] = c.call(r, clique->comms[r], clique->streams[r]);
            cudaStreamSynchronize(clique->streams[r]);
          });
        }
        for (auto& t : threads) t.join();
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(results[static_cast<size_t>(r)], concclSuccess)
              << spec.describe(n) << " rank " << r << ": " << concclGetLastError(clique->comms[r]);
        }
        ASSERT_TRUE(c.check("thread per rank"));
      }
    }
  }
}

// Runs one AllGather whose rank-0 arguments are replaced by (send, recv); returns the result and the message.
std::pair<concclResult_t, std::string> badAllGather(Clique& clique, const void* send0, void* recv0, size_t count,
                                                    DeviceMem& send1, DeviceMem& recv1) {
  concclResult_t first = concclGroupStart();
  concclResult_t r0 = concclAllGather(send0, recv0, count, concclFloat32, clique.comms[0], clique.streams[0]);
  concclResult_t r1 =
      concclAllGather(send1.get(), recv1.get(), count, concclFloat32, clique.comms[1], clique.streams[1]);
  concclResult_t end = concclGroupEnd();
  concclResult_t res = first != concclSuccess ? first : r0 != concclSuccess ? r0 : r1 != concclSuccess ? r1 : end;
  std::string message = concclGetLastError(clique.comms[0]);
  if (message.empty()) message = concclGetLastError(nullptr);
  return {res, message};
}

TEST(BadInput, HostPointer) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  const size_t count = 64;
  std::vector<float> host(count, 1.0f);
  DeviceMem recv0(2 * count * 4), send1(count * 4), recv1(2 * count * 4);
  auto [res, message] = badAllGather(*clique, host.data(), recv0.get(), count, send1, recv1);
  EXPECT_EQ(res, concclInvalidArgument);
  EXPECT_NE(message.find("host pointer"), std::string::npos) << message;
  clique->broken = true;  // abort rather than destroy: the clique may be out of service now
}

TEST(BadInput, BufferTooSmall) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  const size_t count = 1024;
  DeviceMem send0(count * 4), recv0(count * 4 /* needs 2x */), send1(count * 4), recv1(2 * count * 4);
  auto [res, message] = badAllGather(*clique, send0.get(), recv0.get(), count, send1, recv1);
  EXPECT_EQ(res, concclInvalidArgument);
  EXPECT_NE(message.find("too small"), std::string::npos) << message;
  clique->broken = true;
}

TEST(BadInput, PointerOnWrongDevice) {
  SKIP_WITHOUT_GPUS(2);
  auto clique = Clique::create(2, CONCCL_CONFIG_UNDEF_INT, {0, 1});
  ASSERT_NE(clique, nullptr);
  const size_t count = 64;
  DeviceMem send0(count * 4, /*device=*/1), recv0(2 * count * 4, 0), send1(count * 4, 1), recv1(2 * count * 4, 1);
  auto [res, message] = badAllGather(*clique, send0.get(), recv0.get(), count, send1, recv1);
  EXPECT_EQ(res, concclInvalidArgument);
  EXPECT_NE(message.find("device"), std::string::npos) << message;
  clique->broken = true;
}

TEST(Abort, AbortUnblocksAPeerThatNeverArrives) {
  SKIP_WITHOUT_GPU();
  // Rank 1 never calls. In thread-per-rank mode rank 0's call would wait on the host for rank 1's arguments;
  // abort must end that wait promptly, and the communicator must then be freed without hanging.
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  DeviceMem send(256), recv(512);
  concclResult_t result = concclSuccess;
  std::thread t([&] {
    result = concclAllGather(send.get(), recv.get(), 64, concclFloat32, clique->comms[0], clique->streams[0]);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  concclCommAbort(clique->comms[1]);
  clique->comms[1] = nullptr;
  t.join();
  EXPECT_NE(result, concclSuccess);
  clique->broken = true;
}


// CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM, TransformerEngine): ranks sharing a GPU would deadlock on the one
// hardware queue, so init refuses them with concclInvalidUsage and a message naming the variable (issue 13). The
// library reads the variable at init; CUDA read it when it started, so only the refusal is exercised here (the
// tests' own CUDA runs with 32). One rank per GPU is accepted with 1.
TEST(BadInput, SharedGpuWithOneHardwareQueueIsRefused) {
  SKIP_WITHOUT_GPU();
  CUDA_OK(cudaFree(nullptr));  // CUDA starts (and reads the variable) before it is changed below
  const char* old = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::string saved = old != nullptr ? old : "";
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  concclConfig_t config = cudaConfig();
  concclComm_t comms[2] = {nullptr, nullptr};
  int shared[2] = {0, 0};
  EXPECT_EQ(concclCommInitAll(comms, 2, shared, &config), concclInvalidUsage);
  const std::string message = concclGetLastError(nullptr);
  EXPECT_NE(message.find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos) << message;
  EXPECT_NE(message.find("device 0"), std::string::npos) << message;
  EXPECT_EQ(comms[0], nullptr);
  if (deviceCount() >= 2) {
    int distinct[2] = {0, 1};
    EXPECT_EQ(concclCommInitAll(comms, 2, distinct, &config), concclSuccess) << concclGetLastError(nullptr);
    for (concclComm_t c : comms) {
      if (c != nullptr) {
        EXPECT_EQ(concclCommDestroy(c), concclSuccess);
      }
    }
  }
  if (old != nullptr) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", saved.c_str(), 1);
  } else {
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  }
}

}  // namespace
}  // namespace conccl::gputest
