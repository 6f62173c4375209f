// conccl-kernel-bench
//
//  1. The reduction kernel alone: sum of 8 inputs of 256 MiB (bf16 and fp32) on 1/2/4/8/132 CTAs, timed with
//     CUDA events, median of several runs; prints GB/s of input read in total and per SM.
//  2. Per-call latency of the collectives through the public API, 8 B .. 1 MiB, on -g ranks (distinct GPUs when
//     the machine has them, else device 0 repeated), and the host enqueue cost per call per rank.
//
// Output: a human-readable table on stdout plus one JSON object per line prefixed "#json " for scripts.
#include <conccl/conccl.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check_cuda.h"
#include "exec/cuda/reduce_kernel.h"

namespace {

#define CHECK_CONCCL(call)                                                                                       \
  do {                                                                                                           \
    concclResult_t r_ = (call);                                                                                  \
    if (r_ != concclSuccess) {                                                                                   \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, concclGetErrorString(r_), concclGetLastError(nullptr)); \
      std::exit(1);                                                                                              \
    }                                                                                                            \
  } while (0)

// Non-zero pseudo-random values in [-1, 1) (timing zeros can flatter a kernel).
template <typename T>
__global__ void fillKernel(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const float f = (static_cast<float>(x & 0xffffff) / 16777216.0f) * 2.0f - 1.0f + 1e-3f;
    if constexpr (sizeof(T) == 2) {
      p[i] = __float2bfloat16_rn(f);
    } else {
      p[i] = f;
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void benchReduce(size_t inputBytes, int k, int runs) {
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("# reduction kernel: sum of %d inputs x %zu MiB, %d threads/CTA, device %d (%s, %d SMs), median of %d\n",
              k, inputBytes >> 20, conccl::exec::kReduceThreads, device, prop.name, sms, runs);
  std::printf("%-6s %6s %12s %14s %14s\n", "dtype", "CTAs", "time_ms", "read_GB/s", "read_GB/s/SM");
  std::vector<void*> inputs(static_cast<size_t>(k));
  for (auto& p : inputs) CHECK_CUDA(cudaMalloc(&p, inputBytes));
  void* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, inputBytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (concclDataType_t dtype : {concclBfloat16, concclFloat32}) {
    const size_t es = dtype == concclBfloat16 ? 2 : 4;
    const size_t count = inputBytes / es;
    for (int j = 0; j < k; ++j) {
      if (es == 2) {
        fillKernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(inputs[j]), count, 17u * j + 1);
      } else {
        fillKernel<<<1024, 256, 0, stream>>>(static_cast<float*>(inputs[j]), count, 17u * j + 1);
      }
    }
    CHECK_CUDA(cudaGetLastError());
    conccl::exec::ReduceArgs args;
    args.k = k;
    args.count = count;
    args.output = out;
    for (int j = 0; j < k; ++j) args.inputs[j] = inputs[j];
    for (int ctas : {1, 2, 4, 8, sms}) {
      conccl::exec::launchReduce(args, dtype, concclSum, ctas, stream);  // warm-up
      std::vector<double> ms;
      for (int r = 0; r < runs; ++r) {
        CHECK_CUDA(cudaEventRecord(start, stream));
        conccl::exec::launchReduce(args, dtype, concclSum, ctas, stream);
        CHECK_CUDA(cudaEventRecord(stop, stream));
        CHECK_CUDA(cudaEventSynchronize(stop));
        float t = 0;
        CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
      }
      const double t = median(ms);
      const double gbs = static_cast<double>(k) * static_cast<double>(inputBytes) / (t * 1e-3) / 1e9;
      const char* name = dtype == concclBfloat16 ? "bf16" : "fp32";
      std::printf("%-6s %6d %12.3f %14.1f %14.1f\n", name, ctas, t, gbs, gbs / ctas);
      std::printf(
          "#json {\"bench\":\"reduce\",\"dtype\":\"%s\",\"inputs\":%d,\"input_bytes\":%zu,\"ctas\":%d,"
          "\"time_ms\":%.4f,\"read_gbps\":%.2f,\"read_gbps_per_sm\":%.2f}\n",
          name, k, inputBytes, ctas, t, gbs, gbs / ctas);
    }
  }
  for (auto p : inputs) cudaFree(p);
  cudaFree(out);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast };
const char* collName(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "allreduce";
    case Coll::kAllGather:
      return "allgather";
    case Coll::kReduceScatter:
      return "reducescatter";
    case Coll::kAllToAll:
      return "alltoall";
    case Coll::kBroadcast:
      return "broadcast";
  }
  return "?";
}

void benchLatency(int nranks, int iters, int lanes, size_t maxBytes) {
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

      std::printf("%-14s %10zu %14.1f %18.1f %14.1f\n", collName(coll), bytes, perCall, enqueuePerRank, graphPerCall);
      std::printf(
          "#json {\"bench\":\"latency\",\"coll\":\"%s\",\"ranks\":%d,\"distinct_gpus\":%s,\"bytes\":%zu,"
          "\"time_us\":%.2f,\"enqueue_us_per_rank\":%.2f,\"graph_time_us\":%.2f}\n",
          collName(coll), nranks, distinct ? "true" : "false", bytes, perCall, enqueuePerRank, graphPerCall);
    }
  }
  for (auto c : comms) concclCommDestroy(c);
  for (int r = 0; r < nranks; ++r) {
    cudaFree(send[r]);
    cudaFree(recv[r]);
    cudaStreamDestroy(streams[r]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conccl-kernel-bench: reduction kernel GB/s per SM, and per-call latency of the collectives"};
  int ranks = 2, iters = 200, runs = 7, inputs = 8, lanes = 0;
  size_t inputMiB = 256, maxBytes = size_t{1} << 20;
  bool skipReduce = false, skipLatency = false;
  app.add_option("-g,--ranks", ranks, "ranks for the latency sweep (distinct GPUs if available, else GPU 0 repeated)");
  app.add_option("-n,--iters", iters, "calls per size in the latency sweep");
  app.add_option("--runs", runs, "timed runs per kernel configuration (median reported)");
  app.add_option("--inputs", inputs, "inputs of the benchmarked reduction");
  app.add_option("--input-mib", inputMiB, "MiB per reduction input");
  app.add_option("--lanes", lanes, "copy lanes per rank (0: the library's default)");
  app.add_option("-e,--max-bytes", maxBytes, "largest message of the latency sweep");
  app.add_flag("--no-reduce", skipReduce, "skip the kernel benchmark");
  app.add_flag("--no-latency", skipLatency, "skip the latency sweep");
  CLI11_PARSE(app, argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "conccl-kernel-bench: no CUDA device\n");
    return 2;
  }
  try {
    if (!skipReduce) benchReduce(inputMiB << 20, inputs, runs);
    if (!skipLatency) benchLatency(ranks, iters, lanes, maxBytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conccl-kernel-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
