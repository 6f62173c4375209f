// The host backend: ranks are threads, buffers are host memory, copies are memmove, flags are words under one
// mutex. It runs a rank's program synchronously in program order on the calling thread; that is one legal
// execution of the model in sched/schedule.h (every op also waits for the ops before it), and it cannot
// deadlock where the model does not: the only blocking op is Wait, and everything after a Wait is ordered
// after it by the model too.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "exec/executor.h"
#include "exec/host/host_reduce.h"

namespace conccl::exec {
namespace {

class HostExecutor final : public Executor {
 public:
  HostExecutor(int nranks, const Config& config) : config_(config), ranks_(nranks) {
    options_.scratchBudget = config.scratchBytes;
    options_.lanes = config.lanes;
    options_.pipelineDepth = 2;
    const int slots = sched::maxSlots(nranks, options_);
    for (auto& r : ranks_) r.flags.assign(slots, 0);
  }

  sched::BuildOptions buildOptions() const override { return options_; }

  // Host memory cannot be validated beyond NULL, which the caller already checked.
  void checkBuffer(int, const void*, size_t, const char*) const override {}

  void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) CONCCL_THROW(concclInvalidUsage, "the communicator was aborted");
      auto& scratch = ranks_[rank].scratch;
      // Grown before this rank signals ready, so peers never see the old block during this call.
      if (scratch.size() < schedule.scratchBytes) scratch.resize(schedule.scratchBytes);
    }
    for (const sched::Op& op : schedule.programs[rank].ops) {
      std::visit([&](const auto& o) { run(o, binding, rank); }, op);
    }
  }

  void synchronize(int) override {}

  void abort() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

  void releaseRank(int rank) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::byte>().swap(ranks_[rank].scratch);
  }

 private:
  struct RankState {
    std::vector<uint32_t> flags;
    std::vector<std::byte> scratch;
  };

  std::byte* resolve(const sched::Location& loc, const CallBinding& binding) {
    if (loc.buffer == sched::kScratch) return ranks_[loc.rank].scratch.data() + loc.offset;
    return static_cast<std::byte*>(binding.buffers[loc.rank][loc.buffer]) + loc.offset;
  }

  void run(const sched::Copy& c, const CallBinding& binding, int) {
    std::memmove(resolve(c.dst, binding), resolve(c.src, binding), c.bytes);
  }

  void run(const sched::Signal& s, const CallBinding&, int) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ranks_[s.peer].flags[s.slot] = 1;
    }
    cv_.notify_all();
  }

  void run(const sched::Wait& w, const CallBinding&, int rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.timeoutMs);
    uint32_t& flag = ranks_[rank].flags[w.slot];
    if (!cv_.wait_until(lock, deadline, [&] { return flag != 0 || aborted_; })) {
      CONCCL_THROW(concclTimeout, "rank " + std::to_string(rank) + " waited " + std::to_string(config_.timeoutMs) +
                                      " ms for flag " + std::to_string(w.slot) + " (a peer stopped in this call)");
    }
    if (flag == 0) CONCCL_THROW(concclInvalidUsage, "the communicator was aborted while rank " +
                                                        std::to_string(rank) + " was waiting");
    flag = 0;
  }

  void run(const sched::Reduce& r, const CallBinding& binding, int) {
    std::vector<const void*> inputs;
    inputs.reserve(r.inputs.size());
    for (const auto& in : r.inputs) inputs.push_back(resolve(in, binding));
    reduceHost(inputs, resolve(r.output, binding), r.count, r.dtype, r.op);
  }

  Config config_;
  sched::BuildOptions options_;
  std::vector<RankState> ranks_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Executor> makeHostExecutor(int nranks, const Config& config) {
  return std::make_unique<HostExecutor>(nranks, config);
}

}  // namespace conccl::exec
