// conccl-kernel-bench, --flag-probe: what one handshake costs on the GPU. Every copy-engine call of conccl orders its
// ranks with stream memory operations: a rank writes a peer's flag (cuStreamWriteValue32) and waits for its own
// (cuStreamWaitValue32). Today the flags live in pinned host memory (the CPU can re-open them when a call is
// cancelled), so every handshake is a posted write to host memory and a front-end polling it. At 64 KiB-8 MB a call
// is a few handshakes long, so their latency is a floor under its time (issue 11 item 3).
//
// The probe ping-pongs between two streams, on GPUs 0 and 1 when there are two, else both on GPU 0:
//   A: write(flagB, i); wait(flagA >= i)        B: wait(flagB >= i); write(flagA, i)
// for i = 1..N, enqueued interleaved (so a full command queue never blocks the enqueue of the side that would drain
// it), timed with events on A: the round trip is two handshakes. Flags in pinned host memory, then in device memory
// (each flag on its waiter's GPU, as a peer-mapped flag would be).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "check_cuda.h"
#include "exec/cuda/driver_api.h"
#include "kernel_bench.h"

namespace conccl::kbench {
namespace {

#define CHECK_CU(call)                                                                \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      std::fprintf(stderr, "%s failed: CUresult %d (%s:%d)\n", #call, static_cast<int>(r_), __FILE__, __LINE__); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Side {
  int device = 0;
  cudaStream_t stream = nullptr;
  CUdeviceptr flag = 0;  // the flag this side waits on (as every GPU addresses it: UVA)
};

// Median round trip in microseconds over `runs` runs of `trips` round trips.
double pingPong(Side& a, Side& b, int trips, int runs, void (*reset)(Side&, Side&)) {
  const exec::DriverApi& d = exec::driverApi();
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK_CUDA(cudaSetDevice(a.device));
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int run = 0; run <= runs; ++run) {  // run 0 warms up
    reset(a, b);
    CHECK_CUDA(cudaSetDevice(a.device));
    CHECK_CUDA(cudaEventRecord(start, a.stream));
    for (int i = 1; i <= trips; ++i) {
      const auto v = static_cast<cuuint32_t>(i);
      CHECK_CU(d.streamWriteValue32(reinterpret_cast<CUstream>(a.stream), b.flag, v, CU_STREAM_WRITE_VALUE_DEFAULT));
      CHECK_CU(d.streamWaitValue32(reinterpret_cast<CUstream>(a.stream), a.flag, v, CU_STREAM_WAIT_VALUE_GEQ));
      CHECK_CU(d.streamWaitValue32(reinterpret_cast<CUstream>(b.stream), b.flag, v, CU_STREAM_WAIT_VALUE_GEQ));
      CHECK_CU(d.streamWriteValue32(reinterpret_cast<CUstream>(b.stream), a.flag, v, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    CHECK_CUDA(cudaEventRecord(stop, a.stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaSetDevice(b.device));
    CHECK_CUDA(cudaStreamSynchronize(b.stream));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (run > 0) us.push_back(1000.0 * ms / trips);
  }
  CHECK_CUDA(cudaSetDevice(a.device));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(us);
}

}  // namespace

void runFlagProbe(int runs) {
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  Side a, b;
  a.device = 0;
  b.device = count > 1 ? 1 : 0;
  if (a.device != b.device) {
    for (auto [from, to] : {std::pair{a.device, b.device}, std::pair{b.device, a.device}}) {
      CHECK_CUDA(cudaSetDevice(from));
      const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK_CUDA(e);
      (void)cudaGetLastError();
    }
  }
  for (Side* s : {&a, &b}) {
    CHECK_CUDA(cudaSetDevice(s->device));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  }
  constexpr int kTrips = 2000;
  const std::string where = a.device == b.device ? "two streams of GPU 0" : "GPU 0 <-> GPU 1";

  // Pinned host memory, mapped: what conccl uses today.
  uint32_t* host = nullptr;
  CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * sizeof(uint32_t),
                           cudaHostAllocMapped | cudaHostAllocPortable));
  a.flag = reinterpret_cast<CUdeviceptr>(&host[0]);
  b.flag = reinterpret_cast<CUdeviceptr>(&host[1]);
  static uint32_t* hostFlags = nullptr;
  hostFlags = host;
  const double hostUs = pingPong(a, b, kTrips, runs, [](Side&, Side&) {
    hostFlags[0] = 0;
    hostFlags[1] = 0;
  });

  // Device memory, each flag on the GPU of the side that waits for it.
  for (Side* s : {&a, &b}) {
    CHECK_CUDA(cudaSetDevice(s->device));
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, 256));
    s->flag = reinterpret_cast<CUdeviceptr>(p);
  }
  const double deviceUs = pingPong(a, b, kTrips, runs, [](Side& x, Side& y) {
    for (Side* s : {&x, &y}) {
      CHECK_CUDA(cudaSetDevice(s->device));
      CHECK_CUDA(cudaMemset(reinterpret_cast<void*>(s->flag), 0, sizeof(uint32_t)));
      CHECK_CUDA(cudaDeviceSynchronize());
    }
  });

  std::printf("flag-probe %s: round trip (two handshakes, stream write + stream wait each), median of %d x %d trips\n",
              where.c_str(), runs, kTrips);
  std::printf("flag-probe host-memory flags   %.2f us per round trip, %.2f us per handshake\n", hostUs, hostUs / 2);
  std::printf("flag-probe device-memory flags %.2f us per round trip, %.2f us per handshake\n", deviceUs,
              deviceUs / 2);

  for (Side* s : {&a, &b}) {
    CHECK_CUDA(cudaSetDevice(s->device));
    CHECK_CUDA(cudaFree(reinterpret_cast<void*>(s->flag)));
    CHECK_CUDA(cudaStreamDestroy(s->stream));
  }
  CHECK_CUDA(cudaFreeHost(host));
  CHECK_CUDA(cudaSetDevice(0));
}

}  // namespace conccl::kbench
