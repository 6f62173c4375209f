// The parts of conccl-kernel-bench (one file each): the reduction kernel, the read probe, per-call latency.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "check_cuda.h"

namespace conccl::kbench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median time of `runs` launches on `stream` after one warm-up, with CUDA events.
template <typename Launch>
double timeMs(cudaStream_t stream, int runs, Launch&& launch) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  launch();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    launch();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(ms);
}

// The library's reduction kernel (exec::launchReduce) for fp32/bf16/fp16 at fan-in 2..8 on 1/4/8 CTAs, and the
// fixed-fan-in kernel's shape variants beside the chosen one. `inputMiB` per input.
void runReduceBench(size_t inputMiB, int runs);
// What one SM reads, by how the loads are issued (read_probe.cu).
void runReadProbe(int runs);
// What one SM writes, by how the stores are issued (write_probe.cu).
void runWriteProbe(int runs);
// Reductions reading a peer GPU's memory, and a reduction beside a peer copy (peer_probe.cu; needs 2 GPUs).
void runPeerProbe(int runs);
// A fan-in-2 reduction through the TMA (bulk loads into shared memory, bulk reductions into the output that already
// holds the other input), and its parts alone (tma_reduce_probe.cu). False when its result check failed.
bool runTmaReduceProbe(int runs);
// One handshake (stream write + stream wait) with the flags in host memory and in device memory (flag_probe.cu).
void runFlagProbe(int runs);
// Per-call latency and host enqueue cost of the collectives through the public API (latency_bench.cu).
void runLatencyBench(int nranks, int iters, int lanes, size_t maxBytes);

}  // namespace conccl::kbench
