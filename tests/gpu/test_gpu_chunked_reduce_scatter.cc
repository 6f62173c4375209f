// concclReduceScatterChunked (issue 15, item 1): no piece of sendbuff is read before its event. Each rank's
// producer stream writes its sendbuff piece by piece, each piece only after the test opens that piece's gate (a
// host function that blocks until the host releases it), and records the piece's event. sendbuff holds poison until
// then. The reduce-scatter is enqueued while every gate is still closed and the host waits before opening them one by
// one, so a call that read a piece early reduces poison and the result differs from the reference. Every path (the
// small-message kernel, copy engines, engine = copy), in place and out of place, 1 and 3 pieces per block, a group
// and a thread per rank, events reused across calls; ranks on distinct GPUs where the machine has them.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "gpu/host_gate.h"

namespace conccl::gputest {
namespace {

struct ProducerRank {
  DeviceMem send, recv, staged;
  std::vector<float> input;  // what the producer writes into sendbuff
  std::vector<cudaEvent_t> events;
  cudaStream_t producer = nullptr;
};

struct Case {
  Path path;
  int n;
  size_t count;  // recvcount
  int pieces;    // per block
  bool inPlace;
  bool threadPerRank;
};

std::string describe(const Case& c) {
  return std::string(pathName(c.path)) + " n=" + std::to_string(c.n) + " count=" + std::to_string(c.count) +
         " pieces=" + std::to_string(c.pieces) + (c.inPlace ? " in place" : " out of place") +
         (c.threadPerRank ? " thread per rank" : " group");
}

void runCase(const Case& c, int calls) {
  SCOPED_TRACE(describe(c));
  const int n = c.n;
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices, smallBytesFor(c.path), engineFor(c.path));
  ASSERT_NE(clique, nullptr);
  const size_t total = c.count * static_cast<size_t>(n);
  const size_t pieceElems = (c.count + static_cast<size_t>(c.pieces) - 1) / static_cast<size_t>(c.pieces);
  const int piecesTotal = n * c.pieces;
  HostGates gates(std::chrono::seconds(60));  // shared by the ranks: gate k of every rank opens at once
  std::vector<ProducerRank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ProducerRank& k = ranks[static_cast<size_t>(r)];
    const int dev = devices[static_cast<size_t>(r)];
    CUDA_OK(cudaSetDevice(dev));
    k.send = DeviceMem(total * sizeof(float), dev);
    k.staged = DeviceMem(total * sizeof(float), dev);
    if (!c.inPlace) k.recv = DeviceMem(c.count * sizeof(float), dev);
    k.events.resize(static_cast<size_t>(piecesTotal));
    for (auto& e : k.events) CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_OK(cudaStreamCreateWithFlags(&k.producer, cudaStreamNonBlocking));
  }
  std::mt19937_64 gen(std::random_device{}());
  for (int call = 0; call < calls; ++call) {
    gates.reset();
    // Fresh inputs (small integers: every sum is exact in fp32) and poison in sendbuff.
    for (int r = 0; r < n; ++r) {
      ProducerRank& k = ranks[static_cast<size_t>(r)];
      k.input.resize(total);
      for (float& v : k.input) v = static_cast<float>(static_cast<int>(gen() % 201) - 100);
      std::vector<float> poison(total, 1.0e30f);
      CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
      CUDA_OK(cudaMemcpy(k.staged.get(), k.input.data(), total * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(k.send.get(), poison.data(), total * sizeof(float), cudaMemcpyHostToDevice));
    }
    syncAllDevices();
    // The producers: the pieces in a rank-dependent order (block r + 1 first, the own block last, as a GEMM feeding
    // a reduce-scatter would), each behind its gate. Gate numbers follow the global release order below.
    for (int r = 0; r < n; ++r) {
      ProducerRank& k = ranks[static_cast<size_t>(r)];
      CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
      for (int step = 0; step < n; ++step) {
        const int q = (r + 1 + step) % n;
        for (int j = 0; j < c.pieces; ++j) {
          const int index = q * c.pieces + j;
          const size_t first = static_cast<size_t>(q) * c.count + static_cast<size_t>(j) * pieceElems;
          const size_t elems = static_cast<size_t>(j) * pieceElems >= c.count
                                   ? 0
                                   : std::min(pieceElems, c.count - static_cast<size_t>(j) * pieceElems);
          CUDA_OK(gates.enqueue(k.producer, 1 + step * c.pieces + j));
          if (elems > 0) {
            CUDA_OK(cudaMemcpyAsync(k.send.get() + first * sizeof(float), k.staged.get() + first * sizeof(float),
                                    elems * sizeof(float), cudaMemcpyDeviceToDevice, k.producer));
          }
          CUDA_OK(cudaEventRecord(k.events[static_cast<size_t>(index)], k.producer));
        }
      }
    }
    auto issue = [&](int r) {
      ProducerRank& k = ranks[static_cast<size_t>(r)];
      void* recv = c.inPlace ? static_cast<void*>(k.send.get() + static_cast<size_t>(r) * c.count * sizeof(float))
                             : static_cast<void*>(k.recv.get());
      return concclReduceScatterChunked(k.send.get(), recv, c.count, concclFloat32, concclSum,
                                        clique->comms[static_cast<size_t>(r)], clique->streams[static_cast<size_t>(r)],
                                        c.pieces, k.events.data());
    };
    std::vector<concclResult_t> results(static_cast<size_t>(n), concclInternalError);
    if (c.threadPerRank) {
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = issue(r); });
      for (auto& t : threads) t.join();
    } else {
      CONCCL_OK(concclGroupStart());
      for (int r = 0; r < n; ++r) results[static_cast<size_t>(r)] = issue(r);
      CONCCL_OK(concclGroupEnd());
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(results[static_cast<size_t>(r)], concclSuccess)
          << "rank " << r << ": " << concclGetLastError(clique->comms[static_cast<size_t>(r)]);
    }
    // Every call is enqueued and no piece exists yet: a call that does not wait reads poison now.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int g = 1; g <= piecesTotal; ++g) {
      gates.open(g);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(clique->sync());
    for (int r = 0; r < n; ++r) {
      ProducerRank& k = ranks[static_cast<size_t>(r)];
      CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
      CUDA_OK(cudaStreamSynchronize(k.producer));
      std::vector<float> out(c.count);
      const char* src = c.inPlace ? k.send.get() + static_cast<size_t>(r) * c.count * sizeof(float) : k.recv.get();
      CUDA_OK(cudaMemcpy(out.data(), src, c.count * sizeof(float), cudaMemcpyDeviceToHost));
      size_t wrong = 0, firstWrong = 0;
      for (size_t i = 0; i < c.count; ++i) {
        float want = 0;
        for (int p = 0; p < n; ++p) want += ranks[static_cast<size_t>(p)].input[static_cast<size_t>(r) * c.count + i];
        if (out[i] != want && wrong++ == 0) firstWrong = i;
      }
      EXPECT_EQ(wrong, 0u) << "call " << call << " rank " << r << ": " << wrong << " wrong elements, first at "
                           << firstWrong << " (a piece was read before its event)";
    }
  }
  for (auto& k : ranks) {
    for (auto e : k.events) cudaEventDestroy(e);
    cudaStreamDestroy(k.producer);
  }
}

TEST(ChunkedReduceScatter, NoPieceIsReadBeforeItsEvent) {
  SKIP_WITHOUT_GPU();
  for (Path path : {Path::kDefault, Path::kCopyEngines, Path::kNoSm}) {
    for (int n : {2, 3}) {
      for (size_t count : {size_t{1}, size_t{4099}, size_t{1} << 20}) {
        for (int pieces : {1, 3}) {
          for (bool inPlace : {false, true}) {
            for (bool threadPerRank : {false, true}) {
              // The thread-per-rank runs cover the default path only: the rendezvous is path-independent.
              if (threadPerRank && path != Path::kDefault) continue;
              runCase(Case{path, n, count, pieces, inPlace, threadPerRank}, 2);
            }
          }
        }
      }
    }
  }
}

TEST(ChunkedReduceScatter, RefusesWhatItCannotDo) {
  SKIP_WITHOUT_GPU();
  auto clique = Clique::create(2);
  ASSERT_NE(clique, nullptr);
  DeviceMem buf(64);
  cudaEvent_t events[4] = {nullptr, nullptr, nullptr, nullptr};
  EXPECT_EQ(concclReduceScatterChunked(buf.get(), buf.get() + 32, 1, concclFloat32, concclSum, clique->comms[0],
                                       clique->streams[0], 1, nullptr),
            concclInvalidArgument);
  EXPECT_EQ(concclReduceScatterChunked(buf.get(), buf.get() + 32, 1, concclFloat32, concclSum, clique->comms[0],
                                       clique->streams[0], 0, events),
            concclInvalidArgument);
  // Every rank passes pieces or none: a chunked call meeting a plain one is refused on both ranks.
  auto mixed = Clique::create(2);
  ASSERT_NE(mixed, nullptr);
  const size_t count = 1 << 16;
  DeviceMem send0(count * 8), recv0(count * 4), send1(count * 8), recv1(count * 4);
  concclResult_t r0 = concclSuccess, r1 = concclSuccess;
  std::thread t0([&] {
    r0 = concclReduceScatterChunked(send0.get(), recv0.get(), count, concclFloat32, concclSum, mixed->comms[0],
                                    mixed->streams[0], 2, events);
  });
  std::thread t1([&] {
    r1 = concclReduceScatter(send1.get(), recv1.get(), count, concclFloat32, concclSum, mixed->comms[1],
                             mixed->streams[1]);
  });
  t0.join();
  t1.join();
  EXPECT_EQ(r0, concclInvalidArgument);
  EXPECT_EQ(r1, concclInvalidArgument);
  EXPECT_NE(std::string(concclGetLastError(mixed->comms[1])).find("concclReduceScatterChunked"), std::string::npos)
      << concclGetLastError(mixed->comms[1]);
}

}  // namespace
}  // namespace conccl::gputest
