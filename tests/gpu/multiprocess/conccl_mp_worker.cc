// One rank of a multi-process test: started N times by tests/gpu/test_gpu_multiprocess.cc (never by hand, though
// it can be: `conccl_mp_worker SCENARIO NRANKS RANK ID_HEX [TIMEOUT_MS]`). Exit status 0 = the scenario held,
// 1 = it did not (the reason on stderr), 2 = bad command line. Every rank checks its own results against a
// reference computed on the host from every rank's inputs (regenerated here from shared seeds).
//
// Scenarios:
//   collectives  every collective x dtypes x counts x in/out of place, fresh buffers per case (allocation churn:
//                new IPC mappings, retired ones), then 300 calls on the same buffers (the cached fast path), then
//                a CUDA graph of AllGather + AllReduce replayed 20 times with fresh inputs. All of them are staged
//                (at most 4 MiB); collectives-unstaged: the same on the regular path (CONCCL_STAGED_MAX_BYTES=0).
//   no-rendezvous / staged-mismatch
//                staged calls return while the peers sleep; a count mismatch is reported on every rank
//                (scenario_staged.h).
//   errors       mismatched counts and a host pointer on one rank: every rank gets the same error and the
//                communicator stays usable; register/deregister.
//   dead-peer    the last rank exits right after init; the others must fail promptly, abort, and leave nothing.
//   hung-peer    the last rank sleeps; the others time out, abort; the sleeper then fails too and aborts.
//   sendrecv     Send/Recv across processes: a ring in a group x40, a personalised all-to-all with uneven sizes,
//                a pipeline of standalone calls, a receive into a window; sendrecv-mismatch: sizes differ.
//   chunked      concclReduceScatterChunked behind a gated producer and concclAllGatherChunked with a consumer that
//                snapshots each block on its event (scenario_chunked.h); a chunked and a plain call mixed: refused.
//   pair-owned   late calls on the pair-owned route: every collective and AllToAllv, the ranks
//                arriving in a random order every call, and a burst of eight calls while the peers are late.
//   memory-return / memory-return-vmm
//                256 MiB used on two communicators and freed: the memory goes back while one of them makes no
//                further call (scenario_memory_return.h).
//   address-reuse
//                a freed allocation's place used again at once on another communicator (scenario_memory_return.h).
//   symmetric    a concclMemAlloc'd window per rank: every collective on buffers at the same offsets in it (no
//                host rendezvous), alternating with the regular path, the hot path and a graph on window buffers.
//   cross-node   a communicator across simulated hosts through the C API (CONCCL_HOSTID per process): every collective,
//                AllToAllv, a Send/Recv ring and a graph; cross-node-local: the same on one host (a rendezvous id);
//                cross-node-kill: a rank ends without destroy, the others see it within 1 s and abort.
//   symmetric-mismatch / symmetric-hung / symmetric-dead
//                after a good symmetric call, the last rank uses another offset / sleeps / exits: the others'
//                calls return at once, the watchdog reports the failure on every rank, the streams drain.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <execinfo.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/host_driver.h"  // callCollective, inPlaceLayout (header-only; pulls in gtest headers)
#include "common/reference.h"
#include "core/bootstrap.h"
#include "exec/executor.h"
#include "gpu/multiprocess/scenario_chunked.h"
#include "gpu/multiprocess/scenario_deferred.h"
#include "gpu/multiprocess/scenario_memory_return.h"
#include "gpu/multiprocess/scenario_staged.h"
#include "gpu/multiprocess/scenario_vmm.h"
#include "gpu/multiprocess/worker_util.h"

namespace {

// A worker that crashes prints where (offsets into the binary, for addr2line against the unstripped build), so that a
// crash seen once on the GPU machine can be found without rerunning it under a debugger.
void printBacktraceAndDie(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char header[] = "conccl_mp_worker: fatal signal, backtrace:\n";
  (void)!write(STDERR_FILENO, header, sizeof(header) - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

using conccl::test::Bytes;
using conccl::test::Coll;
namespace t = conccl::test;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string gTag;  // the id's tag: names the bootstrap socket and the shared-memory segment
int gRank = 0;
int gNranks = 0;
concclComm_t gComm = nullptr;

#define CHECK(cond, msg)                                                                            \
  do {                                                                                              \
    if (!(cond)) throw Failure(std::string(msg) + " [" #cond "] line " + std::to_string(__LINE__)); \
  } while (0)

void ok(concclResult_t r, const char* what) {
  if (r != concclSuccess) {
    throw Failure(std::string(what) + " -> " + concclGetErrorString(r) + ": " + concclGetLastError(gComm));
  }
}

void expectError(concclResult_t got, concclResult_t want, const char* what, const char* mustContain);
void checkNoMappingsLeft(const char* when);
void checkNothingNamedLeft(const char* when);

// The scenario files' helpers (worker_util.h): a CUDA error or a stream that does not finish within the bound
// throws, and main reports it.
using conccl::mpworker::cudaOk;
using DevBuf = conccl::mpworker::Buf;
void syncStream(cudaStream_t s, int seconds = 60) { conccl::mpworker::syncBounded(s, "stream", seconds); }

std::vector<Bytes> inputsFor(Coll c, size_t count, concclDataType_t dt, int root, uint64_t seed) {
  std::vector<Bytes> send(static_cast<size_t>(gNranks));
  for (int r = 0; r < gNranks; ++r) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
    send[static_cast<size_t>(r)] = t::randomData(t::sendElems(c, count, gNranks, r, root), dt, rng);
  }
  return send;
}

// Runs one collective case on this rank and checks the result. Returns the number of wrong elements.
// Buffers from `window` when given (in-place: at its start; out of place: send at its start, receive at
// kWindowRecvOffset), at the same offsets on every rank: a symmetric call. Otherwise fresh cudaMalloc buffers.
constexpr size_t kWindowBytes = 32u << 20;
constexpr size_t kWindowRecvOffset = 16u << 20;

// `delayMs`: this rank enters the call that much later than its inputs are enqueued (ranks arriving in some order).
size_t runCase(Coll c, concclDataType_t dt, concclRedOp_t op, size_t count, bool inPlace, int root, uint64_t seed,
               cudaStream_t stream, char* window = nullptr, int delayMs = 0) {
  const size_t es = t::esize(dt);
  std::vector<Bytes> send = inputsFor(c, count, dt, root, seed);
  std::vector<Bytes> want = t::reference(c, send, count, dt, op, root);
  const Bytes& mine = send[static_cast<size_t>(gRank)];
  const size_t recvElems = t::recvElems(c, count, gNranks, gRank, root);
  Bytes got;
  if (inPlace) {
    t::InPlaceLayout L = t::inPlaceLayout(c, count, gNranks, gRank, root);
    std::optional<DevBuf> own;
    if (window == nullptr) own.emplace(L.bufferElems * es);
    char* buf = window != nullptr ? window : own->c();
    CHECK(window == nullptr || L.bufferElems * es <= kWindowBytes, "case too large for the window");
    // Junk everywhere, then the input where the API expects it: the output must overwrite the junk.
    cudaOk(cudaMemsetAsync(buf, 0x5a, L.bufferElems * es, stream), "memset");
    if (!mine.empty())
      cudaOk(cudaMemcpyAsync(buf + L.sendAt * es, mine.data(), mine.size(), cudaMemcpyHostToDevice, stream), "h2d");
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    ok(t::callCollective(c, buf + L.sendAt * es, buf + L.recvAt * es, count, dt, op, root, gComm, stream),
       collKindName(c));
    got.resize(recvElems * es);
    if (!got.empty())
      cudaOk(cudaMemcpyAsync(got.data(), buf + L.recvAt * es, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
  } else {
    std::optional<DevBuf> ownSend, ownRecv;
    if (window == nullptr) {
      ownSend.emplace(mine.size());
      ownRecv.emplace(recvElems * es);
    }
    CHECK(window == nullptr || (mine.size() <= kWindowRecvOffset && recvElems * es <= kWindowBytes - kWindowRecvOffset),
          "case too large for the window");
    void* sbuf = window != nullptr ? static_cast<void*>(window) : ownSend->p;
    void* rbuf = window != nullptr ? static_cast<void*>(window + kWindowRecvOffset) : ownRecv->p;
    cudaOk(cudaMemsetAsync(rbuf, 0x5a, recvElems * es == 0 ? 1 : recvElems * es, stream), "memset");
    if (!mine.empty()) cudaOk(cudaMemcpyAsync(sbuf, mine.data(), mine.size(), cudaMemcpyHostToDevice, stream), "h2d");
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    ok(t::callCollective(c, sbuf, rbuf, count, dt, op, root, gComm, stream), collKindName(c));
    got.resize(recvElems * es);
    if (!got.empty()) cudaOk(cudaMemcpyAsync(got.data(), rbuf, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
  }
  return t::countWrong(got, want[static_cast<size_t>(gRank)], dt, conccl::sched::isReduction(c), gNranks);
}

// AllToAllv with uneven, rank-pair-dependent counts.
size_t runAllToAllv(uint64_t seed, cudaStream_t stream, int delayMs = 0) {
  const int n = gNranks;
  auto countOf = [&](int from, int to) {
    return static_cast<size_t>((from * 7 + to * 3 + static_cast<int>(seed)) % 11) * 97;
  };
  const concclDataType_t dt = concclFloat32;
  const size_t es = 4;
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t sTotal = 0, rTotal = 0;
  for (int p = 0; p < n; ++p) {
    sc[p] = countOf(gRank, p);
    sd[p] = sTotal;
    sTotal += sc[p] + 5;  // gaps: displacements are honoured
    rc[p] = countOf(p, gRank);
    rd[p] = rTotal;
    rTotal += rc[p] + 3;
  }
  // Every rank's send data, regenerated from seeds: rank p's block for rank q.
  auto block = [&](int p, int q) {
    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(p * 131 + q));
    return t::randomData(countOf(p, q), dt, rng);
  };
  Bytes sendHost(sTotal * es, 0);
  for (int p = 0; p < n; ++p) {
    Bytes b = block(gRank, p);
    if (!b.empty()) std::memcpy(sendHost.data() + sd[p] * es, b.data(), b.size());
  }
  DevBuf sbuf(sTotal * es), rbuf(rTotal * es);
  cudaOk(cudaMemcpyAsync(sbuf.p, sendHost.data(), sendHost.size(), cudaMemcpyHostToDevice, stream), "h2d");
  cudaOk(cudaMemsetAsync(rbuf.p, 0, rTotal * es, stream), "memset");
  std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
  ok(concclAllToAllv(sbuf.p, sc.data(), sd.data(), rbuf.p, rc.data(), rd.data(), dt, gComm, stream), "AllToAllv");
  Bytes got(rTotal * es);
  cudaOk(cudaMemcpyAsync(got.data(), rbuf.p, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
  syncStream(stream);
  size_t wrong = 0;
  for (int p = 0; p < n; ++p) {
    Bytes want = block(p, gRank);
    Bytes part(got.begin() + static_cast<long>(rd[p] * es), got.begin() + static_cast<long>((rd[p] + rc[p]) * es));
    wrong += t::countWrong(part, want, dt, false, n);
  }
  return wrong;
}

// How sweepCollectives runs its cases.
struct SweepOptions {
  char* window = nullptr;  // buffers carved out of this window (symmetric calls), else fresh per case
  std::vector<size_t> counts = {1, 4099, 262144};
  // How long this rank waits before each call, from the case's seed (0: at once).
  std::function<int(uint64_t)> delayMs;
  std::string label;  // prefixes failure messages
};

// Every collective but AllToAllv x dtypes x counts x in/out of place x ops; returns the number of cases.
int sweepCollectives(cudaStream_t stream, uint64_t& seed, const SweepOptions& options = {}) {
  const Coll colls[] = {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kAllToAll,      Coll::kGather,    Coll::kScatter};
  const concclDataType_t types[] = {concclFloat32, concclBfloat16, concclInt32};
  int cases = 0;
  for (Coll c : colls) {
    for (concclDataType_t dt : types) {
      for (size_t count : options.counts) {
        for (int ip = 0; ip < (t::hasInPlace(c) ? 2 : 1); ++ip) {
          const int root = static_cast<int>(seed % static_cast<uint64_t>(gNranks));
          // Sum everywhere; max and avg on some cases (avg only for floats).
          concclRedOp_t op = concclSum;
          if (conccl::sched::isReduction(c) && seed % 3 == 1) op = concclMax;
          if (conccl::sched::isReduction(c) && seed % 3 == 2 && dt != concclInt32) op = concclAvg;
          const int delayMs = options.delayMs ? options.delayMs(seed) : 0;
          size_t wrong = runCase(c, dt, op, count, ip == 1, root, seed, stream, options.window, delayMs);
          if (wrong != 0) {
            throw Failure(options.label + collKindName(c) + " dtype " + std::to_string(dt) + " count " +
                          std::to_string(count) + (ip ? " in-place" : " out-of-place") + " root " +
                          std::to_string(root) + ": " + std::to_string(wrong) + " wrong elements");
          }
          ++seed;
          ++cases;
        }
      }
    }
  }
  return cases;
}

// The hot path: the same buffers call after call without waiting for the GPU (IPC mappings cached, or windows),
// fresh data every 50 calls. Returns the host time per call in microseconds.
double hotPath(void* a, void* b, cudaStream_t stream, const char* label) {
  const size_t count = 2048;
  double enqueueUs = 0;
  const int calls = 300;
  for (int i = 0; i < calls; ++i) {
    std::vector<Bytes> send =
        inputsFor(Coll::kAllReduce, count, concclFloat32, 0, 100000 + static_cast<uint64_t>(i / 50));
    if (i % 50 == 0)
      cudaOk(cudaMemcpyAsync(a, send[static_cast<size_t>(gRank)].data(), count * 4, cudaMemcpyHostToDevice, stream),
             "h2d");
    auto t0 = std::chrono::steady_clock::now();
    ok(concclAllGather(a, b, count / static_cast<size_t>(gNranks), concclFloat32, gComm, stream), "AllGather (hot)");
    enqueueUs += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i % 50 == 49) {
      Bytes got(count / static_cast<size_t>(gNranks) * static_cast<size_t>(gNranks) * 4);
      cudaOk(cudaMemcpyAsync(got.data(), b, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
      syncStream(stream);
      for (int p = 0; p < gNranks; ++p) {
        const size_t cb = count / static_cast<size_t>(gNranks) * 4;
        CHECK(std::memcmp(got.data() + static_cast<size_t>(p) * cb, send[static_cast<size_t>(p)].data(), cb) == 0,
              std::string(label) + " AllGather block " + std::to_string(p) + " wrong at call " + std::to_string(i));
      }
    }
  }
  syncStream(stream);
  const double us = enqueueUs / calls;
  std::fprintf(stderr, "rank %d: %s AllGather %zu B per rank: %.1f us host time per call (enqueue)\n", gRank, label,
               count / static_cast<size_t>(gNranks) * 4, us);
  return us;
}

// Replays `exec` `reps` times, each with fresh inputs (an AllGather's and an AllReduce's of `count` floats a rank,
// from seeds seed + 7 * rep and one more), and checks both results. The graph reads its inputs from agIn / arIn and
// leaves the results in agOut / arOut.
void replayAllGatherAllReduce(cudaGraphExec_t exec, cudaStream_t stream, size_t count, int reps, uint64_t seed,
                              void* agIn, void* arIn, void* agOut, void* arOut, const std::string& label) {
  const size_t inBytes = count * 4;
  const size_t outBytes = inBytes * static_cast<size_t>(gNranks);
  for (int rep = 0; rep < reps; ++rep) {
    const uint64_t s = seed + 7 * static_cast<uint64_t>(rep);
    std::vector<Bytes> ag = inputsFor(Coll::kAllGather, count, concclFloat32, 0, s);
    std::vector<Bytes> ar = inputsFor(Coll::kAllReduce, count, concclFloat32, 0, s + 1);
    const Bytes& agMine = ag[static_cast<size_t>(gRank)];
    const Bytes& arMine = ar[static_cast<size_t>(gRank)];
    cudaOk(cudaMemcpyAsync(agIn, agMine.data(), inBytes, cudaMemcpyHostToDevice, stream), "h2d");
    cudaOk(cudaMemcpyAsync(arIn, arMine.data(), inBytes, cudaMemcpyHostToDevice, stream), "h2d");
    cudaOk(cudaGraphLaunch(exec, stream), "graph launch");
    Bytes gotAg(outBytes), gotAr(inBytes);
    cudaOk(cudaMemcpyAsync(gotAg.data(), agOut, outBytes, cudaMemcpyDeviceToHost, stream), "d2h");
    cudaOk(cudaMemcpyAsync(gotAr.data(), arOut, inBytes, cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
    auto wantAg = t::reference(Coll::kAllGather, ag, count, concclFloat32, concclSum, 0);
    auto wantAr = t::reference(Coll::kAllReduce, ar, count, concclFloat32, concclSum, 0);
    CHECK(t::countWrong(gotAg, wantAg[static_cast<size_t>(gRank)], concclFloat32, false, gNranks) == 0,
          label + " " + std::to_string(rep) + ": AllGather wrong");
    CHECK(t::countWrong(gotAr, wantAr[static_cast<size_t>(gRank)], concclFloat32, true, gNranks) == 0,
          label + " " + std::to_string(rep) + ": AllReduce wrong");
  }
}

// A CUDA graph of AllGather + AllReduce captured once and replayed 20 times with fresh inputs. `window`: the four
// buffers are carved out of it (symmetric calls).
void graphReplays(cudaStream_t stream, char* window = nullptr) {
  const size_t gcount = 4096;
  const size_t inBytes = gcount * 4;
  const size_t outBytes = inBytes * static_cast<size_t>(gNranks);
  std::optional<DevBuf> own[4];
  char* bufs[4];
  const size_t sizes[4] = {inBytes, outBytes, inBytes, inBytes};
  size_t offset = 0;
  for (int i = 0; i < 4; ++i) {
    if (window != nullptr) {
      bufs[i] = window + offset;
      offset += (sizes[i] + 255) / 256 * 256;
    } else {
      own[i].emplace(sizes[i]);
      bufs[i] = own[i]->c();
    }
  }
  char *gin = bufs[0], *gout = bufs[1], *rin = bufs[2], *rout = bufs[3];
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // Global mode, as PyTorch captures (torch.cuda.graph): an unsafe CUDA call from any of conccl's threads meanwhile
  // invalidates the capture.
  cudaOk(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  ok(concclAllGather(gin, gout, gcount, concclFloat32, gComm, stream), "AllGather (capture)");
  ok(concclAllReduce(rin, rout, gcount, concclFloat32, concclSum, gComm, stream), "AllReduce (capture)");
  cudaOk(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaOk(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  replayAllGatherAllReduce(exec, stream, gcount, 20, 500000, gin, rin, gout, rout, "graph replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A CUDA graph whose buffers are allocated inside the capture (cudaMallocAsync while capturing: a graph's memory,
// mapped only when the graph runs, as PyTorch's cudaMallocAsync backend hands out under torch.cuda.graph), then an
// AllReduce and an AllGather of `count` floats on them, the results copied to ordinary buffers and the graph's buffers
// freed inside the capture. Replayed 5 times with fresh inputs, every result checked.
void graphMemoryReplays(cudaStream_t stream, size_t count) {
  const size_t inBytes = count * 4;
  const size_t outBytes = inBytes * static_cast<size_t>(gNranks);
  DevBuf arIn(inBytes), agIn(inBytes), arOut(inBytes), agOut(outBytes);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaOk(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaOk(cudaMallocAsync(&a, inBytes, stream), "cudaMallocAsync (capture)");
  cudaOk(cudaMallocAsync(&b, inBytes, stream), "cudaMallocAsync (capture)");
  cudaOk(cudaMemcpyAsync(a, arIn.p, inBytes, cudaMemcpyDeviceToDevice, stream), "d2d (capture)");
  cudaOk(cudaMemcpyAsync(b, agIn.p, inBytes, cudaMemcpyDeviceToDevice, stream), "d2d (capture)");
  ok(concclAllReduce(a, a, count, concclFloat32, concclSum, gComm, stream), "AllReduce on graph memory (capture)");
  // Allocated after a captured call: its lookup passes that call's nodes (stream memory operations among them).
  cudaOk(cudaMallocAsync(&c, outBytes, stream), "cudaMallocAsync (capture)");
  ok(concclAllGather(b, c, count, concclFloat32, gComm, stream), "AllGather on graph memory (capture)");
  cudaOk(cudaMemcpyAsync(arOut.p, a, inBytes, cudaMemcpyDeviceToDevice, stream), "d2d (capture)");
  cudaOk(cudaMemcpyAsync(agOut.p, c, outBytes, cudaMemcpyDeviceToDevice, stream), "d2d (capture)");
  for (void* p : {a, b, c}) cudaOk(cudaFreeAsync(p, stream), "cudaFreeAsync (capture)");
  cudaOk(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaOk(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  replayAllGatherAllReduce(exec, stream, count, 5, 610000, agIn.p, arIn.p, agOut.p, arOut.p, "graph memory replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

void scenarioCollectives(cudaStream_t stream) {
  uint64_t seed = 1;
  int cases = sweepCollectives(stream, seed);
  for (int i = 0; i < 4; ++i, ++seed, ++cases) {
    size_t wrong = runAllToAllv(seed, stream);
    CHECK(wrong == 0, "AllToAllv: " + std::to_string(wrong) + " wrong elements");
  }
  DevBuf a(2048 * 4), b(2048 * 4);
  hotPath(a.p, b.p, stream, "hot path");
  graphReplays(stream);
  graphMemoryReplays(stream, 4096);           // staged by size
  graphMemoryReplays(stream, size_t{3} << 20);  // 12 MiB a rank: above CONCCL_STAGED_MAX_BYTES
  std::fprintf(stderr, "rank %d: %d collective cases, 300 hot calls, 20 graph replays, 10 on graph memory OK\n", gRank,
               cases);
}

// "pair-owned": late calls on the pair-owned route (core/pair_claims.h; every call routed: CONCCL_STAGED_MAX_BYTES=0,
// no spin). Every collective x dtypes x counts x in/out of place x roots (reductions with sum, max, avg: the sweep),
// and AllToAllv, each rank entering each call after its own random delay (0-9 ms), so the ranks arrive in a new order
// every call and the pairs' owners change call after call; then a burst: the other ranks 100 ms late while rank 0 issues eight AllGathers
// back to back on distinct buffers (its stream holds eight "ready, wait for done" programs), every result checked.
void scenarioPairOwned(cudaStream_t stream) {
  uint64_t seed = 4242;
  auto delayFor = [](uint64_t s) {
    std::mt19937_64 rng(s * 7919 + static_cast<uint64_t>(gRank));
    return static_cast<int>(rng() % 4) * 3;
  };
  SweepOptions sweep;
  sweep.counts = {4099, 262144};
  sweep.delayMs = delayFor;
  sweep.label = "pair-owned ";
  int cases = sweepCollectives(stream, seed, sweep);
  for (int i = 0; i < 6; ++i, ++seed, ++cases) {
    const size_t wrong = runAllToAllv(seed, stream, delayFor(seed));
    CHECK(wrong == 0, "pair-owned AllToAllv: " + std::to_string(wrong) + " wrong elements");
  }
  // The burst.
  const size_t count = 65536;
  std::vector<std::unique_ptr<DevBuf>> ins, outs;  // not movable
  std::vector<std::vector<Bytes>> sent;
  for (int i = 0; i < 8; ++i) {
    sent.push_back(inputsFor(Coll::kAllGather, count, concclFloat32, 0, seed + static_cast<uint64_t>(i)));
    ins.push_back(std::make_unique<DevBuf>(count * 4));
    outs.push_back(std::make_unique<DevBuf>(count * 4 * static_cast<size_t>(gNranks)));
    cudaOk(cudaMemcpyAsync(ins.back()->p, sent.back()[static_cast<size_t>(gRank)].data(), count * 4,
                           cudaMemcpyHostToDevice, stream),
           "h2d");
  }
  syncStream(stream);
  if (gRank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < 8; ++i) {
    ok(concclAllGather(ins[static_cast<size_t>(i)]->p, outs[static_cast<size_t>(i)]->p, count, concclFloat32, gComm,
                       stream),
       "AllGather (burst)");
  }
  for (int i = 0; i < 8; ++i) {
    Bytes got(count * 4 * static_cast<size_t>(gNranks));
    cudaOk(cudaMemcpyAsync(got.data(), outs[static_cast<size_t>(i)]->p, got.size(), cudaMemcpyDeviceToHost, stream),
           "d2h");
    syncStream(stream);
    auto want = t::reference(Coll::kAllGather, sent[static_cast<size_t>(i)], count, concclFloat32, concclSum, 0);
    CHECK(t::countWrong(got, want[static_cast<size_t>(gRank)], concclFloat32, false, gNranks) == 0,
          "pair-owned burst: AllGather " + std::to_string(i) + " wrong");
  }
  std::fprintf(stderr, "rank %d: %d pair-owned cases and a burst of 8 OK\n", gRank, cases);
}

// A window per rank (concclMemAlloc + concclCommWindowRegister): every collective on buffers carved out of it at
// the same offsets (symmetric: no host rendezvous), interleaved with calls on buffers outside it (the regular
// path), the hot path and a graph on window buffers, then deregister and free; then three windows ended in a
// different order on each rank.
void scenarioSymmetric(cudaStream_t stream) {
  void* base = nullptr;
  ok(concclMemAlloc(&base, kWindowBytes), "concclMemAlloc");
  concclWindow_t win = nullptr;
  ok(concclCommWindowRegister(gComm, base, kWindowBytes, &win), "concclCommWindowRegister");
  char* window = static_cast<char*>(base);
  uint64_t seed = 7;
  SweepOptions sweep;
  sweep.window = window;
  sweep.label = "symmetric ";
  int cases = sweepCollectives(stream, seed, sweep);
  // The two paths alternate: the ring's bookkeeping must keep them in order.
  for (int i = 0; i < 6; ++i, ++seed, ++cases) {
    char* where = i % 2 == 0 ? window : nullptr;
    const Coll c = i % 3 == 0 ? Coll::kAllReduce : (i % 3 == 1 ? Coll::kAllGather : Coll::kReduceScatter);
    size_t wrong = runCase(c, concclFloat32, concclSum, 4099, false, 0, seed, stream, where);
    CHECK(wrong == 0, std::string("alternating paths, ") + collKindName(c) + ": " + std::to_string(wrong) + " wrong");
  }
  size_t wrong = runAllToAllv(seed++, stream);  // AllToAllv always takes the regular path
  CHECK(wrong == 0, "AllToAllv beside windows: " + std::to_string(wrong) + " wrong elements");
  DevBuf a(2048 * 4), b(2048 * 4);
  const double regularUs = hotPath(a.p, b.p, stream, "regular hot path");
  const double symmetricUs = hotPath(window, window + kWindowRecvOffset, stream, "symmetric hot path");
  graphReplays(stream, window);
  ok(concclCommWindowDeregister(gComm, win), "concclCommWindowDeregister");
  expectError(concclCommWindowDeregister(gComm, win), concclInvalidArgument, "deregister twice", "win was not");
  ok(concclMemFree(base), "concclMemFree");
  // Still usable after the window is gone.
  wrong = runCase(Coll::kAllReduce, concclFloat32, concclSum, 4099, true, 0, seed++, stream);
  CHECK(wrong == 0, "AllReduce after deregister: " + std::to_string(wrong) + " wrong");
  // Three windows ended in a different order on each rank (as PyTorch's deregister_mem_pool goes through a pool's
  // segments in address order, which differs between processes), each used by a symmetric call first.
  std::vector<void*> bases(3, nullptr);
  std::vector<concclWindow_t> wins(3, nullptr);
  for (size_t i = 0; i < 3; ++i) {
    ok(concclMemAlloc(&bases[i], kWindowBytes), "concclMemAlloc");
    ok(concclCommWindowRegister(gComm, bases[i], kWindowBytes, &wins[i]), "concclCommWindowRegister");
  }
  for (size_t i = 0; i < 3; ++i, ++seed) {
    wrong = runCase(Coll::kAllReduce, concclFloat32, concclSum, 4099, false, 0, seed, stream,
                    static_cast<char*>(bases[i]));
    CHECK(wrong == 0, "AllReduce in window " + std::to_string(i) + " of 3: " + std::to_string(wrong) + " wrong");
  }
  for (size_t k = 0; k < 3; ++k) {
    const size_t i = (k + static_cast<size_t>(gRank)) % 3;  // rank r ends window r % 3 first
    ok(concclCommWindowDeregister(gComm, wins[i]), "concclCommWindowDeregister (rank-dependent order)");
    ok(concclMemFree(bases[i]), "concclMemFree");
  }
  wrong = runCase(Coll::kAllGather, concclFloat32, concclSum, 4099, false, 0, seed++, stream);
  CHECK(wrong == 0, "AllGather after windows ended in different orders: " + std::to_string(wrong) + " wrong");
  std::fprintf(stderr,
               "rank %d: %d symmetric and alternating cases, hot path %.1f us (regular %.1f), 20 graph "
               "replays OK\n",
               gRank, cases, symmetricUs, regularUs);
}

// Nothing of the communicator may be visible in the file system or the socket table once it is initialised.
void checkNothingNamedLeft(const char* when) {
  const std::string shm = "/dev/shm/conccl-" + gTag;
  CHECK(access(shm.c_str(), F_OK) != 0, std::string(when) + ": " + shm + " still exists");
  FILE* f = std::fopen("/proc/net/unix", "r");
  if (f == nullptr) return;
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof(line), f) != nullptr)
    found = found || std::strstr(line, ("conccl-boot-" + gTag).c_str()) != nullptr;
  std::fclose(f);
  CHECK(!found, std::string(when) + ": the bootstrap socket is still open");
}

void checkNoMappingsLeft(const char* when) {
  CHECK(conccl::exec::ipcImportCount() == 0,
        std::string(when) + ": " + std::to_string(conccl::exec::ipcImportCount()) + " IPC mappings left");
}

void expectError(concclResult_t got, concclResult_t want, const char* what, const char* mustContain) {
  if (got != want) {
    throw Failure(std::string(what) + ": expected " + concclGetErrorString(want) + ", got " +
                  concclGetErrorString(got) + ": " + concclGetLastError(gComm));
  }
  if (mustContain != nullptr && std::strstr(concclGetLastError(gComm), mustContain) == nullptr) {
    throw Failure(std::string(what) + ": message lacks \"" + mustContain + "\": " + concclGetLastError(gComm));
  }
}

void scenarioErrors(cudaStream_t stream) {
  const size_t count = 1024;
  DevBuf a(count * 4 * static_cast<size_t>(gNranks)), b(count * 4 * static_cast<size_t>(gNranks));
  // Mismatched counts: rank 1 passes a different count; every rank must report the disagreement.
  size_t myCount = gRank == 1 ? count / 2 : count;
  expectError(concclAllReduce(a.p, b.p, myCount, concclFloat32, concclSum, gComm, stream), concclInvalidArgument,
              "mismatched counts", "disagree on the count");
  // A host pointer on the last rank: every rank fails, with the offender's message.
  std::vector<float> host(count);
  const void* send = gRank == gNranks - 1 ? static_cast<const void*>(host.data()) : a.p;
  expectError(concclAllReduce(send, b.p, count, concclFloat32, concclSum, gComm, stream), concclInvalidArgument,
              "host pointer", "host pointer");
  // A cudaMallocAsync buffer half the size its call needs on the last rank, above the staged size (a call that would
  // run on the bounce regions, whose copy in must not read past the buffer): every rank fails, with the offender's
  // message.
  {
    const size_t bigCount = (size_t{16} << 20) / 4;
    DevBuf in(bigCount * 4), out(bigCount * 4);
    void* half = nullptr;
    cudaOk(cudaMallocAsync(&half, bigCount * 2, stream), "cudaMallocAsync");
    const void* mine = gRank == gNranks - 1 ? half : in.p;
    expectError(concclAllReduce(mine, out.p, bigCount, concclFloat32, concclSum, gComm, stream), concclInvalidArgument,
                "pool buffer too small", "too small");
    cudaOk(cudaFreeAsync(half, stream), "cudaFreeAsync");
    cudaOk(cudaStreamSynchronize(stream), "sync");
  }
  // Still usable.
  size_t wrong = runCase(Coll::kAllReduce, concclFloat32, concclSum, count, false, 0, 42, stream);
  CHECK(wrong == 0, "AllReduce after errors: " + std::to_string(wrong) + " wrong");
  // Register / deregister, then a collective on the registered buffers.
  void* h1 = nullptr;
  void* h2 = nullptr;
  ok(concclCommRegister(gComm, a.p, count * 4, &h1), "register a");
  ok(concclCommRegister(gComm, b.p, count * 4, &h2), "register b");
  wrong = runCase(Coll::kAllGather, concclFloat32, concclSum, 256, false, 0, 43, stream);
  CHECK(wrong == 0, "AllGather after register");
  ok(concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, gComm, stream), "AllReduce on registered");
  syncStream(stream);
  ok(concclCommDeregister(gComm, h1), "deregister a");
  ok(concclCommDeregister(gComm, h2), "deregister b");
  expectError(concclCommDeregister(gComm, h1), concclInvalidArgument, "deregister twice", nullptr);
  // The peers drop the mappings at the next call; it must still work.
  wrong = runCase(Coll::kAllReduce, concclFloat32, concclSum, count, true, 0, 44, stream);
  CHECK(wrong == 0, "AllReduce after deregister");
  // concclMemAlloc'd buffers work too.
  void* m1 = nullptr;
  void* m2 = nullptr;
  ok(concclMemAlloc(&m1, count * 4), "concclMemAlloc");
  ok(concclMemAlloc(&m2, count * 4), "concclMemAlloc");
  std::vector<float> ones(count, 1.0f);
  cudaOk(cudaMemcpyAsync(m1, ones.data(), count * 4, cudaMemcpyHostToDevice, stream), "h2d");
  ok(concclAllReduce(m1, m2, count, concclFloat32, concclSum, gComm, stream), "AllReduce on concclMemAlloc");
  std::vector<float> out(count);
  cudaOk(cudaMemcpyAsync(out.data(), m2, count * 4, cudaMemcpyDeviceToHost, stream), "d2h");
  syncStream(stream);
  for (float v : out) CHECK(v == static_cast<float>(gNranks), "concclMemAlloc AllReduce value");
  ok(concclMemFree(m1), "concclMemFree");
  ok(concclMemFree(m2), "concclMemFree");
}

// Deterministic bytes for the message from `from` to `to` in round `round`.
Bytes messageBytes(int from, int to, int round, size_t bytes) {
  std::mt19937_64 rng(static_cast<uint64_t>(from) * 1000003u + static_cast<uint64_t>(to) * 7919u +
                      static_cast<uint64_t>(round) * 104729u + 17u);
  return t::randomData(bytes, concclUint8, rng);
}

// Size of the message from `from` to `to` in `round`: uneven, pair-dependent, 0 for some pairs.
size_t messageSize(int from, int to, int round) {
  return static_cast<size_t>((from * 5 + to * 3 + round * 7) % 9) * 1237;
}

// Send/Recv across processes: a ring exchange in a group 40 times (more than the 16 records a pair's ring holds),
// a personalised all-to-all of uneven sizes (self included) in one group, a pipeline of standalone calls, and a
// receive into a window. Every byte is checked.
void scenarioSendRecv(cudaStream_t stream) {
  const int n = gNranks;
  const int next = (gRank + 1) % n, prev = (gRank + n - 1) % n;
  DevBuf sbuf(1 << 20), rbuf(1 << 20);
  for (int round = 0; round < 40; ++round) {
    const size_t outBytes = 4096 + 8 * static_cast<size_t>(gRank);
    const size_t inBytes = 4096 + 8 * static_cast<size_t>(prev);
    Bytes out = messageBytes(gRank, next, round, outBytes);
    cudaOk(cudaMemcpyAsync(sbuf.p, out.data(), outBytes, cudaMemcpyHostToDevice, stream), "h2d");
    ok(concclGroupStart(), "GroupStart");
    ok(concclSend(sbuf.p, outBytes, concclUint8, next, gComm, stream), "Send (ring)");
    ok(concclRecv(rbuf.p, inBytes, concclUint8, prev, gComm, stream), "Recv (ring)");
    ok(concclGroupEnd(), "GroupEnd (ring)");
    Bytes got(inBytes);
    cudaOk(cudaMemcpyAsync(got.data(), rbuf.p, inBytes, cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
    CHECK(got == messageBytes(prev, gRank, round, inBytes), "ring round " + std::to_string(round) + " wrong");
  }

  // Personalised all-to-all: one group, every pair (self too), uneven sizes.
  for (int round = 0; round < 3; ++round) {
    std::vector<size_t> sendAt(static_cast<size_t>(n)), recvAt(static_cast<size_t>(n));
    size_t so = 0, ro = 0;
    for (int p = 0; p < n; ++p) {
      sendAt[static_cast<size_t>(p)] = so;
      recvAt[static_cast<size_t>(p)] = ro;
      so += messageSize(gRank, p, round) + 256;
      ro += messageSize(p, gRank, round) + 256;
    }
    CHECK(so <= (1u << 20) && ro <= (1u << 20), "all-to-all does not fit");
    for (int p = 0; p < n; ++p) {
      Bytes m = messageBytes(gRank, p, round + 100, messageSize(gRank, p, round));
      if (!m.empty())
        cudaOk(cudaMemcpyAsync(sbuf.c() + sendAt[static_cast<size_t>(p)], m.data(), m.size(), cudaMemcpyHostToDevice,
                               stream),
               "h2d");
    }
    ok(concclGroupStart(), "GroupStart");
    for (int p = 0; p < n; ++p) {
      ok(concclSend(sbuf.c() + sendAt[static_cast<size_t>(p)], messageSize(gRank, p, round), concclUint8, p, gComm,
                    stream),
         "Send (all-to-all)");
      ok(concclRecv(rbuf.c() + recvAt[static_cast<size_t>(p)], messageSize(p, gRank, round), concclUint8, p, gComm,
                    stream),
         "Recv (all-to-all)");
    }
    ok(concclGroupEnd(), "GroupEnd (all-to-all)");
    Bytes got(ro);
    cudaOk(cudaMemcpyAsync(got.data(), rbuf.p, ro, cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
    for (int p = 0; p < n; ++p) {
      const size_t sz = messageSize(p, gRank, round);
      Bytes want = messageBytes(p, gRank, round + 100, sz);
      CHECK(std::memcmp(got.data() + recvAt[static_cast<size_t>(p)], want.data(), sz) == 0,
            "all-to-all round " + std::to_string(round) + " from rank " + std::to_string(p) + " wrong");
    }
  }

  // A pipeline of standalone calls: rank 0 sends, each rank receives from prev and forwards to next; floats.
  {
    const size_t count = 10000;
    std::vector<float> seed(count);
    for (size_t i = 0; i < count; ++i) seed[i] = static_cast<float>(i % 101) * 0.5f;
    if (gRank == 0) {
      cudaOk(cudaMemcpyAsync(sbuf.p, seed.data(), count * 4, cudaMemcpyHostToDevice, stream), "h2d");
      ok(concclSend(sbuf.p, count, concclFloat32, next, gComm, stream), "Send (pipeline)");
      ok(concclRecv(rbuf.p, count, concclFloat32, prev, gComm, stream), "Recv (pipeline)");
    } else {
      ok(concclRecv(rbuf.p, count, concclFloat32, prev, gComm, stream), "Recv (pipeline)");
      ok(concclSend(rbuf.p, count, concclFloat32, next, gComm, stream), "Send (pipeline)");
    }
    std::vector<float> got(count);
    cudaOk(cudaMemcpyAsync(got.data(), rbuf.p, count * 4, cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
    CHECK(got == seed, "pipeline: data changed on its way round the ring");
  }

  // Receive into a window (the sender writes through the window mapping, no export).
  void* base = nullptr;
  ok(concclMemAlloc(&base, 1 << 20), "concclMemAlloc");
  concclWindow_t win = nullptr;
  ok(concclCommWindowRegister(gComm, base, 1 << 20, &win), "concclCommWindowRegister");
  {
    Bytes out = messageBytes(gRank, next, 999, 65536);
    cudaOk(cudaMemcpyAsync(sbuf.p, out.data(), out.size(), cudaMemcpyHostToDevice, stream), "h2d");
    char* in = static_cast<char*>(base) + 4096 * static_cast<size_t>(gRank);  // offsets differ: fine for p2p
    ok(concclGroupStart(), "GroupStart");
    ok(concclSend(sbuf.p, out.size(), concclUint8, next, gComm, stream), "Send (window)");
    ok(concclRecv(in, 65536, concclUint8, prev, gComm, stream), "Recv (window)");
    ok(concclGroupEnd(), "GroupEnd (window)");
    Bytes got(65536);
    cudaOk(cudaMemcpyAsync(got.data(), in, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
    CHECK(got == messageBytes(prev, gRank, 999, 65536), "receive into a window wrong");
  }
  ok(concclCommWindowDeregister(gComm, win), "concclCommWindowDeregister");
  ok(concclMemFree(base), "concclMemFree");
  // Collectives still line up after all that.
  size_t wrong = runCase(Coll::kAllReduce, concclFloat32, concclSum, 4099, false, 0, 77, stream);
  CHECK(wrong == 0, "AllReduce after Send/Recv: " + std::to_string(wrong) + " wrong");
  std::fprintf(stderr, "rank %d: Send/Recv ring x40, all-to-all x3, pipeline, window receive OK\n", gRank);
}

// Rank 0 sends 1000 bytes to rank 1, which expects 2000: both fail with the sizes in the message, the
// communicator goes out of service, and abort cleans up.
// "cross-node" / "cross-node-local": a communicator made through the C API across simulated hosts (CONCCL_HOSTID per
// process; test_gpu_multiprocess's CrossNode tests): it must span hosts ("cross-node": concclCallResources, which only a
// one-host communicator answers, is refused) or be on one host ("cross-node-local"). Then every collective x dtypes x
// counts x in/out of place, AllToAllv, a Send/Recv ring in a group and a CUDA graph, checked against the reference.
void scenarioCrossNode(cudaStream_t stream, bool expectAcrossHosts) {
  concclCallResources_t res{};
  const concclResult_t r = concclCallResources(gComm, concclCollAllReduce, 1024, concclFloat32, 0, &res);
  CHECK((r == concclNotSupported) == expectAcrossHosts,
        std::string("the communicator ") + (expectAcrossHosts ? "does not span" : "spans") + " hosts (" +
            concclGetErrorString(r) + ")");
  int count = 0;
  ok(concclCommCount(gComm, &count), "concclCommCount");
  CHECK(count == gNranks, "concclCommCount");
  uint64_t seed = 1;
  int cases = sweepCollectives(stream, seed);
  // AllReduce, Broadcast and Reduce decompose only when the ranks of a node divide the count (the sweep's counts are
  // not multiples of 3): 840 * 512 elements is a multiple of every node size up to 8.
  for (Coll c : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce}) {
    for (concclDataType_t dt : {concclFloat32, concclBfloat16}) {
      for (int ip = 0; ip < 2; ++ip, ++seed, ++cases) {
        const int root = static_cast<int>(seed % static_cast<uint64_t>(gNranks));
        const size_t wrong = runCase(c, dt, concclSum, 840 * 512, ip == 1, root, seed, stream);
        CHECK(wrong == 0, std::string(collKindName(c)) + " (count 430080): " + std::to_string(wrong) + " wrong elements");
      }
    }
  }
  for (int i = 0; i < 4; ++i, ++seed, ++cases) {
    size_t wrong = runAllToAllv(seed, stream);
    CHECK(wrong == 0, "AllToAllv: " + std::to_string(wrong) + " wrong elements");
  }
  const int n = gNranks, next = (gRank + 1) % n, prev = (gRank + n - 1) % n;
  DevBuf sbuf(1 << 16), rbuf(1 << 16);
  for (int round = 0; round < 5; ++round) {
    Bytes out = messageBytes(gRank, next, round, 1 << 16);
    cudaOk(cudaMemcpyAsync(sbuf.p, out.data(), out.size(), cudaMemcpyHostToDevice, stream), "h2d");
    ok(concclGroupStart(), "GroupStart");
    ok(concclSend(sbuf.p, out.size(), concclUint8, next, gComm, stream), "Send (ring)");
    ok(concclRecv(rbuf.p, out.size(), concclUint8, prev, gComm, stream), "Recv (ring)");
    ok(concclGroupEnd(), "GroupEnd (ring)");
    Bytes got(out.size());
    cudaOk(cudaMemcpyAsync(got.data(), rbuf.p, got.size(), cudaMemcpyDeviceToHost, stream), "d2h");
    syncStream(stream);
    CHECK(got == messageBytes(prev, gRank, round, 1 << 16), "ring round " + std::to_string(round) + " wrong");
  }
  graphReplays(stream);
  concclResult_t async = concclSuccess;
  ok(concclCommGetAsyncError(gComm, &async), "concclCommGetAsyncError");
  CHECK(async == concclSuccess, std::string("async error: ") + concclGetErrorString(async));
  std::fprintf(stderr, "rank %d: %s: %d collective cases, 5 ring rounds, 20 graph replays OK\n", gRank,
               expectAcrossHosts ? "across hosts" : "one host", cases);
}

// "cross-node-kill": after a good AllReduce across simulated hosts the last rank sleeps 300 ms and ends without
// destroying anything (a node that dies); every other rank must see concclCommGetAsyncError fail within 1 s of its
// end (the rendezvous root's liveness link), then abort at once.
void scenarioCrossNodeKill(cudaStream_t stream) {
  DevBuf a(1 << 20), b(1 << 20);
  cudaOk(cudaMemsetAsync(a.p, 0, 1 << 20, stream), "memset");
  ok(concclAllReduce(a.p, b.p, (1 << 20) / 4, concclFloat32, concclSum, gComm, stream), "AllReduce");
  syncStream(stream);
  const auto death = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  if (gRank == gNranks - 1) {
    std::this_thread::sleep_until(death);
    _exit(0);
  }
  concclResult_t async = concclSuccess;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (async == concclSuccess && std::chrono::steady_clock::now() < deadline) {
    ok(concclCommGetAsyncError(gComm, &async), "concclCommGetAsyncError");
    if (async == concclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - death).count();
  CHECK(async != concclSuccess, "the dead rank was never reported");
  std::fprintf(stderr, "rank %d: the dead rank reported after %.0f ms: %s\n", gRank, ms, concclGetLastError(gComm));
  CHECK(ms < 1000, "the dead rank was reported after " + std::to_string(ms) + " ms");
  const auto t0 = std::chrono::steady_clock::now();
  ok(concclCommAbort(gComm), "concclCommAbort");
  gComm = nullptr;
  const double abortMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(abortMs < 5000, "abort took " + std::to_string(abortMs) + " ms");
}

void scenarioSendRecvMismatch(cudaStream_t stream) {
  DevBuf buf(4096);
  concclResult_t r = concclSuccess;
  if (gRank == 0) r = concclSend(buf.p, 1000, concclUint8, 1, gComm, stream);
  if (gRank == 1) r = concclRecv(buf.p, 2000, concclUint8, 0, gComm, stream);
  if (gRank <= 1) expectError(r, concclInvalidArgument, "Send/Recv size mismatch", "same size");
  concclResult_t async = concclSuccess;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (async == concclSuccess && std::chrono::steady_clock::now() < deadline) {
    ok(concclCommGetAsyncError(gComm, &async), "concclCommGetAsyncError");
    if (async == concclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(async == concclInvalidArgument, std::string("async error ") + concclGetErrorString(async));
  syncStream(stream, 30);
  ok(concclCommAbort(gComm), "concclCommAbort");
  gComm = nullptr;
  checkNoMappingsLeft("after abort");
  checkNothingNamedLeft("after abort");
}

// A window per rank, one good symmetric call, then a failure the watchdog must turn into an error on every rank
// although the symmetric calls returned at once: the last rank's buffers sit at another offset (mismatch), or
// the last rank never makes the call (hung: sleeps; dead: exits). The streams must drain (the flags open), and
// abort must leave nothing behind.
void scenarioSymmetricFailure(const std::string& scenario, cudaStream_t stream, int timeoutMs) {
  using Clock = std::chrono::steady_clock;
  void* base = nullptr;
  ok(concclMemAlloc(&base, kWindowBytes), "concclMemAlloc");
  concclWindow_t win = nullptr;
  ok(concclCommWindowRegister(gComm, base, kWindowBytes, &win), "concclCommWindowRegister");
  char* window = static_cast<char*>(base);
  size_t wrong = runCase(Coll::kAllReduce, concclFloat32, concclSum, 4099, false, 0, 3, stream, window);
  CHECK(wrong == 0, "symmetric AllReduce before the failure: " + std::to_string(wrong) + " wrong");
  const size_t count = 1024;
  const bool last = gRank == gNranks - 1;
  concclResult_t expected = concclInvalidUsage;
  const char* mustContain = "symmetric";
  if (scenario == "symmetric-mismatch") {
    const size_t shift = last ? 4096 : 0;
    concclResult_t r = concclAllReduce(window + shift, window + kWindowRecvOffset + shift, count, concclFloat32,
                                       concclSum, gComm, stream);
    // The rank that comes last sees the mismatch before it launches; the others launched and learn it later.
    CHECK(r == concclSuccess || r == concclInvalidUsage,
          std::string("mismatched symmetric call returned ") + concclGetErrorString(r));
  } else {
    const bool dead = scenario == "symmetric-dead";
    expected = dead ? concclSystemError : concclTimeout;
    mustContain = dead ? "exited" : "have not called";
    if (last) {
      if (dead) _exit(0);  // vanish without destroy
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * timeoutMs));
      concclResult_t r =
          concclAllReduce(window, window + kWindowRecvOffset, count, concclFloat32, concclSum, gComm, stream);
      CHECK(r != concclSuccess, "the hung rank's late call succeeded although its peers gave up");
      ok(concclCommAbort(gComm), "concclCommAbort");
      gComm = nullptr;
      ok(concclMemFree(base), "concclMemFree");
      checkNoMappingsLeft("after abort");
      return;
    }
  }
  const auto t0 = Clock::now();
  if (scenario != "symmetric-mismatch") {
    concclResult_t r =
        concclAllReduce(window, window + kWindowRecvOffset, count, concclFloat32, concclSum, gComm, stream);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // A rank that calls after a peer's watchdog already found the failure is refused at once, with that failure (one
    // H200, 2026-12-04: rank 0 called after rank 1 had seen rank 2 exit); otherwise the call returns at once.
    const std::string message = r == concclSuccess ? std::string() : concclGetLastError(gComm);
    CHECK(r == concclSuccess || message.find(mustContain) != std::string::npos,
          std::string("symmetric call: ") + message);
    CHECK(ms < timeoutMs / 2.0, "the symmetric call waited " + std::to_string(ms) + " ms for its missing peer");
  }
  // The error arrives asynchronously (the watchdog), bounded.
  concclResult_t async = concclSuccess;
  const auto deadline = t0 + std::chrono::milliseconds(3 * timeoutMs + 5000);
  while (async == concclSuccess && Clock::now() < deadline) {
    ok(concclCommGetAsyncError(gComm, &async), "concclCommGetAsyncError");
    if (async == concclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  CHECK(async == expected,
        std::string("async error ") + concclGetErrorString(async) + ", expected " + concclGetErrorString(expected));
  if (expected == concclTimeout) {
    CHECK(ms >= timeoutMs * 0.9 && ms < timeoutMs * 3.0, "timeout reported after " + std::to_string(ms) + " ms");
  } else if (expected == concclSystemError) {
    CHECK(ms < timeoutMs, "the dead peer was noticed only after " + std::to_string(ms) + " ms");
  }
  // The next call says why, and the stream drains: the flags its symmetric work waits on were opened.
  expectError(concclAllReduce(window, window + kWindowRecvOffset, count, concclFloat32, concclSum, gComm, stream),
              concclInvalidUsage, "call after the failure", mustContain);
  syncStream(stream, 30);
  ok(concclCommAbort(gComm), "concclCommAbort");
  gComm = nullptr;
  ok(concclMemFree(base), "concclMemFree");
  checkNoMappingsLeft("after abort");
  checkNothingNamedLeft("after abort");
  std::fprintf(stderr, "rank %d: %s reported after %.0f ms\n", gRank, scenario.c_str(), ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s SCENARIO NRANKS RANK ID_HEX [TIMEOUT_MS]\n", argv[0]);
    return 2;
  }
  // A worker dies with the test that started it. A test binary killed by its time limit (scripts/gpu.sh's `timeout`)
  // otherwise leaves its workers running for up to their own limits, on the GPU the next test uses (most likely why
  // a 4-process test missed its time limit right after such a kill on 2026-12-01; it passed alone and in a clean run).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, printBacktraceAndDie);

  std::string scenario = argv[1];
  // Which path calls on ordinary buffers take is the scenario's choice, not the caller's environment: scenarios about
  // the host rendezvous itself (its synchronous errors, a peer missing from it, windows beside it) run unstaged.
  const bool unstaged = scenario == "collectives-unstaged" || scenario == "errors" || scenario == "dead-peer" ||
                        scenario == "hung-peer" || scenario.rfind("symmetric", 0) == 0;
  setenv("CONCCL_STAGED_MAX_BYTES", unstaged ? "0" : "8388608", 1);
  // Scenarios about the blocking form's synchronous errors (an error returned by the call itself on every rank, a
  // missing peer noticed inside the call) run with calls that wait on the host for their peers; the deferred kill /
  // abort / skew scenarios hand their calls to the proxy thread (CONCCL_DEFER_CALLS=1), which is what they are about;
  // all others run with the defaults: a call whose peers are late is staged and launched at once
  // (CONCCL_STAGE_LATE_CALLS=1, CONCCL_DEFER_CALLS=0).
  const bool blocking = scenario == "errors" || scenario == "sendrecv-mismatch" || scenario == "dead-peer" ||
                        scenario == "hung-peer" || scenario == "chunked-mismatch";
  const bool proxyScenario = scenario.rfind("deferred-", 0) == 0;
  setenv("CONCCL_DEFER_CALLS", proxyScenario ? "1" : "0", 1);
  setenv("CONCCL_STAGE_LATE_CALLS", blocking || unstaged || proxyScenario ? "0" : "1", 1);
  if (scenario == "collectives-unstaged") scenario = "collectives";
  if (scenario == "vmm-export" || scenario == "memory-return" || scenario == "memory-return-vmm" ||
      scenario == "address-reuse") {
    // VMM buffers exported (vmm_export.h), every call on the direct route: each rank maps its peers' buffers.
    setenv("CONCCL_VMM_EXPORT", "1", 1);
    setenv("CONCCL_STAGED_MAX_BYTES", "0", 1);
    setenv("CONCCL_STAGE_LATE_CALLS", "0", 1);
  }
  if (scenario == "pair-owned") {
    // Every call routed (none staged by size), and late as soon as a peer has not called yet.
    setenv("CONCCL_STAGED_MAX_BYTES", "0", 1);
    setenv("CONCCL_RENDEZVOUS_SPIN_US", "0", 1);
  }
  gNranks = std::atoi(argv[2]);
  gRank = std::atoi(argv[3]);
  const std::string hex = argv[4];
  const int timeoutMs = argc > 5 ? std::atoi(argv[5]) : 60000;
  concclUniqueId id{};
  if (hex.size() != 2 * sizeof(id.internal)) {
    std::fprintf(stderr, "ID_HEX must have %zu hex digits\n", 2 * sizeof(id.internal));
    return 2;
  }
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));

  try {
    int devices = 0;
    cudaOk(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    cudaOk(cudaSetDevice(gRank % devices), "cudaSetDevice");
    concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
    config.timeoutMs = timeoutMs;
    gTag = conccl::uniqueIdTag(conccl::parseUniqueId(id));
    ok(concclCommInitRankConfig(&gComm, gNranks, id, gRank, &config), "concclCommInitRank");
    // Rank 0 unlinks the segment's name before the last barrier of InitRank: gone on every rank by now. (The
    // sockets are checked after destroy: rank 0 may still be closing its side when a peer returns.)
    const std::string shm = "/dev/shm/conccl-" + gTag;
    CHECK(access(shm.c_str(), F_OK) != 0, "after init: " + shm + " still exists");
    cudaStream_t stream = nullptr;
    cudaOk(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

    if (scenario == "collectives") {
      scenarioCollectives(stream);
    } else if (scenario == "pair-owned") {
      scenarioPairOwned(stream);
    } else if (scenario == "errors") {
      scenarioErrors(stream);
    } else if (scenario == "sendrecv") {
      scenarioSendRecv(stream);
    } else if (scenario == "sendrecv-mismatch") {
      scenarioSendRecvMismatch(stream);
      cudaStreamDestroy(stream);
      return 0;
    } else if (scenario == "chunked") {
      conccl::mpworker::scenarioChunked(gComm, gRank, gNranks, stream);
    } else if (scenario == "chunked-mismatch") {
      conccl::mpworker::scenarioChunkedMismatch(gComm, gRank, gNranks, stream);
    } else if (scenario == "no-rendezvous") {
      conccl::mpworker::scenarioNoRendezvous(gComm, gRank, gNranks, stream);
    } else if (scenario == "staged-mismatch") {
      conccl::mpworker::scenarioStagedMismatch(gComm, gRank, gNranks, stream, timeoutMs);
      checkNoMappingsLeft("after abort");
      checkNothingNamedLeft("after abort");
      cudaStreamDestroy(stream);
      return 0;
    } else if (scenario == "deferred-skew" || scenario == "late-skew") {
      conccl::mpworker::scenarioDeferredSkew(gComm, gRank, gNranks, stream);
    } else if (scenario == "cross-order") {
      conccl::mpworker::scenarioCrossOrder(gComm, gRank, gNranks, stream);
    } else if (scenario == "memory-kinds") {
      using conccl::mpworker::BufKind;
      conccl::mpworker::scenarioMemoryKinds(gComm, gRank, gNranks, stream, {BufKind::kVmm, BufKind::kPool});
    } else if (scenario == "vmm-export") {
      conccl::mpworker::scenarioMemoryKinds(gComm, gRank, gNranks, stream, {conccl::mpworker::BufKind::kVmmShareable});
      // Moved directly: this rank mapped its peers' VMM buffers (a staged call maps none).
      CHECK(conccl::exec::vmmImportCount() > 0, "calls on shareable VMM memory mapped no peer's VMM buffer");
      conccl::mpworker::scenarioVmmRemap(gComm, gRank, gNranks, stream);
      conccl::mpworker::scenarioVmmRetiredUnderLatePeer(gComm, gRank, gNranks, stream);
    } else if (scenario == "memory-return" || scenario == "memory-return-vmm") {
      using conccl::mpworker::BufKind;
      conccl::mpworker::scenarioMemoryReturnWithoutCalls(
          gComm, gRank, gNranks, stream, scenario == "memory-return" ? BufKind::kMalloc : BufKind::kVmmShareable);
    } else if (scenario == "address-reuse") {
      conccl::mpworker::scenarioAddressReusedAtOnce(gComm, gRank, gNranks, stream);
    } else if (scenario == "deferred-kill" || scenario == "deferred-kill-gpu" || scenario == "deferred-abort" ||
               scenario == "graph-kill") {
      if (scenario == "deferred-abort") {
        conccl::mpworker::scenarioDeferredAbort(gComm, gRank, gNranks, stream);
      } else if (scenario == "graph-kill") {
        conccl::mpworker::scenarioGraphKill(gComm, gRank, gNranks, stream);
      } else {
        conccl::mpworker::scenarioDeferredKill(gComm, gRank, gNranks, stream, scenario == "deferred-kill-gpu");
      }
      checkNoMappingsLeft("after abort");
      checkNothingNamedLeft("after abort");
      cudaStreamDestroy(stream);
      return 0;
    } else if (scenario == "cross-node" || scenario == "cross-node-local") {
      scenarioCrossNode(stream, scenario == "cross-node");
    } else if (scenario == "cross-node-kill") {
      scenarioCrossNodeKill(stream);
      cudaStreamDestroy(stream);
      return 0;
    } else if (scenario == "symmetric") {
      scenarioSymmetric(stream);
    } else if (scenario.rfind("symmetric-", 0) == 0) {
      scenarioSymmetricFailure(scenario, stream, timeoutMs);
      cudaStreamDestroy(stream);
      return 0;
    } else if (scenario == "gpu-stall") {
      // Issue 13, item 2: the last rank's stream is stalled by work queued before the call (a host function
      // that waits for a flag of this process). Every call returns; within about timeoutMs the GPU watchdog turns
      // the stalled GPU work into concclTimeout on every rank (through the shared error word), naming the call.
      const size_t count = size_t{1} << 20;  // 4 MiB: copy engines
      DevBuf a(count * 4), b(count * 4);
      ok(concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, gComm, stream), "AllReduce before");
      syncStream(stream);
      static std::atomic<int> release{0};
      const bool staller = gRank == gNranks - 1;
      if (staller) {
        cudaOk(cudaLaunchHostFunc(
                   stream,
                   [](void*) {
                     const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
                     while (release.load() == 0 && std::chrono::steady_clock::now() < until) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(1));
                     }
                   },
                   nullptr),
               "cudaLaunchHostFunc");
      }
      ok(concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, gComm, stream), "AllReduce (stalled)");
      const auto t0 = std::chrono::steady_clock::now();
      concclResult_t async = concclSuccess;
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(3 * timeoutMs + 5000)) {
        ok(concclCommGetAsyncError(gComm, &async), "GetAsyncError");
        if (async != concclSuccess) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      CHECK(async == concclTimeout, std::string("async error ") + concclGetErrorString(async) + " after " +
                                        std::to_string(ms) + " ms, expected concclTimeout");
      CHECK(ms >= timeoutMs * 0.8 && ms < timeoutMs + 5000.0, "timeout after " + std::to_string(ms) + " ms");
      concclResult_t r = concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, gComm, stream);
      CHECK(r != concclSuccess, "a call after the GPU timeout succeeded");
      const std::string message = concclGetLastError(gComm);
      CHECK(message.find("did not complete within") != std::string::npos && message.find("concclAllReduce") != std::string::npos,
            "message does not name the call: " + message);
      if (staller) release = 1;  // the application ends its stall; the rank's waits were re-opened meanwhile
      syncStream(stream, 10);      // drains: the peer never reached the call, but the failure opened every flag
      // The staller's stream, released just now, still copies into this rank's buffers: give it time before this
      // process frees them (there is no other channel between the workers than the communicator, now failed).
      if (!staller) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      ok(concclCommAbort(gComm), "concclCommAbort");
      gComm = nullptr;
      cudaStreamDestroy(stream);
      std::fprintf(stderr, "rank %d: gpu-stall reported after %.0f ms: %s\n", gRank, ms, message.c_str());
      return 0;
    } else if (scenario == "dead-peer" || scenario == "hung-peer") {
      const bool dead = scenario == "dead-peer";
      const size_t count = 1024;
      DevBuf a(count * 4), b(count * 4);
      // One good call first: the peers' mappings and flags are in use when the rank disappears.
      ok(concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, gComm, stream), "AllReduce before");
      syncStream(stream);
      if (gRank == gNranks - 1) {
        if (dead) _exit(0);  // vanish without destroy: no clean-up of ours may be needed by the others
        std::this_thread::sleep_for(std::chrono::milliseconds(3 * timeoutMs));
      }
      auto t0 = std::chrono::steady_clock::now();
      concclResult_t r = concclAllReduce(a.p, b.p, count, concclFloat32, concclSum, gComm, stream);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (gRank == gNranks - 1) {
        // The sleeper: its peers gave up and aborted; it must learn that, not hang.
        CHECK(r != concclSuccess, "the hung rank's late call succeeded although its peers aborted");
      } else if (dead) {
        expectError(r, concclSystemError, "dead peer", "exited");
        CHECK(ms < timeoutMs, "a dead peer was detected only after " + std::to_string(ms) + " ms");
      } else {
        expectError(r, concclTimeout, "hung peer", "waited");
        CHECK(ms >= timeoutMs * 0.9 && ms < timeoutMs * 3.0, "timeout after " + std::to_string(ms) + " ms");
      }
      concclResult_t async = concclSuccess;
      ok(concclCommGetAsyncError(gComm, &async), "GetAsyncError");
      CHECK(async != concclSuccess, "the async error is not reported");
      ok(concclCommAbort(gComm), "concclCommAbort");
      gComm = nullptr;
      checkNoMappingsLeft("after abort");
      checkNothingNamedLeft("after abort");
      cudaStreamDestroy(stream);
      std::fprintf(stderr, "rank %d: %s handled in %.0f ms\n", gRank, scenario.c_str(), ms);
      return 0;
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
    syncStream(stream);
    ok(concclCommDestroy(gComm), "concclCommDestroy");
    gComm = nullptr;
    checkNoMappingsLeft("after destroy");
    checkNothingNamedLeft("after destroy");
    cudaStreamDestroy(stream);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d FAILED: %s\n", gRank, e.what());
    if (gComm != nullptr) concclCommAbort(gComm);
    return 1;
  }
}
