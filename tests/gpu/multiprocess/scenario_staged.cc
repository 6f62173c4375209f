// See scenario_staged.h. Inputs are regenerated on every process from shared seeds (tests/common), so each rank checks
// its own result against the reference of the whole call.
#include "gpu/multiprocess/scenario_staged.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/host_driver.h"  // callCollective, reference (header-only)
#include "gpu/multiprocess/worker_util.h"

namespace conccl::mpworker {
namespace {

namespace t = conccl::test;
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::vector<t::Bytes> inputsOf(t::Coll c, size_t count, int nranks, int root, uint64_t seed) {
  std::vector<t::Bytes> send(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
    send[static_cast<size_t>(r)] = t::randomData(t::sendElems(c, count, nranks, r, root), concclFloat32, rng);
  }
  return send;
}

// One out-of-place float call of `c`; the peers of rank 0 sleep `peerDelayMs` before calling. Returns rank 0's host
// time in the call (ms; other ranks: their own) and throws on a wrong result.
double delayedCall(concclComm_t comm, int rank, int nranks, cudaStream_t stream, t::Coll c, size_t count, int root,
                   uint64_t seed, int peerDelayMs) {
  const std::vector<t::Bytes> send = inputsOf(c, count, nranks, root, seed);
  const std::vector<t::Bytes> want = t::reference(c, send, count, concclFloat32, concclSum, root);
  const t::Bytes& mine = send[static_cast<size_t>(rank)];
  const size_t recvBytes = t::recvElems(c, count, nranks, rank, root) * 4;
  Buf sbuf(mine.size()), rbuf(recvBytes);
  cudaOk(cudaMemsetAsync(rbuf.p, 0x5a, recvBytes == 0 ? 1 : recvBytes, stream), "memset");
  if (!mine.empty()) cudaOk(cudaMemcpyAsync(sbuf.p, mine.data(), mine.size(), cudaMemcpyHostToDevice, stream), "h2d");
  syncBounded(stream, "inputs");
  if (rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(peerDelayMs));
  const auto t0 = Clock::now();
  ok(t::callCollective(c, sbuf.p, rbuf.p, count, concclFloat32, concclSum, root, comm, stream), comm, collKindName(c));
  const double ms = msSince(t0);
  t::Bytes got(recvBytes);
  if (!got.empty()) cudaOk(cudaMemcpyAsync(got.data(), rbuf.p, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, collKindName(c));
  const size_t wrong = t::countWrong(got, want[static_cast<size_t>(rank)], concclFloat32, sched::isReduction(c), nranks);
  if (wrong != 0) {
    throw std::runtime_error(std::string(collKindName(c)) + " count " + std::to_string(count) + ": " +
                             std::to_string(wrong) + " wrong elements on rank " + std::to_string(rank));
  }
  return ms;
}

// Memory that CUDA IPC cannot share (a cudaMallocAsync pool; PyTorch's expandable segments are VMM memory, the same
// case): a staged call takes it (its peers never map this rank's buffers), a call on the regular path refuses it on
// every rank with a message, and the communicator stays usable.
void poolMemory(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  const size_t small = size_t{1} << 16, big = size_t{3} << 20;  // 256 KiB (staged) and 12 MiB (regular)
  float* in = nullptr;
  float* out = nullptr;
  cudaOk(cudaMallocAsync(reinterpret_cast<void**>(&in), big * 4, stream), "cudaMallocAsync");
  cudaOk(cudaMallocAsync(reinterpret_cast<void**>(&out), big * 4, stream), "cudaMallocAsync");
  const std::vector<float> mine(small, static_cast<float>(rank + 1));
  cudaOk(cudaMemcpyAsync(in, mine.data(), small * 4, cudaMemcpyHostToDevice, stream), "h2d");
  ok(concclAllReduce(in, out, small, concclFloat32, concclSum, comm, stream), comm, "staged AllReduce on pool memory");
  std::vector<float> got(small);
  cudaOk(cudaMemcpyAsync(got.data(), out, small * 4, cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, "staged AllReduce on pool memory");
  const float want = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < small; ++i) {
    if (got[i] != want) {
      throw std::runtime_error("staged AllReduce on pool memory: element " + std::to_string(i) + " is " +
                               std::to_string(got[i]) + ", expected " + std::to_string(want));
    }
  }
  // Above the threshold too: memory CUDA IPC cannot share is staged whatever the size.
  const std::vector<float> mineBig(big, static_cast<float>(rank + 1));
  cudaOk(cudaMemcpyAsync(in, mineBig.data(), big * 4, cudaMemcpyHostToDevice, stream), "h2d");
  ok(concclAllReduce(in, out, big, concclFloat32, concclSum, comm, stream), comm, "12 MiB AllReduce on pool memory");
  std::vector<float> gotBig(big);
  cudaOk(cudaMemcpyAsync(gotBig.data(), out, big * 4, cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, "12 MiB AllReduce on pool memory");
  for (size_t i = 0; i < big; ++i) {
    if (gotBig[i] != want) {
      throw std::runtime_error("12 MiB AllReduce on pool memory: element " + std::to_string(i) + " is " +
                               std::to_string(gotBig[i]) + ", expected " + std::to_string(want));
    }
  }
  ok(concclAllReduce(in, out, small, concclFloat32, concclSum, comm, stream), comm,
     "staged AllReduce after the refusal");
  cudaOk(cudaFreeAsync(in, stream), "cudaFreeAsync");
  cudaOk(cudaFreeAsync(out, stream), "cudaFreeAsync");
  syncBounded(stream, "pool memory");
}

}  // namespace

void scenarioNoRendezvous(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  constexpr int kDelayMs = 200;
  const t::Coll colls[] = {t::Coll::kAllReduce, t::Coll::kAllGather, t::Coll::kReduceScatter, t::Coll::kBroadcast,
                           t::Coll::kReduce,    t::Coll::kAllToAll,  t::Coll::kGather,        t::Coll::kScatter};
  uint64_t seed = 500;
  std::string report;
  for (t::Coll c : colls) {
    // 64 Ki floats: at most nranks x 256 KiB in the largest buffer, far below the 8 MiB threshold.
    const double ms = delayedCall(comm, rank, nranks, stream, c, size_t{1} << 16, nranks - 1, seed++, kDelayMs);
    if (rank == 0 && ms > kDelayMs / 2.0) {
      throw std::runtime_error(std::string("staged ") + collKindName(c) + ": rank 0 waited " + std::to_string(ms) +
                               " ms in the call for its late peers (no host rendezvous expected)");
    }
    report += std::string(" ") + collKindName(c) + " " + std::to_string(ms).substr(0, 5) + " ms";
  }
  // Above the threshold (12 MiB): the regular path needs the peers' addresses, but the call is deferred to the proxy
  // thread (core/process_clique_proxy.cc) instead of waiting for them on the caller's thread.
  const double regularMs =
      delayedCall(comm, rank, nranks, stream, t::Coll::kAllReduce, size_t{3} << 20, 0, seed++, kDelayMs);
  if (rank == 0 && regularMs > kDelayMs / 2.0) {
    throw std::runtime_error("AllReduce of 12 MiB returned after " + std::to_string(regularMs) +
                             " ms: its peers were 200 ms late and the call waited for them (it must be deferred)");
  }
  // Hot path: the same ordinary buffers, 300 staged AllReduce calls of 256 KiB. The stream is drained every 8 calls
  // (outside the timed part): enqueued far ahead, CUDA's command queue fills and every enqueue then waits for the GPU,
  // which on a GPU shared by processes (time-sliced contexts) is slow; that would time the GPU, not the host.
  const size_t count = size_t{1} << 16;
  const std::vector<t::Bytes> send = inputsOf(t::Coll::kAllReduce, count, nranks, 0, seed);
  const std::vector<t::Bytes> want = t::reference(t::Coll::kAllReduce, send, count, concclFloat32, concclSum, 0);
  Buf a(count * 4), b(count * 4);
  const t::Bytes& mine = send[static_cast<size_t>(rank)];
  cudaOk(cudaMemcpyAsync(a.p, mine.data(), count * 4, cudaMemcpyHostToDevice, stream), "h2d");
  constexpr int kCalls = 300;
  double hostUs = 0;
  for (int i = 0; i < kCalls; ++i) {
    const auto t0 = Clock::now();
    ok(concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, comm, stream), comm, "AllReduce (hot)");
    hostUs += msSince(t0) * 1000.0;
    if (i % 8 == 7) syncBounded(stream, "hot path");
  }
  t::Bytes got(count * 4);
  cudaOk(cudaMemcpyAsync(got.data(), b.p, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, "hot path");
  if (t::countWrong(got, want[static_cast<size_t>(rank)], concclFloat32, true, nranks) != 0) {
    throw std::runtime_error("hot path AllReduce: wrong result");
  }
  poolMemory(comm, rank, nranks, stream);
  std::fprintf(stderr, "rank %d: staged calls with peers 200 ms late:%s; 12 MiB (regular) %.1f ms; hot path "
               "AllReduce 256 KiB: %.1f us host time per call; pool memory: 256 KiB and 12 MiB staged OK\n",
               rank, report.c_str(), regularMs, hostUs / kCalls);
}

void scenarioStagedMismatch(concclComm_t& comm, int rank, int nranks, cudaStream_t stream, int timeoutMs) {
  const size_t count = 1024;
  Buf a(count * 4), b(count * 4);
  ok(concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, comm, stream), comm, "AllReduce before");
  syncBounded(stream, "AllReduce before");
  const bool last = rank == nranks - 1;
  const auto t0 = Clock::now();
  const concclResult_t r =
      concclAllReduce(a.p, b.p, last ? count / 2 : count, concclFloat32, concclSum, comm, stream);
  // The rank that comes last may see the mismatch before it launches; the others launched and learn it later.
  if (r != concclSuccess && r != concclInvalidUsage) {
    throw std::runtime_error(std::string("mismatched staged call returned ") + concclGetErrorString(r));
  }
  concclResult_t async = concclSuccess;
  while (async == concclSuccess && msSince(t0) < 3.0 * timeoutMs + 5000) {
    ok(concclCommGetAsyncError(comm, &async), comm, "concclCommGetAsyncError");
    if (async == concclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double ms = msSince(t0);
  if (async != concclInvalidUsage) {
    throw std::runtime_error(std::string("async error ") + concclGetErrorString(async) +
                             ", expected concclInvalidUsage");
  }
  const concclResult_t next = concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, comm, stream);
  const std::string message = concclGetLastError(comm);
  if (next != concclInvalidUsage || message.find("disagree on the count") == std::string::npos) {
    throw std::runtime_error(std::string("call after the mismatch: ") + concclGetErrorString(next) + ": " + message);
  }
  syncBounded(stream, "stream after the mismatch", 30);  // the failure opened every flag the work waits on
  ok(concclCommAbort(comm), comm, "concclCommAbort");
  comm = nullptr;
  std::fprintf(stderr, "rank %d: staged mismatch reported after %.0f ms: %s\n", rank, ms, message.c_str());
}

}  // namespace conccl::mpworker
