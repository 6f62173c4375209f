#include "exec/cuda/deferred_launch.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/host_laps.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/host_gated_work.h"
#include "exec/queue_budget.h"

namespace conccl::exec {
namespace {

using Clock = std::chrono::steady_clock;

// How long probe() lets an idle stream take to run an event record while the caller's stream is held. A record on
// an idle stream of its own hardware queue completes in microseconds; one behind the held Wait never does.
constexpr auto kProbeWindow = std::chrono::milliseconds(5);
// How long probe() waits for the launch stream and the lanes to go idle before it gives up for this call.
constexpr auto kIdleWait = std::chrono::milliseconds(50);

CUdeviceptr devicePointerOf(const PinnedBuffer& b) {
  void* p = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&p, b.get(), 0));
  return reinterpret_cast<CUdeviceptr>(p);
}

void storeWord(const PinnedBuffer& b, uint32_t value) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *static_cast<volatile uint32_t*>(b.as<uint32_t>()) = value;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool idleWithin(const std::vector<cudaStream_t>& streams, Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    bool idle = true;
    for (cudaStream_t s : streams) {
      const cudaError_t status = cudaStreamQuery(s);
      if (status == cudaErrorNotReady) {
        idle = false;
        break;
      }
      CUDA_CHECK(status);
    }
    if (idle) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

DeferredLaunches::DeferredLaunches(int device, std::vector<cudaStream_t> lanes)
    : device_(device), lanes_(std::move(lanes)) {
  DeviceGuard guard(device_);
  launchStream_ = Stream::createNonBlocking();
  gate_ = PinnedBuffer::allocate(sizeof(uint32_t));
  storeWord(gate_, 0);
  gateDevice_ = devicePointerOf(gate_);
  probeWord_ = PinnedBuffer::allocate(sizeof(uint32_t));
  storeWord(probeWord_, 0);
  probeWordDevice_ = devicePointerOf(probeWord_);
  singleConnection_ = deviceConnectionsFrom(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) == 1;
}

DeferredLaunches::~DeferredLaunches() {
  // Whatever is still queued on the launch stream must not wait for ever on a gate nobody will open: every ticket
  // handed out is opened (the caller's streams then go on), and the launch stream is left to drain before the
  // events and the gate are freed (cudaStreamDestroy returns at once and the driver frees it when it is idle; the
  // pinned words are freed with cudaFreeHost, which synchronises).
  std::lock_guard<std::mutex> lock(mutex_);
  storeWord(gate_, issued_);
  storeWord(probeWord_, probeTicket_);
  if (gatesHeld_ > 0) HostGatedWork::instance().leave(gatesHeld_);
}

cudaEvent_t DeferredLaunches::takeEvent() {
  if (free_.empty()) {
    events_.push_back(Event::createForOrdering());
    return events_.back().get();
  }
  cudaEvent_t e = free_.back();
  free_.pop_back();
  return e;
}

std::optional<DeferredCall> DeferredLaunches::defer(cudaStream_t caller, std::string* whyNot) {
  // No lock is held across a CUDA call: an enqueue on the caller's stream can block when its queue is full of gate
  // waits, until the proxy thread, which takes the lock in begin() and end(), has released them.
  DeviceGuard guard(device_);
  if (singleConnection_) {
    *whyNot = "CUDA_DEVICE_MAX_CONNECTIONS=1: every stream shares one hardware queue, so the caller's stream cannot "
              "wait for work enqueued after it";
    return std::nullopt;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(caller, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    *whyNot = "the caller's stream is being captured (a graph cannot take work enqueued after the capture ends)";
    return std::nullopt;
  }
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetId(caller, &id));
  std::string verdict;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = verdicts_.find(id);
    if (it != verdicts_.end()) {
      known = true;
      verdict = it->second;
    }
  }
  if (!known) {
    // Only the caller's thread probes (one thread calls per communicator); the launch stream must be idle for it.
    std::string why;
    const bool clear = probe(caller, &why);
    if (!clear && why.empty()) {
      *whyNot = "the launch stream and lanes were busy, so the caller's stream could not be probed yet";
      return std::nullopt;  // not cached: probed again next time
    }
    verdict = clear ? std::string() : why;
    std::lock_guard<std::mutex> lock(mutex_);
    verdicts_[id] = verdict;
  }
  if (!verdict.empty()) {
    *whyNot = verdict;
    return std::nullopt;
  }
  // Counted before the Wait exists, so that no close of an IPC mapping starts while it could be pending.
  HostGatedWork::instance().enter();
  HostLaps::lap(kCloseWaitLap);
  DeferredCall call;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    call.ticket = ++issued_;
    call.reached = takeEvent();
    ++gatesHeld_;
  }
  call.launchStream = launchStream_.get();
  try {
    CUDA_CHECK(cudaEventRecord(call.reached, caller));
    CU_CHECK(driverApi().streamWaitValue32(reinterpret_cast<CUstream>(caller), gateDevice_, call.ticket,
                                           CU_STREAM_WAIT_VALUE_GEQ));
  } catch (const Error&) {
    // Tickets are ended in order: this one still passes through the proxy's end(), which the caller arranges by
    // failing the communicator; open it here so that nothing waits for it.
    openFromHost(call.ticket);
    throw;
  }
  return call;
}

bool DeferredLaunches::probe(cudaStream_t caller, std::string* whyNot) {
  std::vector<cudaStream_t> others = lanes_;
  others.push_back(launchStream_.get());
  if (!idleWithin(others, kIdleWait)) return false;  // whyNot stays empty: try again later
  const uint32_t k = ++probeTicket_;
  CU_CHECK(driverApi().streamWaitValue32(reinterpret_cast<CUstream>(caller), probeWordDevice_, k,
                                         CU_STREAM_WAIT_VALUE_GEQ));
  std::vector<Event> marks;
  for (cudaStream_t s : others) {
    marks.push_back(Event::createForOrdering());
    CUDA_CHECK(cudaEventRecord(marks.back().get(), s));
  }
  const auto deadline = Clock::now() + kProbeWindow;
  size_t blocked = others.size();
  for (;;) {
    blocked = 0;
    for (auto& m : marks) {
      const cudaError_t status = cudaEventQuery(m.get());
      if (status == cudaErrorNotReady) {
        ++blocked;
        continue;
      }
      CUDA_CHECK(status);
    }
    if (blocked == 0 || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  storeWord(probeWord_, k);  // the caller's stream goes on
  if (blocked == 0) return true;
  *whyNot = std::to_string(blocked) + " of conccl's " + std::to_string(others.size()) +
            " streams (lanes and launch stream) did not run while the caller's stream was held: they share its "
            "hardware queue (raise CUDA_DEVICE_MAX_CONNECTIONS), or a stream of theirs was busy";
  // The events are destroyed once their records ran (cudaEventDestroy defers the release): nothing waits on them.
  return false;
}

void DeferredLaunches::begin(const DeferredCall& call) {
  DeviceGuard guard(device_);
  // cudaStreamWaitEvent takes the event's state now: the event may be recorded again by a later defer() from here on.
  const cudaError_t err = cudaStreamWaitEvent(launchStream_.get(), call.reached, 0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(call.reached);
  }
  CUDA_CHECK(err);
}

void DeferredLaunches::end(const DeferredCall& call) {
  DeviceGuard guard(device_);
  CU_CHECK(driverApi().streamWriteValue32(reinterpret_cast<CUstream>(launchStream_.get()), gateDevice_, call.ticket,
                                          0));
  releaseGate();
}

void DeferredLaunches::releaseGate() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gatesHeld_ == 0) return;
    --gatesHeld_;
  }
  HostGatedWork::instance().leave();
}

void DeferredLaunches::openFromHost(uint32_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint32_t now = *static_cast<volatile uint32_t*>(gate_.as<uint32_t>());
    if (static_cast<int32_t>(ticket - now) > 0) storeWord(gate_, ticket);
  }
  releaseGate();
}

bool DeferredLaunches::drain(std::chrono::milliseconds limit) {
  DeviceGuard guard(device_);
  return idleWithin({launchStream_.get()}, limit);
}

}  // namespace conccl::exec
