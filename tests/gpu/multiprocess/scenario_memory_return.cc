// See scenario_memory_return.h.
#include "gpu/multiprocess/scenario_memory_return.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/executor.h"  // ipcImportCount, vmmImportCount

namespace conccl::mpworker {
namespace {

// An AllReduce of one float on `flag` (its value: this rank's vote), waited for: returns the sum. Every rank gets the
// same sum, so every rank takes the same decisions from it.
float allVote(float vote, const Buf& flag, concclComm_t comm, cudaStream_t stream, const char* what) {
  cudaOk(cudaMemcpyAsync(flag.p, &vote, sizeof(vote), cudaMemcpyHostToDevice, stream), "h2d");
  ok(concclAllReduce(flag.p, flag.p, 1, concclFloat32, concclSum, comm, stream), comm, what);
  float sum = 0;
  cudaOk(cudaMemcpyAsync(&sum, flag.p, sizeof(sum), cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, what, 120);
  return sum;
}

size_t freeBytes() {
  size_t free = 0, total = 0;
  cudaOk(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

// An in-place AllReduce of `count` floats of value rank + 1 at `p` on `comm`, checked (every element nranks(nranks+1)/2).
void allReduceChecked(void* p, size_t count, int rank, int nranks, concclComm_t comm, cudaStream_t stream,
                      const char* what) {
  std::vector<float> host(count, static_cast<float>(rank + 1));
  cudaOk(cudaMemcpyAsync(p, host.data(), count * 4, cudaMemcpyHostToDevice, stream), "h2d");
  ok(concclAllReduce(p, p, count, concclFloat32, concclSum, comm, stream), comm, what);
  cudaOk(cudaMemcpyAsync(host.data(), p, count * 4, cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, what, 120);
  const float want = static_cast<float>(nranks * (nranks + 1) / 2);
  for (size_t i = 0; i < count; i += 1 + i % 4093) {
    if (host[i] != want) {
      throw std::runtime_error(std::string(what) + ": element " + std::to_string(i) + " is " +
                               std::to_string(host[i]) + ", not " + std::to_string(want));
    }
  }
}

}  // namespace

void scenarioMemoryReturnWithoutCalls(concclComm_t comm, int rank, int nranks, cudaStream_t stream, BufKind kind) {
  concclComm_t second = secondCommunicator(comm, rank, nranks, stream);
  // The votes' buffer, exported by A before the baseline (B never sees it).
  Buf flag(sizeof(float));
  (void)allVote(0, flag, comm, stream, "barrier");

  // The baseline: read by every rank between two barriers, so that no rank has allocated yet.
  const size_t before = freeBytes();
  (void)allVote(0, flag, comm, stream, "barrier");
  const size_t count = (size_t{256} << 20) / 4;
  {
    Buf big(count * 4, kind);
    allReduceChecked(big.p, count, rank, nranks, comm, stream, "AllReduce 256 MiB on A");
    allReduceChecked(big.p, count, rank, nranks, second, stream, "AllReduce 256 MiB on B");
    if (kind == BufKind::kVmmShareable && exec::vmmImportCount() == 0) {
      throw std::runtime_error("memory return: no peer's VMM unit is mapped (the calls were staged)");
    }
    if (kind == BufKind::kMalloc && exec::ipcImportCount() == 0) {
      throw std::runtime_error("memory return: no peer's allocation is mapped (the calls were staged)");
    }
    (void)allVote(0, flag, comm, stream, "barrier");  // every rank's calls on it are complete before any frees it
  }  // freed here, on every rank

  // A goes on with small calls, every 50 ms; B makes none. Each round every rank votes whether the GPU's free memory
  // is back: all must be (one number for the whole GPU where ranks share it).
  constexpr size_t kSlack = size_t{64} << 20;
  const auto t0 = std::chrono::steady_clock::now();
  bool back = false;
  size_t lastFree = 0;
  for (int round = 0; round < 100 && !back; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    lastFree = freeBytes();
    back = allVote(lastFree + kSlack >= before ? 1.0f : 0.0f, flag, comm, stream, "vote") == static_cast<float>(nranks);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!back) {
    throw std::runtime_error("memory return: " + std::to_string((before - std::min(before, lastFree)) >> 20) +
                             " MiB still held " + std::to_string(static_cast<int>(ms)) +
                             " ms after every rank freed 256 MiB used on two communicators (one of them idle since)");
  }
  std::fprintf(stderr,
               "rank %d: 256 MiB (%s) used on two communicators and freed by every rank went back in %.0f ms, the "
               "second communicator making no further call\n",
               rank, kind == BufKind::kMalloc ? "cudaMalloc" : "shareable VMM", ms);
  ok(concclCommDestroy(second), nullptr, "concclCommDestroy (B)");
}

void scenarioAddressReusedAtOnce(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  concclComm_t second = secondCommunicator(comm, rank, nranks, stream);
  Buf flag(sizeof(float));
  // A large allocation and a small one, two rounds each. cudaMalloc carves small ones out of larger blocks: a 3072 B
  // one at offset 0x6400 of its block failed to map with cudaErrorAlreadyMapped (one H200, 2026-12-01,
  // docs/results/2026-12-01-h200-1gpu-chunked-fused-ops/run8-mp_all.log).
  const size_t sizes[] = {size_t{64} << 20, size_t{64} << 20, 3072, 3072};
  int reused = 0;
  std::string places;
  for (int round = 0; round < 4; ++round) {
    const size_t count = sizes[round] / 4;
    // Even rounds map the first allocation on A and reuse its place on B; odd rounds the other way round.
    concclComm_t first = round % 2 == 0 ? comm : second;
    concclComm_t then = round % 2 == 0 ? second : comm;
    void* oldPlace = nullptr;
    {
      Buf a(count * 4);
      oldPlace = a.p;
      allReduceChecked(a.p, count, rank, nranks, first, stream, "AllReduce, first allocation");
      (void)allVote(0, flag, first, stream, "barrier");  // every rank's call on it is complete before any frees it
    }
    // Freed and allocated again at once: cudaMalloc hands the same place back. `first` makes no call before the
    // call on `then`, so the peers' mappings of the old allocation are held by a communicator that has not heard of
    // its retirement.
    Buf b(count * 4);
    reused += b.p == oldPlace ? 1 : 0;
    places += b.p == oldPlace ? " same" : " other";
    allReduceChecked(b.p, count, rank, nranks, then, stream, "AllReduce at the freed allocation's place");
    (void)allVote(0, flag, then, stream, "barrier");
  }
  // The case is only exercised where the place was reused; every rank must have seen it at least once.
  const float reusedEverywhere = allVote(reused > 0 ? 1.0f : 0.0f, flag, comm, stream, "vote");
  if (reusedEverywhere != static_cast<float>(nranks)) {
    throw std::runtime_error("address reuse: cudaMalloc did not hand the freed place back on every rank (rank " +
                             std::to_string(rank) + ", place per round:" + places + "), so the case was not exercised");
  }
  std::fprintf(stderr,
               "rank %d: allocations of 64 MiB, 64 MiB, 3 KiB, 3 KiB freed and allocated again (place per round:%s) "
               "were moved directly on the other communicator at once, right\n",
               rank, places.c_str());
  ok(concclCommDestroy(second), nullptr, "concclCommDestroy (B)");
}

}  // namespace conccl::mpworker
