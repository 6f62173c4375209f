// conccl-ce-probe: do peer copies between GPUs run on copy engines? (issue: measure across GPUs, item 1)
//
// A copy engine needs no SM, so a peer copy issued while a kernel holds every SM of both GPUs should run at
// its isolated bandwidth. A copy that needs SMs (as every same-device copy does, FACTS.md item 1) waits for
// the kernel instead. The probe times, with CUDA events:
//   1. the copy alone (GPU a -> GPU b, cudaMemcpyPeerAsync on a's stream);
//   2. the copy issued right after a "hog" kernel that occupies every SM of both GPUs for --hog-ms;
//   3. the same two for a same-device copy on GPU a (the SM-copy contrast).
// Verdict: copy engine when the copy under the hog finishes well before the hog ends.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "check_cuda.h"

// Spins each CTA for `cycles` SM clock cycles: with enough CTAs every SM is busy for that long.
__global__ void hogKernel(long long cycles, int* sink) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;
}

struct Timing {
  float copyMs;    // copy start (recorded before the hog on the copy's stream) to copy end
  float hogMs;     // hog start to hog end
};

// Launches the hog on every device in `hogDevices` (if any), then the copy on `copyStream`; times both from
// a common event recorded before anything.
Timing run(void* dst, int dstDev, const void* src, int srcDev, size_t bytes, cudaStream_t copyStream, int copyDev,
           const std::vector<int>& hogDevices, const std::vector<cudaStream_t>& hogStreams, long long cycles,
           int* sink) {
  cudaEvent_t t0, copyEnd, hogEnd;
  CHECK_CUDA(cudaSetDevice(copyDev));
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&copyEnd));
  CHECK_CUDA(cudaEventCreate(&hogEnd));
  CHECK_CUDA(cudaEventRecord(t0, copyStream));
  for (size_t i = 0; i < hogDevices.size(); ++i) {
    CHECK_CUDA(cudaSetDevice(hogDevices[i]));
    CHECK_CUDA(cudaStreamWaitEvent(hogStreams[i], t0, 0));
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, hogDevices[i]));
    // 8 CTAs x 256 threads per SM = 2048 threads: every SM is full, so no SM is left for an SM-driven copy.
    hogKernel<<<prop.multiProcessorCount * 8, 256, 0, hogStreams[i]>>>(cycles, sink);
    CHECK_CUDA(cudaGetLastError());
  }
  CHECK_CUDA(cudaSetDevice(copyDev));
  if (!hogDevices.empty()) CHECK_CUDA(cudaEventRecord(hogEnd, hogStreams[0]));
  if (srcDev == dstDev) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, copyStream));
  } else {
    CHECK_CUDA(cudaMemcpyPeerAsync(dst, dstDev, src, srcDev, bytes, copyStream));
  }
  CHECK_CUDA(cudaEventRecord(copyEnd, copyStream));
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int d : hogDevices) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  CHECK_CUDA(cudaSetDevice(copyDev));
  Timing t{};
  CHECK_CUDA(cudaEventElapsedTime(&t.copyMs, t0, copyEnd));
  if (!hogDevices.empty()) CHECK_CUDA(cudaEventElapsedTime(&t.hogMs, t0, hogEnd));
  cudaEventDestroy(t0);
  cudaEventDestroy(copyEnd);
  cudaEventDestroy(hogEnd);
  return t;
}

int main(int argc, char** argv) {
  size_t bytes = size_t{1} << 30;
  double hogMs = 200;
  if (argc > 1) bytes = std::strtoull(argv[1], nullptr, 0);
  if (argc > 2) hogMs = std::atof(argv[2]);
  int n = 0;
  CHECK_CUDA(cudaGetDeviceCount(&n));
  std::printf("# conccl-ce-probe: %d GPU(s), copy %zu bytes, hog kernel %.0f ms on every SM\n", n, bytes, hogMs);
  if (n < 1) return 2;
  const int a = 0, b = n > 1 ? 1 : 0;
  int clockKHz = 0;  // cudaDeviceProp::clockRate is gone in CUDA 13; the attribute remains
  CHECK_CUDA(cudaDeviceGetAttribute(&clockKHz, cudaDevAttrClockRate, a));
  long long cycles = static_cast<long long>(hogMs * 1e-3 * clockKHz * 1e3);
  if (n > 1) {
    int can = 0;
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can, a, b));
    if (can) {
      CHECK_CUDA(cudaSetDevice(a));
      cudaDeviceEnablePeerAccess(b, 0);
      CHECK_CUDA(cudaSetDevice(b));
      cudaDeviceEnablePeerAccess(a, 0);
      cudaGetLastError();
    }
    std::printf("# peer access %d -> %d: %s\n", a, b, can ? "yes" : "no");
  }
  void *srcA, *dstA, *dstB;
  int *sinkA, *sinkB;
  cudaStream_t sA, hogA, hogB;
  CHECK_CUDA(cudaSetDevice(a));
  CHECK_CUDA(cudaMalloc(&srcA, bytes));
  CHECK_CUDA(cudaMalloc(&dstA, bytes));
  CHECK_CUDA(cudaMemset(srcA, 1, bytes));
  CHECK_CUDA(cudaMalloc(&sinkA, sizeof(int)));
  CHECK_CUDA(cudaStreamCreateWithFlags(&sA, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&hogA, cudaStreamNonBlocking));
  CHECK_CUDA(cudaSetDevice(b));
  CHECK_CUDA(cudaMalloc(&dstB, bytes));
  CHECK_CUDA(cudaMalloc(&sinkB, sizeof(int)));
  CHECK_CUDA(cudaStreamCreateWithFlags(&hogB, cudaStreamNonBlocking));
  CHECK_CUDA(cudaSetDevice(a));

  auto median = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto measure = [&](const char* what, void* dst, int dstDev, bool hog) {
    std::vector<int> devs;
    std::vector<cudaStream_t> streams;
    if (hog) {
      devs.push_back(a);
      streams.push_back(hogA);
      if (b != a) {
        devs.push_back(b);
        streams.push_back(hogB);
      }
    }
    std::vector<float> copy, h;
    run(dst, dstDev, srcA, a, bytes, sA, a, devs, streams, cycles, sinkA);  // warm-up
    for (int i = 0; i < 5; ++i) {
      Timing t = run(dst, dstDev, srcA, a, bytes, sA, a, devs, streams, cycles, sinkA);
      copy.push_back(t.copyMs);
      h.push_back(t.hogMs);
    }
    float c = median(copy), hm = median(h);
    std::printf("%-28s copy %8.3f ms  %7.1f GB/s", what, c, bytes / (c * 1e-3) / 1e9);
    if (hog) std::printf("   hog %8.3f ms", hm);
    std::printf("\n");
    return std::pair<float, float>{c, hm};
  };

  auto sameAlone = measure("same-device alone", dstA, a, false);
  auto sameHog = measure("same-device beside hog", dstA, a, true);
  std::printf("verdict same-device: %s\n",
              sameHog.first > 0.9 * sameHog.second ? "waits for the hog (SM copy)" : "ran beside the hog (copy engine)");
  if (n > 1) {
    auto peerAlone = measure("peer 0->1 alone", dstB, b, false);
    auto peerHog = measure("peer 0->1 beside hog", dstB, b, true);
    bool ce = peerHog.first < 0.5 * peerHog.second && peerHog.first < 1.5 * peerAlone.first;
    std::printf("verdict peer: %s (copy %.3f ms alone, %.3f ms beside a %.1f ms all-SM kernel on both GPUs)\n",
                ce ? "COPY ENGINE: not slowed by a kernel holding every SM" : "NOT a copy-engine copy",
                peerAlone.first, peerHog.first, peerHog.second);
  } else {
    std::printf("verdict peer: not measured (one GPU)\n");
  }
  return 0;
}
