// conccl-kernel-bench, part 3: per-call latency of the collectives through the public API, 8 B .. -e bytes, on -g
// ranks (distinct GPUs when the machine has them, else device 0 repeated), the host enqueue cost per call per
// rank, and the same call replayed from a CUDA graph.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check_cuda.h"
#include "kernel_bench.h"
#include "sched/schedule.h"

namespace conccl::kbench {
namespace {

#define CHECK_CONCCL(call)                                                                                       \
  do {                                                                                                           \
    concclResult_t r_ = (call);                                                                                  \
    if (r_ != concclSuccess) {                                                                                   \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, concclGetErrorString(r_), concclGetLastError(nullptr)); \
      std::exit(1);                                                                                              \
    }                                                                                                            \
  } while (0)

using Coll = sched::CollKind;  // the schedule layer's names

}  // namespace

void runLatencyBench(int nranks, int iters, int lanes, size_t maxBytes) {
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  std::vector<int> devlist(static_cast<size_t>(nranks));
  const bool distinct = devices >= nranks;
  for (int r = 0; r < nranks; ++r) devlist[r] = distinct ? r : 0;
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendCuda;
  if (lanes > 0) config.lanes = lanes;
  std::vector<concclComm_t> comms(static_cast<size_t>(nranks));
  CHECK_CONCCL(concclCommInitAll(comms.data(), nranks, devlist.data(), &config));
  std::vector<cudaStream_t> streams(static_cast<size_t>(nranks));
  std::vector<void*> send(static_cast<size_t>(nranks)), recv(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    CHECK_CUDA(cudaSetDevice(devlist[r]));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&send[r], maxBytes * nranks));
    CHECK_CUDA(cudaMalloc(&recv[r], maxBytes * nranks));
    CHECK_CUDA(cudaMemset(send[r], 0x3c, maxBytes * nranks));  // 0x3c3c: bf16/fp32 values near 1, not zero
  }
  CHECK_CUDA(cudaSetDevice(devlist[0]));
  std::printf("\n# per-call latency through the public API: %d ranks on %s, lanes %s, %d calls per size, float32\n",
              nranks, distinct ? "distinct GPUs" : "device 0 repeated",
              lanes > 0 ? std::to_string(lanes).c_str() : "default", iters);
  if (!distinct && nranks > 1) {
    std::printf(
        "# NOTE: several ranks share one GPU, so CUDA runs these device-to-device copies on SMs, not on copy\n"
        "#       engines: these are correctness-path latencies, not copy-engine results.\n");
  }
  std::printf("%-14s %10s %14s %18s %14s\n", "collective", "bytes", "time/call_us", "enqueue/call/rank_us",
              "graph/call_us");
  auto syncAll = [&] {
    for (auto s : streams) CHECK_CUDA(cudaStreamSynchronize(s));
  };
  for (Coll coll : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kAllToAll, Coll::kBroadcast}) {
    std::vector<size_t> sizes;
    for (size_t b = 8; b < maxBytes; b *= 4) sizes.push_back(b);
    sizes.push_back(maxBytes);
    for (size_t bytes : sizes) {
      const size_t count = bytes / 4;
      auto enqueue = [&] {
        CHECK_CONCCL(concclGroupStart());
        for (int r = 0; r < nranks; ++r) {
          switch (coll) {
            case Coll::kAllReduce:
              CHECK_CONCCL(concclAllReduce(send[r], recv[r], count, concclFloat32, concclSum, comms[r], streams[r]));
              break;
            case Coll::kAllGather:
              CHECK_CONCCL(concclAllGather(send[r], recv[r], count, concclFloat32, comms[r], streams[r]));
              break;
            case Coll::kReduceScatter:
              CHECK_CONCCL(
                  concclReduceScatter(send[r], recv[r], count, concclFloat32, concclSum, comms[r], streams[r]));
              break;
            case Coll::kAllToAll:
              CHECK_CONCCL(concclAllToAll(send[r], recv[r], count, concclFloat32, comms[r], streams[r]));
              break;
            case Coll::kBroadcast:
              CHECK_CONCCL(concclBroadcast(send[r], recv[r], count, concclFloat32, 0, comms[r], streams[r]));
              break;
            default:
              break;  // not in the loop above
          }
        }
        CHECK_CONCCL(concclGroupEnd());
      };
      for (int w = 0; w < 5; ++w) enqueue();
      syncAll();
      double enqueueSeconds = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        const auto e0 = std::chrono::steady_clock::now();
        enqueue();
        enqueueSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
      }
      syncAll();
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double perCall = wall / iters * 1e6;
      const double enqueuePerRank = enqueueSeconds / iters / nranks * 1e6;

      // The same call captured once per rank into a graph, replayed iters times.
      std::vector<cudaGraphExec_t> execs(static_cast<size_t>(nranks));
      for (int r = 0; r < nranks; ++r) CHECK_CUDA(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
      enqueue();
      // End every capture before instantiating: instantiation is not allowed while this thread still
      // captures (ThreadLocal mode).
      std::vector<cudaGraph_t> graphs(static_cast<size_t>(nranks));
      for (int r = 0; r < nranks; ++r) CHECK_CUDA(cudaStreamEndCapture(streams[r], &graphs[r]));
      for (int r = 0; r < nranks; ++r) {
        CHECK_CUDA(cudaGraphInstantiate(&execs[r], graphs[r], 0));
        cudaGraphDestroy(graphs[r]);
      }
      for (int r = 0; r < nranks; ++r) CHECK_CUDA(cudaGraphLaunch(execs[r], streams[r]));  // warm-up
      syncAll();
      const auto g0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        for (int r = 0; r < nranks; ++r) CHECK_CUDA(cudaGraphLaunch(execs[r], streams[r]));
      }
      syncAll();
      const double graphPerCall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count() / iters * 1e6;
      for (auto e : execs) cudaGraphExecDestroy(e);

      const char* name = sched::collKindName(coll);
      std::printf("%-14s %10zu %14.1f %18.1f %14.1f\n", name, bytes, perCall, enqueuePerRank, graphPerCall);
      std::printf(
          "#json {\"bench\":\"latency\",\"coll\":\"%s\",\"ranks\":%d,\"distinct_gpus\":%s,\"bytes\":%zu,"
          "\"time_us\":%.2f,\"enqueue_us_per_rank\":%.2f,\"graph_time_us\":%.2f}\n",
          name, nranks, distinct ? "true" : "false", bytes, perCall, enqueuePerRank, graphPerCall);
    }
  }
  for (auto c : comms) concclCommDestroy(c);
  for (int r = 0; r < nranks; ++r) {
    cudaFree(send[r]);
    cudaFree(recv[r]);
    cudaStreamDestroy(streams[r]);
  }
}


}  // namespace conccl::kbench
