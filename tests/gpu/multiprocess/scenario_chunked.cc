// See scenario_chunked.h. The producer of each rank writes sendbuff piece by piece from a staged copy, each piece
// behind a gate (a host function that returns once this process opens it) and records the piece's event; sendbuff
// holds poison until then. The reduce-scatter is enqueued while every gate is closed, so a piece read before its event
// is poison in the result. Inputs are small integers (exact fp32 sums). Then an all-gather whose consumer stream copies
// block k away when its event fires: every copy must equal rank k's input. Then one rank calls the chunked
// reduce-scatter while the others call the plain one: every rank must get concclInvalidArgument.
#include "gpu/multiprocess/scenario_chunked.h"

#include "gpu/host_gate.h"
#include "gpu/multiprocess/worker_util.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace conccl::mpworker {
namespace {

// Rank p's input of call `call`: small integers, the same on every process.
std::vector<float> inputOf(int p, int call, size_t elems) {
  std::mt19937_64 gen(0x5eed0000ull + 1000ull * static_cast<uint64_t>(call) + static_cast<uint64_t>(p));
  std::vector<float> v(elems);
  for (float& x : v) x = static_cast<float>(static_cast<int>(gen() % 201) - 100);
  return v;
}

const auto gStart = std::chrono::steady_clock::now();

// Progress on stderr (the test prints the workers' logs), with milliseconds since the scenario started.
void trace(int rank, const std::string& what) {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - gStart).count();
  std::fprintf(stderr, "rank %d %9.1f ms: %s\n", rank, ms, what.c_str());
}


void chunkedReduceScatter(concclComm_t comm, int rank, int n, cudaStream_t stream, size_t count, int pieces,
                          bool inPlace, int call) {
  const size_t total = count * static_cast<size_t>(n);
  const size_t pieceElems = (count + static_cast<size_t>(pieces) - 1) / static_cast<size_t>(pieces);
  Buf send(total * 4), staged(total * 4), recv(count * 4);
  const std::vector<float> mine = inputOf(rank, call, total);
  const std::vector<float> poison(total, 1.0e30f);
  cudaOk(cudaMemcpy(staged.p, mine.data(), total * 4, cudaMemcpyHostToDevice), "stage");
  cudaOk(cudaMemcpy(send.p, poison.data(), total * 4, cudaMemcpyHostToDevice), "poison");
  cudaOk(cudaDeviceSynchronize(), "sync");
  cudaStream_t producer = nullptr;
  cudaOk(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), "producer stream");
  std::vector<cudaEvent_t> events(static_cast<size_t>(n * pieces));
  for (auto& e : events) cudaOk(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  // A gate that gives up waiting fails the scenario (it would only be slow otherwise).
  gputest::HostGates gates(std::chrono::seconds(20));
  int gate = 0;
  for (int step = 0; step < n; ++step) {
    const int q = (rank + 1 + step) % n;  // the own block last, as a GEMM feeding a reduce-scatter would
    for (int j = 0; j < pieces; ++j) {
      const size_t at = static_cast<size_t>(j) * pieceElems;
      const size_t elems = at >= count ? 0 : std::min(pieceElems, count - at);
      const size_t first = static_cast<size_t>(q) * count + at;
      cudaOk(gates.enqueue(producer, ++gate), "gate");
      if (elems > 0) {
        cudaOk(cudaMemcpyAsync(send.c() + first * 4, staged.c() + first * 4, elems * 4, cudaMemcpyDeviceToDevice,
                               producer),
               "produce");
      }
      cudaOk(cudaEventRecord(events[static_cast<size_t>(q * pieces + j)], producer), "record");
    }
  }
  void* out = inPlace ? static_cast<void*>(send.c() + static_cast<size_t>(rank) * count * 4) : recv.p;
  const std::string what = "reduce-scatter count " + std::to_string(count) + " pieces " + std::to_string(pieces) +
                           (inPlace ? " in place" : "");
  trace(rank, what + ": calling");
  ok(concclReduceScatterChunked(send.p, out, count, concclFloat32, concclSum, comm, stream, pieces, events.data()),
     comm, "concclReduceScatterChunked");
  // The call returned (after the peers called it): no piece exists yet. Open the gates one by one.
  trace(rank, what + ": returned");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int g = 1; g <= gate; ++g) {
    gates.open(g);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  syncBounded(producer, "producer stream");
  trace(rank, what + ": produced");
  syncBounded(stream, "reduce-scatter stream");
  trace(rank, what + ": done");
  if (gates.timeouts() != 0) throw std::runtime_error(what + ": a producer gate was never opened");
  std::vector<float> got(count);
  cudaOk(cudaMemcpy(got.data(), out, count * 4, cudaMemcpyDeviceToHost), "read back");
  std::vector<std::vector<float>> inputs;
  for (int p = 0; p < n; ++p) inputs.push_back(inputOf(p, call, total));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int p = 0; p < n; ++p) want += inputs[static_cast<size_t>(p)][static_cast<size_t>(rank) * count + i];
    if (got[i] != want) {
      throw std::runtime_error("reduce-scatter count " + std::to_string(count) + " pieces " + std::to_string(pieces) +
                               (inPlace ? " in place" : "") + ": element " + std::to_string(i) + " is " +
                               std::to_string(got[i]) + ", want " + std::to_string(want) +
                               " (a piece was read before its event)");
    }
  }
  for (auto e : events) cudaEventDestroy(e);
  cudaStreamDestroy(producer);
}

void chunkedAllGather(concclComm_t comm, int rank, int n, cudaStream_t stream, size_t count, int call) {
  const size_t block = count * 4;
  Buf send(block), recv(block * static_cast<size_t>(n)), snapshot(block * static_cast<size_t>(n));
  const std::vector<float> mine = inputOf(rank, call, count);
  cudaOk(cudaMemcpy(send.p, mine.data(), block, cudaMemcpyHostToDevice), "input");
  cudaOk(cudaMemset(recv.p, 0xff, block * static_cast<size_t>(n)), "poison");
  cudaOk(cudaMemset(snapshot.p, 0, block * static_cast<size_t>(n)), "snapshot");
  cudaOk(cudaDeviceSynchronize(), "sync");
  cudaStream_t consumer = nullptr;
  cudaOk(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), "consumer stream");
  std::vector<cudaEvent_t> events(static_cast<size_t>(n));
  for (auto& e : events) cudaOk(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  trace(rank, "all-gather count " + std::to_string(count) + ": calling");
  ok(concclAllGatherChunked(send.p, recv.p, count, concclFloat32, comm, stream, events.data()), comm,
     "concclAllGatherChunked");
  trace(rank, "all-gather: returned");
  for (int b = 0; b < n; ++b) {
    cudaOk(cudaStreamWaitEvent(consumer, events[static_cast<size_t>(b)], 0), "wait");
    cudaOk(cudaMemcpyAsync(snapshot.c() + block * static_cast<size_t>(b), recv.c() + block * static_cast<size_t>(b),
                           block, cudaMemcpyDeviceToDevice, consumer),
           "snapshot copy");
  }
  syncBounded(stream, "all-gather stream");
  syncBounded(consumer, "consumer stream");
  trace(rank, "all-gather: done");
  std::vector<float> snap(count * static_cast<size_t>(n));
  cudaOk(cudaMemcpy(snap.data(), snapshot.p, snap.size() * 4, cudaMemcpyDeviceToHost), "read back");
  for (int b = 0; b < n; ++b) {
    const std::vector<float> want = inputOf(b, call, count);
    if (std::memcmp(snap.data() + count * static_cast<size_t>(b), want.data(), block) != 0) {
      throw std::runtime_error("all-gather count " + std::to_string(count) + ": block " + std::to_string(b) +
                               " was not complete when its event fired");
    }
  }
  for (auto e : events) cudaEventDestroy(e);
  cudaStreamDestroy(consumer);
}

void mixedCallsAreRefused(concclComm_t comm, int rank, int n, cudaStream_t stream) {
  // 8 MiB per block: above the worker's CONCCL_STAGED_MAX_BYTES, and the scenario runs with late calls waiting on the
  // host (CONCCL_STAGE_LATE_CALLS=0), so the call takes the regular path, where the ranks' arguments meet before
  // anything launches and the refusal is synchronous. (A staged call, by size or because a peer was late, launches
  // first and learns of a disagreement afterwards: concclInvalidUsage on every rank, like any mismatch there;
  // scenario_staged.h.)
  const size_t count = size_t{2} << 20;
  Buf send(count * 4 * static_cast<size_t>(n)), recv(count * 4);
  std::vector<cudaEvent_t> none(static_cast<size_t>(n), nullptr);
  const concclResult_t r =
      rank == 0 ? concclReduceScatterChunked(send.p, recv.p, count, concclFloat32, concclSum, comm, stream, 1,
                                             none.data())
                : concclReduceScatter(send.p, recv.p, count, concclFloat32, concclSum, comm, stream);
  if (r != concclInvalidArgument) {
    throw std::runtime_error(std::string("a chunked and a plain reduce-scatter in one call returned ") +
                             concclGetErrorString(r) + ", want concclInvalidArgument");
  }
  const std::string message = concclGetLastError(comm);
  if (message.find("concclReduceScatterChunked") == std::string::npos) {
    throw std::runtime_error("the mismatch message does not name the chunked call: " + message);
  }
}

}  // namespace

void scenarioChunked(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  int call = 0;
  for (size_t count : {size_t{1000}, size_t{1} << 20}) {
    for (int pieces : {1, 3}) {
      for (bool inPlace : {false, true}) chunkedReduceScatter(comm, rank, nranks, stream, count, pieces, inPlace, ++call);
    }
    chunkedAllGather(comm, rank, nranks, stream, count, ++call);
  }
}

void scenarioChunkedMismatch(concclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  trace(rank, "mixed calls");
  mixedCallsAreRefused(comm, rank, nranks, stream);
  trace(rank, "mixed calls refused");
  // The communicator is still usable after the refused call.
  chunkedReduceScatter(comm, rank, nranks, stream, size_t{1} << 16, 2, false, 1);
}

}  // namespace conccl::mpworker
