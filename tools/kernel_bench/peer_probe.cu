// conccl-kernel-bench --peer-probe (needs 2 GPUs with peer access): questions behind the 2-GPU reduction design.
//   1. A fan-in-2 reduction on GPU 0 whose second input lies on GPU 1 (read over NVLink by the SMs): GB/s per SM
//      by CTAs and loads in flight, beside the same reduction with both inputs local.
//   2. The local reduction (k = 2, 8 CTAs) and a 1 GiB peer copy GPU 0 -> GPU 1 (copy engine), each alone and
//      both at once: do they slow each other (HBM contention on GPU 0)?
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "check_cuda.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_kernel_impl.cuh"
#include "kernel_bench.h"

namespace conccl::kbench {
namespace {

template <int U, int Threads>
double peerReduceMs(const exec::ReduceArgs& args, int ctas, cudaStream_t stream, int runs) {
  return timeMs(stream, runs, [&] {
    exec::reduceFixedKernel<__nv_bfloat16, exec::OpSum, 2, U, Threads><<<ctas, Threads, 0, stream>>>(args);
  });
}

void line(const char* what, int u, int threads, int ctas, size_t readBytes, double ms) {
  const double gbs = static_cast<double>(readBytes) / (ms * 1e-3) / 1e9;
  std::printf("%-22s %3d %7d %5d %9.3f %10.1f %10.1f\n", what, u, threads, ctas, ms, gbs, gbs / ctas);
  std::printf(
      "#json {\"bench\":\"peer_probe\",\"what\":\"%s\",\"unroll\":%d,\"threads\":%d,\"ctas\":%d,\"time_ms\":%.4f,"
      "\"read_gbps\":%.2f,\"read_gbps_per_sm\":%.2f}\n",
      what, u, threads, ctas, ms, gbs, gbs / ctas);
}

}  // namespace

void runPeerProbe(int runs) {
  int devices = 0, access = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("# peer probe: needs 2 GPUs, found %d\n", devices);
    return;
  }
  CHECK_CUDA(cudaDeviceCanAccessPeer(&access, 0, 1));
  if (!access) {
    std::printf("# peer probe: GPU 0 cannot access GPU 1\n");
    return;
  }
  const size_t bytes = size_t{256} << 20;
  void *local0 = nullptr, *local1 = nullptr, *out = nullptr, *remote = nullptr, *copyDst = nullptr;
  CHECK_CUDA(cudaSetDevice(1));
  (void)cudaDeviceEnablePeerAccess(0, 0);
  (void)cudaGetLastError();
  CHECK_CUDA(cudaMalloc(&remote, bytes));
  CHECK_CUDA(cudaMemset(remote, 0x3c, bytes));
  CHECK_CUDA(cudaMalloc(&copyDst, size_t{1} << 30));
  CHECK_CUDA(cudaSetDevice(0));
  (void)cudaDeviceEnablePeerAccess(1, 0);
  (void)cudaGetLastError();
  CHECK_CUDA(cudaMalloc(&local0, bytes));
  CHECK_CUDA(cudaMalloc(&local1, bytes));
  CHECK_CUDA(cudaMalloc(&out, bytes));
  void* copySrc = nullptr;
  CHECK_CUDA(cudaMalloc(&copySrc, size_t{1} << 30));
  CHECK_CUDA(cudaMemset(local0, 0x3c, bytes));
  CHECK_CUDA(cudaMemset(local1, 0x3c, bytes));
  CHECK_CUDA(cudaMemset(copySrc, 0x3c, size_t{1} << 30));
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaStream_t s1 = nullptr, s2 = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

  exec::ReduceArgs localArgs, peerArgs;
  localArgs.k = peerArgs.k = 2;
  localArgs.count = peerArgs.count = bytes / 2;
  localArgs.inputs[0] = peerArgs.inputs[0] = local0;
  localArgs.inputs[1] = local1;
  peerArgs.inputs[1] = remote;
  localArgs.output = peerArgs.output = out;

  std::printf("\n# peer probe: bf16 sum of 2 x 256 MiB on GPU 0, median of %d (input 1 local, or on GPU 1 over NVLink)\n",
              runs);
  std::printf("%-22s %3s %7s %5s %9s %10s %10s\n", "what", "U", "threads", "CTAs", "time_ms", "read_GB/s", "GB/s/SM");
  for (int ctas : {4, 8, 16}) {
    line("local", 4, 1024, ctas, 2 * bytes, peerReduceMs<4, 1024>(localArgs, ctas, s1, runs));
    line("peer", 4, 1024, ctas, 2 * bytes, peerReduceMs<4, 1024>(peerArgs, ctas, s1, runs));
    line("peer", 8, 512, ctas, 2 * bytes, peerReduceMs<8, 512>(peerArgs, ctas, s1, runs));
    line("peer", 2, 1024, ctas, 2 * bytes, peerReduceMs<2, 1024>(peerArgs, ctas, s1, runs));
  }

  // 2. Contention: the reduction and a peer copy, alone and together (wall time of both from one start).
  const size_t copyBytes = size_t{1} << 30;
  auto copy = [&] { CHECK_CUDA(cudaMemcpyAsync(copyDst, copySrc, copyBytes, cudaMemcpyDefault, s2)); };
  auto reduce = [&] {
    exec::reduceFixedKernel<__nv_bfloat16, exec::OpSum, 2, 4, 1024><<<8, 1024, 0, s1>>>(localArgs);
  };
  const double copyAlone = timeMs(s2, runs, copy);
  const double reduceAlone = timeMs(s1, runs, reduce);
  std::vector<double> both, copyBeside;
  cudaEvent_t a0, a1, b1;
  CHECK_CUDA(cudaEventCreate(&a0));
  CHECK_CUDA(cudaEventCreate(&a1));
  CHECK_CUDA(cudaEventCreate(&b1));
  for (int r = 0; r < runs; ++r) {
    CHECK_CUDA(cudaEventRecord(a0, s1));
    CHECK_CUDA(cudaStreamWaitEvent(s2, a0, 0));
    copy();
    // Reductions back to back for as long as the copy runs (about 4 of them).
    for (int i = 0; i < 4; ++i) reduce();
    CHECK_CUDA(cudaEventRecord(a1, s1));
    CHECK_CUDA(cudaEventRecord(b1, s2));
    CHECK_CUDA(cudaEventSynchronize(a1));
    CHECK_CUDA(cudaEventSynchronize(b1));
    float ra = 0, cb = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ra, a0, a1));
    CHECK_CUDA(cudaEventElapsedTime(&cb, a0, b1));
    both.push_back(ra / 4);
    copyBeside.push_back(cb);
  }
  std::printf("# contention: 1 GiB peer copy alone %.3f ms (%.1f GB/s), beside 4 reductions %.3f ms (%.1f GB/s)\n",
              copyAlone, copyBytes / (copyAlone * 1e6), median(copyBeside), copyBytes / (median(copyBeside) * 1e6));
  std::printf("# contention: reduction (k=2, 8 CTAs) alone %.3f ms, beside the copy %.3f ms each\n", reduceAlone,
              median(both));
  std::printf(
      "#json {\"bench\":\"contention\",\"copy_alone_ms\":%.4f,\"copy_beside_ms\":%.4f,\"reduce_alone_ms\":%.4f,"
      "\"reduce_beside_ms\":%.4f}\n",
      copyAlone, median(copyBeside), reduceAlone, median(both));
  cudaEventDestroy(a0);
  cudaEventDestroy(a1);
  cudaEventDestroy(b1);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  for (void* p : {local0, local1, out, copySrc}) cudaFree(p);
  CHECK_CUDA(cudaSetDevice(1));
  cudaFree(remote);
  cudaFree(copyDst);
  CHECK_CUDA(cudaSetDevice(0));
}

}  // namespace conccl::kbench
