#include "harness.h"

#include <algorithm>
#include <atomic>

#include "c3/metrics.h"
#include "c3_check.h"
#include "kernels.h"

namespace conccl::c3 {

Harness::Harness(const std::vector<int>& rankDevices) : rankDevices_(rankDevices) {
  for (int d : rankDevices) {
    if (std::find(devices_.begin(), devices_.end(), d) == devices_.end()) devices_.push_back(d);
  }
  flagMemory_ = exec::PinnedBuffer::allocate(sizeof(int));
  flag_ = flagMemory_.as<volatile int>();
  *flag_ = 0;
  int lowest = 0, highest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  for (int d : devices_) {
    exec::DeviceGuard guard(d);
    gate_.push_back(exec::Stream::createNonBlocking(0));
    gemm_.push_back(exec::Stream::createNonBlocking(0));
    start_.push_back(exec::Event::createForTiming());
    gemmEnd_.push_back(exec::Event::createForTiming());
  }
  for (int d : rankDevices) {
    exec::DeviceGuard guard(d);
    coll_.push_back(exec::Stream::createNonBlocking(0));
    collHigh_.push_back(exec::Stream::createNonBlocking(highest));  // greatest priority (numerically lowest)
    collEnd_.push_back(exec::Event::createForTiming());
  }
}

size_t Harness::deviceIndex(int device) const {
  return size_t(std::find(devices_.begin(), devices_.end(), device) - devices_.begin());
}

Harness::Sample Harness::once(Mode mode, const std::vector<const Gemm*>& gemms, Collective* coll, bool highPriority) {
  const bool runGemm = mode != Mode::kColl;
  const bool runColl = mode != Mode::kGemm;
  std::vector<cudaStream_t> collStreams;
  for (size_t r = 0; r < rankDevices_.size(); ++r) {
    collStreams.push_back(highPriority ? collHigh_[r].get() : coll_[r].get());
  }
  *flag_ = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (size_t i = 0; i < devices_.size(); ++i) {
    exec::DeviceGuard guard(devices_[i]);
    CUDA_CHECK(launchGate(flag_, gate_[i].get()));
    CUDA_CHECK(cudaEventRecord(start_[i].get(), gate_[i].get()));
    CUDA_CHECK(cudaStreamWaitEvent(gemm_[i].get(), start_[i].get(), 0));
  }
  for (size_t r = 0; r < rankDevices_.size(); ++r) {
    CUDA_CHECK(cudaStreamWaitEvent(collStreams[r], start_[deviceIndex(rankDevices_[r])].get(), 0));
  }
  auto enqueueGemms = [&] {
    for (size_t i = 0; i < devices_.size(); ++i) {
      exec::DeviceGuard guard(devices_[i]);
      if (mode == Mode::kSerial) {
        for (auto& e : collEnd_) CUDA_CHECK(cudaStreamWaitEvent(gemm_[i].get(), e.get(), 0));
      }
      gemms[i]->enqueue(gemm_[i].get());
      CUDA_CHECK(cudaEventRecord(gemmEnd_[i].get(), gemm_[i].get()));
    }
  };
  auto enqueueColl = [&] {
    coll->enqueue(collStreams);
    for (size_t r = 0; r < rankDevices_.size(); ++r) {
      exec::DeviceGuard guard(rankDevices_[r]);
      CUDA_CHECK(cudaEventRecord(collEnd_[r].get(), collStreams[r]));
    }
  };
  // Serial needs the collective's end events recorded before the GEMMs wait for them.
  if (runColl && (highPriority || mode == Mode::kSerial)) enqueueColl();
  if (runGemm) enqueueGemms();
  if (runColl && !(highPriority || mode == Mode::kSerial)) enqueueColl();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *flag_ = 1;  // release every gate: the common start
  for (size_t i = 0; i < devices_.size(); ++i) {
    CUDA_CHECK(cudaStreamSynchronize(gemm_[i].get()));
    CUDA_CHECK(cudaStreamSynchronize(gate_[i].get()));
  }
  for (cudaStream_t s : collStreams) CUDA_CHECK(cudaStreamSynchronize(s));

  Sample out;
  if (runGemm) {
    out.gemm = 0;
    for (size_t i = 0; i < devices_.size(); ++i) out.gemm = std::max(out.gemm, elapsedSeconds(start_[i], gemmEnd_[i]));
  }
  if (runColl) {
    out.coll = 0;
    for (size_t r = 0; r < rankDevices_.size(); ++r) {
      out.coll = std::max(out.coll, elapsedSeconds(start_[deviceIndex(rankDevices_[r])], collEnd_[r]));
    }
  }
  out.total = std::max(runGemm ? out.gemm : 0.0, runColl ? out.coll : 0.0);
  return out;
}

Harness::Sample Harness::median(Mode mode, const std::vector<const Gemm*>& gemms, Collective* coll, bool highPriority,
                                int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) once(mode, gemms, coll, highPriority);
  std::vector<double> g, c, t;
  for (int i = 0; i < iters; ++i) {
    const Sample s = once(mode, gemms, coll, highPriority);
    g.push_back(s.gemm);
    c.push_back(s.coll);
    t.push_back(s.total);
  }
  return {medianOf(g), medianOf(c), medianOf(t)};
}

void Harness::prime(const std::vector<const Gemm*>& gemms, Collective* coll) {
  if (!gemms.empty()) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      exec::DeviceGuard guard(devices_[i]);
      gemms[i]->enqueue(gemm_[i].get());
    }
  }
  if (coll != nullptr) {
    std::vector<cudaStream_t> s;
    for (auto& st : coll_) s.push_back(st.get());
    coll->enqueue(s);
    for (auto& st : collHigh_) s.push_back(st.get());
    for (cudaStream_t x : s) CUDA_CHECK(cudaStreamSynchronize(x));
  }
  for (auto& st : gemm_) CUDA_CHECK(cudaStreamSynchronize(st.get()));
}

}  // namespace conccl::c3
