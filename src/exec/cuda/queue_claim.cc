#include "exec/cuda/queue_claim.h"

#include <cuda.h>

#include <atomic>

#include "base/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"

namespace conccl::exec {

QueueClaimer::QueueClaimer(const std::vector<int>& devices) {
  gate_ = PinnedBuffer::allocate(sizeof(uint32_t));
  gateHost_ = gate_.as<uint32_t>();
  *static_cast<volatile uint32_t*>(gateHost_) = 0;
  void* dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&dev, gate_.get(), 0));
  gateDevice_ = reinterpret_cast<uintptr_t>(dev);
  for (int d : devices) {
    if (probes_.count(d) != 0) continue;
    DeviceGuard guard(d);
    probes_.emplace(d, DeviceBuffer::allocate(256));
    events_.emplace(d, Event::createForOrdering());
  }
}

QueueClaimer::~QueueClaimer() {
  // Never leave a stream waiting on the gate (claim opens it on every path; this is belt and braces).
  if (gateHost_ != nullptr) *static_cast<volatile uint32_t*>(gateHost_) = 0xffffffffu;
}

void QueueClaimer::leak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [device, probe] : probes_) probe.leak();
  gate_.leak();
  gateHost_ = nullptr;
}

bool QueueClaimer::isNewStream(int rank, cudaStream_t stream, int device) {
  DeviceGuard guard(device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return false;
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetId(stream, &id));
  std::lock_guard<std::mutex> lock(mutex_);
  return seen_[rank].insert(id).second;
}

void QueueClaimer::claim(const std::vector<Target>& targets) {
  if (targets.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t generation = ++generation_;
  // Opens the gate however this function ends: a stream left behind a closed gate would hang forever.
  struct OpenGate {
    uint32_t* word;
    uint32_t value;
    ~OpenGate() {
      *static_cast<volatile uint32_t*>(word) = value;
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
  } open{gateHost_, generation};
  const DriverApi& cu = driverApi();
  for (const Target& t : targets) {
    DeviceGuard guard(t.device);
    // GEQ: a later claim's larger value opens every earlier gate too (32-bit wrap after 4e9 claims ignored).
    CU_CHECK(cu.streamWaitValue32(reinterpret_cast<CUstream>(t.stream), static_cast<CUdeviceptr>(gateDevice_),
                                  generation, CU_STREAM_WAIT_VALUE_GEQ));
    auto probe = probes_.find(t.device);
    if (probe != probes_.end()) {
      char* p = static_cast<char*>(probe->second.get());
      CUDA_CHECK(cudaMemcpyAsync(p + 128, p, 4, cudaMemcpyDeviceToDevice, t.stream));
      CUDA_CHECK(cudaEventRecord(events_.at(t.device).get(), t.stream));
    }
  }
}

}  // namespace conccl::exec
