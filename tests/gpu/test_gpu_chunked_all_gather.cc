// concclAllGatherChunked (issue 15, item 1): block k's event is recorded only once block k is in recvbuff. A
// consumer stream per rank waits for each block's event and copies the block away at that moment; afterwards every
// snapshot must equal the block's source. The output is poisoned before each call, so an event recorded too early
// lets the snapshot catch poison. Every path (small-message kernel, copy engines, engine = copy), in place and out
// of place, sizes from one element to several MiB per block, events reused across calls, ranks on distinct GPUs
// where the machine has them (else sharing GPU 0).
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

struct ChunkedRank {
  DeviceMem send, recv, snapshot;
  std::vector<unsigned char> input;
  std::vector<cudaEvent_t> events;
  cudaStream_t consumer = nullptr;
};

void runChunked(Path path, int n, size_t count, bool inPlace, int calls) {
  SCOPED_TRACE(std::string(pathName(path)) + " n=" + std::to_string(n) + " count=" + std::to_string(count) +
               (inPlace ? " in place" : " out of place"));
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices, smallBytesFor(path), engineFor(path));
  ASSERT_NE(clique, nullptr);
  const size_t block = count * sizeof(float);
  std::vector<ChunkedRank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ChunkedRank& k = ranks[static_cast<size_t>(r)];
    const int dev = devices[static_cast<size_t>(r)];
    CUDA_OK(cudaSetDevice(dev));
    k.recv = DeviceMem(block * n, dev);
    k.snapshot = DeviceMem(block * n, dev);
    if (!inPlace) k.send = DeviceMem(block, dev);
    k.events.resize(static_cast<size_t>(n));
    for (auto& e : k.events) CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_OK(cudaStreamCreateWithFlags(&k.consumer, cudaStreamNonBlocking));
  }
  for (int call = 0; call < calls; ++call) {
    for (int r = 0; r < n; ++r) {
      ChunkedRank& k = ranks[static_cast<size_t>(r)];
      k.input.resize(block);
      fillRandomBytes(k.input.data(), block, 1000003ull * static_cast<uint64_t>(call + 1) + static_cast<uint64_t>(r));
      std::vector<unsigned char> poison(block * n);
      fillRandomBytes(poison.data(), poison.size(), 7919ull * static_cast<uint64_t>(call + 1) + 13ull * static_cast<uint64_t>(r));
      if (inPlace) std::memcpy(poison.data() + block * r, k.input.data(), block);
      CUDA_OK(cudaMemcpy(k.recv.get(), poison.data(), poison.size(), cudaMemcpyHostToDevice));
      if (!inPlace) CUDA_OK(cudaMemcpy(k.send.get(), k.input.data(), block, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(k.snapshot.get(), 0, block * n));
    }
    syncAllDevices();
    CONCCL_OK(concclGroupStart());
    for (int r = 0; r < n; ++r) {
      ChunkedRank& k = ranks[static_cast<size_t>(r)];
      const void* send = inPlace ? static_cast<const void*>(k.recv.get() + block * r) : k.send.get();
      ASSERT_EQ(concclAllGatherChunked(send, k.recv.get(), count, concclFloat32, clique->comms[static_cast<size_t>(r)],
                                       clique->streams[static_cast<size_t>(r)], k.events.data()),
                concclSuccess)
          << concclGetLastError(clique->comms[static_cast<size_t>(r)]);
    }
    CONCCL_OK(concclGroupEnd());
    // The consumers: block b as it is when its event fires.
    for (int r = 0; r < n; ++r) {
      ChunkedRank& k = ranks[static_cast<size_t>(r)];
      CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
      for (int b = 0; b < n; ++b) {
        CUDA_OK(cudaStreamWaitEvent(k.consumer, k.events[static_cast<size_t>(b)], 0));
        CUDA_OK(cudaMemcpyAsync(k.snapshot.get() + block * b, k.recv.get() + block * b, block,
                                cudaMemcpyDeviceToDevice, k.consumer));
      }
    }
    ASSERT_TRUE(clique->sync());
    for (int r = 0; r < n; ++r) {
      ChunkedRank& k = ranks[static_cast<size_t>(r)];
      CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
      CUDA_OK(cudaStreamSynchronize(k.consumer));
      std::vector<unsigned char> snap(block * n), out(block * n);
      CUDA_OK(cudaMemcpy(snap.data(), k.snapshot.get(), snap.size(), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(out.data(), k.recv.get(), out.size(), cudaMemcpyDeviceToHost));
      for (int b = 0; b < n; ++b) {
        const auto& want = ranks[static_cast<size_t>(b)].input;
        EXPECT_EQ(std::memcmp(out.data() + block * b, want.data(), block), 0)
            << "call " << call << " rank " << r << ": block " << b << " of the output is wrong";
        EXPECT_EQ(std::memcmp(snap.data() + block * b, want.data(), block), 0)
            << "call " << call << " rank " << r << ": block " << b << " was not complete when its event fired";
      }
    }
  }
  for (auto& k : ranks) {
    for (auto e : k.events) cudaEventDestroy(e);
    cudaStreamDestroy(k.consumer);
  }
}

TEST(ChunkedAllGather, EveryBlockIsCompleteWhenItsEventFires) {
  SKIP_WITHOUT_GPU();
  for (Path path : {Path::kDefault, Path::kCopyEngines, Path::kNoSm}) {
    for (int n : {2, 3}) {
      for (size_t count : {size_t{1}, size_t{4099}, size_t{1} << 20}) {
        for (bool inPlace : {false, true}) runChunked(path, n, count, inPlace, 3);
      }
    }
  }
}

TEST(ChunkedAllGather, RefusesWhatItCannotDo) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  DeviceMem buf(64);
  EXPECT_EQ(concclAllGatherChunked(buf.get(), buf.get() + 16, 1, concclFloat32, clique->comms[0], clique->streams[0],
                                   nullptr),
            concclInvalidArgument);
}

}  // namespace
}  // namespace conccl::gputest
