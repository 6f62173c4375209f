// See scenario_vmm.h. Inputs are regenerated on every process from shared seeds (tests/common), so each rank checks
// its own result against the reference of the whole call.
#include "gpu/multiprocess/scenario_vmm.h"

#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/host_driver.h"  // callCollective, reference (header-only)
#include "exec/executor.h"        // vmmImportCount
#include "gpu/multiprocess/worker_util.h"

namespace conccl::mpworker {
namespace {

namespace t = conccl::test;

// An in-place AllReduce of `count` floats at `p`, every rank's input from `seed`; returns what this rank should get.
t::Bytes startAllReduce(void* p, size_t count, uint64_t seed, int rank, int nranks, concclComm_t comm,
                        cudaStream_t stream, const char* what) {
  std::vector<t::Bytes> send(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
    send[static_cast<size_t>(r)] = t::randomData(count, concclFloat32, rng);
  }
  const t::Bytes& mine = send[static_cast<size_t>(rank)];
  cudaOk(cudaMemcpyAsync(p, mine.data(), mine.size(), cudaMemcpyHostToDevice, stream), "h2d");
  ok(concclAllReduce(p, p, count, concclFloat32, concclSum, comm, stream), comm, what);
  return t::reference(t::Coll::kAllReduce, send, count, concclFloat32, concclSum, 0)[static_cast<size_t>(rank)];
}

void expectAllReduced(const void* p, const t::Bytes& want, int nranks, cudaStream_t stream, const std::string& what) {
  t::Bytes got(want.size());
  cudaOk(cudaMemcpyAsync(got.data(), p, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
  syncBounded(stream, what.c_str(), 120);
  const size_t wrong = t::countWrong(got, want, concclFloat32, /*reduction=*/true, nranks);
  if (wrong != 0) throw std::runtime_error(what + ": " + std::to_string(wrong) + " wrong elements");
}

}  // namespace

void scenarioVmmRemap(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  int device = 0;
  cudaOk(cudaGetDevice(&device), "cudaGetDevice");
  // 8 MiB in 2 MiB pieces, starting 1 MiB into the first: an in-place AllReduce and an AllGather into it, three
  // rounds, piece 2 replaced by new memory between rounds (every rank's). A peer still holding the old piece would
  // read stale inputs or write where this rank no longer looks.
  const size_t count = (size_t{8} << 20) / 4;
  VmmBuffer reduced(count * 4, device, /*shareableHandles=*/true);
  VmmBuffer gathered(count * 4, device, /*shareableHandles=*/true);
  const size_t block = count / static_cast<size_t>(nranks);
  Buf mineIn(block * 4);
  for (int round = 0; round < 3; ++round) {
    for (t::Coll c : {t::Coll::kAllReduce, t::Coll::kAllGather}) {
      const bool ar = c == t::Coll::kAllReduce;
      const size_t n = ar ? count : block;
      std::vector<t::Bytes> send(static_cast<size_t>(nranks));
      for (int r = 0; r < nranks; ++r) {
        std::mt19937_64 rng(static_cast<uint64_t>(9000 + 10 * round + (ar ? 0 : 5)) * 1000003 + static_cast<uint64_t>(r));
        send[static_cast<size_t>(r)] = t::randomData(t::sendElems(c, n, nranks, r, 0), concclFloat32, rng);
      }
      const std::vector<t::Bytes> want = t::reference(c, send, n, concclFloat32, concclSum, 0);
      const t::Bytes& mine = send[static_cast<size_t>(rank)];
      void* in = ar ? reduced.p() : mineIn.p;
      void* out = ar ? reduced.p() : gathered.p();
      cudaOk(cudaMemcpyAsync(in, mine.data(), mine.size(), cudaMemcpyHostToDevice, stream), "h2d");
      ok(t::callCollective(c, in, out, n, concclFloat32, concclSum, 0, comm, stream), comm, collKindName(c));
      t::Bytes got(want[static_cast<size_t>(rank)].size());
      cudaOk(cudaMemcpyAsync(got.data(), out, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
      syncBounded(stream, collKindName(c), 120);
      const size_t wrong = t::countWrong(got, want[static_cast<size_t>(rank)], concclFloat32, ar, nranks);
      if (wrong != 0) {
        throw std::runtime_error(std::string("VMM remap, round ") + std::to_string(round) + ", " + collKindName(c) +
                                 ": " + std::to_string(wrong) + " wrong elements");
      }
    }
    // Right results prove nothing if the calls were staged: the peers' units must be mapped here.
    if (exec::vmmImportCount() == 0) {
      throw std::runtime_error("VMM remap, round " + std::to_string(round) + ": no peer's VMM unit is mapped (staged)");
    }
    // Every rank's calls of this round are complete before any rank replaces its memory.
    ok(concclAllReduce(mineIn.p, mineIn.p, 1, concclFloat32, concclSum, comm, stream), comm, "barrier");
    syncBounded(stream, "barrier", 120);
    reduced.remapPiece(2);
    gathered.remapPiece(2);
  }
  // A unit of more pieces than one message of the handle server carries (64): an in-place AllReduce of 200 MiB in
  // 2 MiB pieces (101 of them) arrives in two batches.
  {
    const size_t bigCount = (size_t{200} << 20) / 4;
    VmmBuffer big(bigCount * 4, device, /*shareableHandles=*/true);
    std::vector<float> host(bigCount);
    for (size_t i = 0; i < bigCount; ++i) host[i] = static_cast<float>((i % 1021) + 1000 * static_cast<size_t>(rank));
    cudaOk(cudaMemcpyAsync(big.p(), host.data(), bigCount * 4, cudaMemcpyHostToDevice, stream), "h2d");
    ok(concclAllReduce(big.p(), big.p(), bigCount, concclFloat32, concclSum, comm, stream), comm, "AllReduce 200 MiB");
    cudaOk(cudaMemcpyAsync(host.data(), big.p(), bigCount * 4, cudaMemcpyDeviceToHost, stream), "d2h");
    syncBounded(stream, "AllReduce 200 MiB", 120);
    const size_t ranksSum = static_cast<size_t>(nranks * (nranks - 1) / 2) * 1000;
    for (size_t i = 0; i < bigCount; i += 1 + i % 97) {
      const float want = static_cast<float>(static_cast<size_t>(nranks) * (i % 1021) + ranksSum);
      if (host[i] != want) {
        throw std::runtime_error("VMM AllReduce of 200 MiB: element " + std::to_string(i) + " is wrong");
      }
    }
    if (exec::vmmImportCount() == 0) {
      throw std::runtime_error("VMM AllReduce of 200 MiB: no peer's unit is mapped (staged)");
    }
  }
  std::fprintf(stderr,
               "rank %d: VMM pieces replaced under two buffers between 3 rounds, and a unit of 101 pieces: every "
               "result right\n",
               rank);
}

void scenarioVmmRetiredUnderLatePeer(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  int device = 0;
  cudaOk(cudaGetDevice(&device), "cudaGetDevice");
  // Above CONCCL_STAGED_MAX_BYTES (8 MiB), so that the calls map buffers (a staged call maps none).
  const size_t count = (size_t{32} << 20) / 4, half = count / 2;
  VmmBuffer whole(count * 4, device, /*shareableHandles=*/true);
  VmmBuffer fresh(half * 4, device, /*shareableHandles=*/true);
  auto late = [&](bool isLate) {
    if (isLate) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  // 1. The whole buffer, rank 0 last: on the pair-owned route it moves (and maps) everything; its unit of the whole
  //    buffer is made, and its peers need not map it.
  late(rank == 0);
  const t::Bytes want1 = startAllReduce(whole.p(), count, 9100, rank, nranks, comm, stream, "AllReduce 32 MiB");
  expectAllReduced(whole.p(), want1, nranks, stream, "VMM retired under a late peer, call 1");
  ok(concclAllReduce(fresh.p(), fresh.p(), 1, concclFloat32, concclSum, comm, stream), comm, "barrier");
  syncBounded(stream, "barrier", 120);
  // 2. Its first 16 MiB (the same unit, still mapped there), the peers 300 ms late: they map rank 0's unit when they
  //    arrive. 3. Meanwhile rank 0 replaces the last piece (outside those 16 MiB: the unit is stale) and calls on
  //    new memory, whose export sweeps the stale unit.
  late(rank != 0);
  const t::Bytes want2 = startAllReduce(whole.p(), half, 9200, rank, nranks, comm, stream, "AllReduce 16 MiB");
  if (rank == 0) whole.remapPiece(whole.pieces.size() - 1);
  const t::Bytes want3 = startAllReduce(fresh.p(), half, 9300, rank, nranks, comm, stream, "AllReduce 16 MiB, new");
  expectAllReduced(whole.p(), want2, nranks, stream, "VMM retired under a late peer, call 2");
  expectAllReduced(fresh.p(), want3, nranks, stream, "VMM retired under a late peer, call 3");
  if (exec::vmmImportCount() == 0) {
    throw std::runtime_error("VMM retired under a late peer: no peer's unit is mapped (staged)");
  }
  std::fprintf(stderr, "rank %d: a VMM unit retired while late peers had still to map it for an earlier call: every "
               "result right\n", rank);
}

}  // namespace conccl::mpworker
