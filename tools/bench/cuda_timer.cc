#include "cuda_timer.h"

#include <algorithm>
#include <set>

namespace conccl::bench {

void CudaCheck(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw BackendError(std::string(call) + " failed: " + cudaGetErrorString(err) + " (" + file + ":" +
                     std::to_string(line) + ")");
}

DeviceGuard::DeviceGuard(int device) {
  BENCH_CUDA_CHECK(cudaGetDevice(&previous_));
  BENCH_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

RankStreams::RankStreams(const std::vector<int>& devices) : devices_(devices), streams_(devices.size(), nullptr) {
  for (size_t r = 0; r < devices.size(); ++r) {
    DeviceGuard guard(devices[r]);
    BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking));
  }
}

RankStreams::~RankStreams() {
  for (size_t r = 0; r < streams_.size(); ++r) {
    if (!streams_[r]) continue;
    cudaSetDevice(devices_[r]);
    cudaStreamSynchronize(streams_[r]);
    cudaStreamDestroy(streams_[r]);
  }
}

void RankStreams::SynchronizeAll() const {
  for (size_t r = 0; r < streams_.size(); ++r) {
    DeviceGuard guard(devices_[r]);
    BENCH_CUDA_CHECK(cudaStreamSynchronize(streams_[r]));
  }
}

bool HasRepeats(const std::vector<int>& devices) {
  return std::set<int>(devices.begin(), devices.end()).size() != devices.size();
}

namespace {

// Events of one timing run, destroyed on scope exit.
class EventTable {
 public:
  EventTable(const std::vector<int>& devices, int count) : devices_(devices), events_(devices.size()) {
    for (size_t r = 0; r < devices.size(); ++r) {
      DeviceGuard guard(devices[r]);
      events_[r].resize(count, nullptr);
      for (cudaEvent_t& e : events_[r]) BENCH_CUDA_CHECK(cudaEventCreate(&e));
    }
  }
  ~EventTable() {
    for (size_t r = 0; r < events_.size(); ++r) {
      cudaSetDevice(devices_[r]);
      for (cudaEvent_t e : events_[r]) {
        if (e) cudaEventDestroy(e);
      }
    }
  }
  EventTable(const EventTable&) = delete;
  EventTable& operator=(const EventTable&) = delete;
  cudaEvent_t at(int rank, int i) const { return events_[rank][i]; }

 private:
  std::vector<int> devices_;
  std::vector<std::vector<cudaEvent_t>> events_;
};

// Per iteration i (events 2i, 2i+1 of each row), the longest elapsed time of the `rows` ranks, in seconds.
std::vector<double> SlowestRank(const EventTable& events, int rows, int iters) {
  std::vector<double> seconds(iters, 0.0);
  for (int i = 0; i < iters; ++i) {
    for (int r = 0; r < rows; ++r) {
      float ms = 0;
      BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, events.at(r, 2 * i), events.at(r, 2 * i + 1)));
      seconds[i] = std::max(seconds[i], ms * 1e-3);
    }
  }
  return seconds;
}

std::vector<int> DevicesOf(const RankStreams& streams, const std::vector<int>& ranks) {
  std::vector<int> devices;
  for (int r : ranks) devices.push_back(streams.devices()[r]);
  return devices;
}

// Row k of the event table belongs to ranks[k].
class EventRankTimer final : public RankTimer {
 public:
  EventRankTimer(const RankStreams& streams, const std::vector<int>& ranks, int iters)
      : streams_(streams), ranks_(ranks), devices_(DevicesOf(streams, ranks)), events_(devices_, 2 * iters),
        iters_(iters) {}
  void Start(int iter) override { Record(2 * iter); }
  void Stop(int iter) override { Record(2 * iter + 1); }
  std::vector<double> Finish() override {
    for (size_t k = 0; k < ranks_.size(); ++k) {
      DeviceGuard guard(devices_[k]);
      BENCH_CUDA_CHECK(cudaStreamSynchronize(streams_[ranks_[k]]));
    }
    return SlowestRank(events_, static_cast<int>(ranks_.size()), iters_);
  }

 private:
  void Record(int index) {
    for (size_t k = 0; k < ranks_.size(); ++k) {
      DeviceGuard guard(devices_[k]);
      BENCH_CUDA_CHECK(cudaEventRecord(events_.at(static_cast<int>(k), index), streams_[ranks_[k]]));
    }
  }

  const RankStreams& streams_;
  std::vector<int> ranks_, devices_;
  EventTable events_;
  int iters_;
};

class GraphExec {
 public:
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<RankTimer> MakeEventTimer(const RankStreams& streams, const std::vector<int>& ranks, int iters) {
  auto timer = std::make_unique<EventRankTimer>(streams, ranks, iters);
  if (!ranks.empty()) BENCH_CUDA_CHECK(cudaSetDevice(streams.devices()[ranks.front()]));
  return timer;
}

std::vector<double> TimeWithEvents(const RankStreams& streams, const std::function<void()>& launch, int iters,
                                   bool graph) {
  const std::vector<int>& devices = streams.devices();
  const int n = static_cast<int>(devices.size());
  if (!graph) {
    std::vector<int> all(n);
    for (int r = 0; r < n; ++r) all[r] = r;
    EventRankTimer timer(streams, all, iters);
    for (int i = 0; i < iters; ++i) {
      timer.Start(i);
      launch();
      timer.Stop(i);
    }
    return timer.Finish();
  }
  // Events 2i and 2i+1 bracket iteration i; the last two fork and join the captured streams.
  EventTable events(devices, 2 * iters + 2);
  auto record_all = [&](int index) {
    for (int r = 0; r < n; ++r) {
      DeviceGuard guard(devices[r]);
      BENCH_CUDA_CHECK(cudaEventRecordWithFlags(events.at(r, index), streams[r], cudaEventRecordExternal));
    }
  };

  GraphExec g;
  // One capture over every rank's stream: rank 0's stream forks to the others and joins them at the end,
  // so the cross-rank dependencies a library adds inside a group stay within one graph.
  const int fork = 2 * iters, join = 2 * iters + 1;
  {
    DeviceGuard guard(devices[0]);
    BENCH_CUDA_CHECK(cudaStreamBeginCapture(streams[0], cudaStreamCaptureModeRelaxed));
    BENCH_CUDA_CHECK(cudaEventRecord(events.at(0, fork), streams[0]));
  }
  for (int r = 1; r < n; ++r) {
    DeviceGuard guard(devices[r]);
    BENCH_CUDA_CHECK(cudaStreamWaitEvent(streams[r], events.at(0, fork), 0));
  }
  try {
    for (int i = 0; i < iters; ++i) {
      record_all(2 * i);
      launch();
      record_all(2 * i + 1);
    }
  } catch (...) {
    DeviceGuard guard(devices[0]);
    cudaStreamEndCapture(streams[0], &g.graph_);
    throw;
  }
  for (int r = 1; r < n; ++r) {
    DeviceGuard guard(devices[r]);
    BENCH_CUDA_CHECK(cudaEventRecord(events.at(r, join), streams[r]));
    DeviceGuard guard0(devices[0]);
    BENCH_CUDA_CHECK(cudaStreamWaitEvent(streams[0], events.at(r, join), 0));
  }
  DeviceGuard guard(devices[0]);
  BENCH_CUDA_CHECK(cudaStreamEndCapture(streams[0], &g.graph_));
  BENCH_CUDA_CHECK(cudaGraphInstantiate(&g.exec_, g.graph_, 0));
  BENCH_CUDA_CHECK(cudaGraphLaunch(g.exec_, streams[0]));
  streams.SynchronizeAll();
  return SlowestRank(events, n, iters);
}

}  // namespace conccl::bench
