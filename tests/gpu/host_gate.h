// Producer streams held back by the host, for the chunked-collective tests (test_gpu_chunked_reduce_scatter.cc and
// the multi-process worker's scenario_chunked.cc): enqueue(stream, number) queues a host function that returns once
// the host has opened gates up to `number` (open()), or after `limit`, counted as a timeout so that a gate never
// opened cannot hang the test, only fail or slow it. A call that waits for the device inside itself turns into a
// stall of the gate's length: these gates are what found such a host sync (docs/dependent-overlap.md).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <thread>

namespace conccl::gputest {

class HostGates {
 public:
  explicit HostGates(std::chrono::seconds limit) : limit_(limit) {}

  // Closes every gate for a new round (the previous round's host functions must have run: sync their streams).
  void reset() {
    opened_ = 0;
    gates_.clear();
  }
  // Queues gate `number` on `stream`: work queued after it on the stream waits until the gate opens.
  cudaError_t enqueue(cudaStream_t stream, int number) {
    gates_.push_back(Gate{this, number});
    return cudaLaunchHostFunc(stream, &HostGates::wait, &gates_.back());
  }
  // Opens every gate numbered up to `number`.
  void open(int number) { opened_ = number; }
  int timeouts() const { return timeouts_.load(); }

 private:
  struct Gate {
    HostGates* owner;
    int number;
  };

  static void CUDART_CB wait(void* arg) {
    const auto* gate = static_cast<const Gate*>(arg);
    HostGates& g = *gate->owner;
    const auto deadline = std::chrono::steady_clock::now() + g.limit_;
    while (g.opened_.load() < gate->number) {
      if (std::chrono::steady_clock::now() > deadline) {
        g.timeouts_.fetch_add(1);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::chrono::seconds limit_;
  std::atomic<int> opened_{0};
  std::atomic<int> timeouts_{0};
  std::deque<Gate> gates_;  // a deque: the host functions keep pointers to their entries
};

}  // namespace conccl::gputest
