// The host backend: ranks are threads, buffers are host memory, copies are memmove, flags are words under one
// mutex. It runs a rank's program synchronously in program order on the calling thread; that is one legal
// execution of the model in sched/schedule.h (every op also waits for the ops before it), and it cannot
// deadlock where the model does not: the only blocking op is Wait, and everything after a Wait is ordered
// after it by the model too.
#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/error.h"
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
    options_.peerReads = config.peerReduce;  // every rank is a thread of this process: all memory is addressable
    // The route the CUDA backend takes with engine = copy, run here too so that the host tests prove its results.
    options_.ownBlockViaPeer = config.engine == concclEngineCopy;
    const int slots = sched::maxSlots(nranks, options_);
    for (auto& r : ranks_) r.flags.assign(slots, 0);
  }

  sched::BuildOptions buildOptions() const override { return options_; }

  // Host memory cannot be validated beyond NULL, which the caller already checked.
  uint64_t checkBuffer(int, const void*, size_t, const char*, cudaStream_t) const override {
    return kAllocationUnknown;
  }

  void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) throwAborted(rank);
      auto& scratch = ranks_[rank].scratch;
      // Grown before this rank signals ready, so peers never see the old block during this call. A huge
      // scratch budget may not fit in host memory: that is an error of this call (bad_alloc is turned into
      // concclSystemError by the API layer), not a crash.
      if (scratch.size() < schedule.scratchBytes) scratch.resize(schedule.scratchBytes);
      ++active_;
    }
    try {
      for (const sched::Op& op : schedule.programs[rank].ops) {
        std::visit([&](const auto& o) { run(o, binding, rank); }, op);
      }
    } catch (...) {
      // A rank whose program stops half way leaves peers that may still copy into (or out of) its buffers and
      // scratch: their next ops are ordered only by flags this rank will never set or consume. Returning now
      // would let the caller free those buffers (or concclCommAbort free the scratch) while a peer's memmove is
      // still writing into them. So: stop every program of this executor (each checks `aborted_` before every
      // op, and waits wake up on it), and return only when none is running any more.
      quiesceAfterFailure(rank, std::current_exception());
      throw;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --active_;
    }
    cv_.notify_all();
  }

  void synchronize(int) override {}

  void cancel() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_ = true;
      abortedFlag_.store(true, std::memory_order_relaxed);
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

  // Called after this rank's program threw: aborts every other program of the executor and waits until none runs.
  void quiesceAfterFailure(int rank, std::exception_ptr error) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!aborted_) {
      // Keep the code of the first failure (e.g. concclTimeout) for the peers that stop because of it, so that
      // whichever rank reaches Clique::fail first records the same result code.
      failCode_ = concclInternalError;
      try {
        std::rethrow_exception(error);
      } catch (const Error& e) {
        failCode_ = e.code();
        failReason_ = e.message();
      } catch (const std::bad_alloc&) {
        failCode_ = concclSystemError;
        failReason_ = "out of host memory";
      } catch (...) {
        failReason_ = "a rank's program failed";
      }
      aborted_ = true;
      abortedFlag_.store(true, std::memory_order_relaxed);
    }
    --active_;
    cv_.notify_all();
    // Every other program stops at its next op (a Wait wakes up on `aborted_`); bounded by the timeout anyway.
    cv_.wait_for(lock, std::chrono::milliseconds(config_.timeoutMs), [&] { return active_ == 0; });
    (void)rank;
  }

  [[noreturn]] void throwAborted(int rank) const {
    if (failCode_ != concclSuccess) {
      CONCCL_THROW(failCode_, "rank " + std::to_string(rank) + " stopped because a peer failed in this call: " +
                                  failReason_);
    }
    CONCCL_THROW(concclInvalidUsage, "the communicator was aborted while rank " + std::to_string(rank) +
                                         " was in a call");
  }

  void checkNotAborted(int rank) {
    if (abortedFlag_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mutex_);
      throwAborted(rank);
    }
  }

  // A mark moves nothing (the host backend has no chunk events to record).
  void run(const sched::Ready&, const CallBinding&, int) {}

  void run(const sched::Copy& c, const CallBinding& binding, int rank) {
    // After an abort a peer may already have returned and freed the memory this copy touches.
    checkNotAborted(rank);
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
    // Aborted: fail even when the flag happens to be set, since the ops after this Wait touch peer memory.
    if (aborted_) throwAborted(rank);
    flag = 0;
  }

  void run(const sched::Reduce& r, const CallBinding& binding, int rank) {
    checkNotAborted(rank);
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
  bool aborted_ = false;                     // guarded by mutex_
  std::atomic<bool> abortedFlag_{false};     // mirror of aborted_ for the lock-free check before each op
  int active_ = 0;                           // programs currently running (guarded by mutex_)
  concclResult_t failCode_ = concclSuccess;  // set when a rank's failure (not concclCommAbort) aborted the executor
  std::string failReason_;
};

}  // namespace

std::unique_ptr<Executor> makeHostExecutor(int nranks, const Config& config) {
  return std::make_unique<HostExecutor>(nranks, config);
}

}  // namespace conccl::exec
