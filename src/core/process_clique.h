// ProcessClique: a communicator whose ranks are in different processes of one node (concclCommInitRank), as
// seen from the one rank this process drives.
//
// Initialisation (constructor): the bootstrap (bootstrap.h) all-gathers each rank's pid, device and config;
// rank 0 creates a shared-memory segment (shared_segment.h) that every process maps; the CUDA executor
// registers the segment's flag area with the GPU and maps the peers' scratch; then the segment's name is
// unlinked and the sockets are closed. What remains for the communicator's life is one mapping per process.
//
// Segment layout (all offsets fixed at creation):
//   Header       magic, sizes, the shared error word (the first rank that fails writes code + reason there;
//                every rank reports it from then on: concclCommGetAsyncError, and its next call fails)
//   RankShared   per rank: pid, departed (destroyed or aborted), consumed (calls read from the mailboxes)
//   flags        per rank: the executor's flags (uint32), written by peers' GPUs with stream memory ops
//   mailboxes    per rank: a ring of kRingEntries MailboxEntry, each followed by the AllToAllv vectors
//
// A collective call: the rank checks its own buffers, exports them (CUDA IPC, cached per allocation),
// publishes its arguments in its ring slot seq % kRingEntries, waits until every peer has published seq,
// validates (clique.h's assembleCall: the same checks and messages as a local clique), maps the peers'
// buffers (cached), builds the schedule and launches its own program. The host waits for the peers to *call*
// the collective (as a local clique does), never for GPU work. A slot is reused only after every rank has
// consumed it, and a rank that failed a check publishes its error so that every rank fails the call the same way.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/bootstrap.h"
#include "core/clique.h"
#include "core/shared_segment.h"

namespace conccl {

class ProcessClique final : public Clique {
 public:
  // Blocks until every rank arrived (bounded by config.timeoutMs). `device`: this rank's CUDA device.
  ProcessClique(const Config& config, const UniqueIdData& id, int rank, int nranks, int device);
  ~ProcessClique() override;

  int nranks() const override { return nranks_; }
  const Config& config() const override { return config_; }
  exec::Executor& executor() override { return *executor_; }
  int rank() const { return rank_; }

  std::shared_ptr<CallTicket> post(int rank, RankArgs args) override;
  void waitAndLaunch(CallTicket& ticket) override;
  void fail(concclResult_t code, const std::string& reason) override;
  std::optional<Error> asyncError() const override;
  void abandon(CallTicket& ticket) override;
  void releaseRank(int rank, bool graceful) override;

  struct Layout;  // process_clique.cc

 private:
  void checkHealthy() const;
  // Blocks until `ready()` or a failure: the shared error word, `peer` departed (destroyed or aborted) or dead,
  // the deadline. `peer` and `what` name the wait in messages.
  template <typename Ready>
  void waitFor(Ready ready, int peer, const std::string& what);

  Config config_;
  int rank_ = 0;
  int nranks_ = 0;
  int device_ = -1;
  std::string tag_;
  std::vector<int64_t> pids_;
  SharedSegment segment_;  // before executor_: the executor's registered flags live in it
  std::unique_ptr<Layout> layout_;
  std::unique_ptr<exec::Executor> executor_;
  std::unique_ptr<ScheduleCache> schedules_;  // made with the executor's options
  uint64_t nextSeq_ = 0;
  mutable std::mutex mutex_;  // error_
  std::optional<Error> error_;
};

}  // namespace conccl
