// Multi-process communicators (concclCommInitRank): each test starts N processes of conccl_mp_worker (built
// next to this binary), all on the one GPU of the test machine when there is only one, and checks that every
// rank succeeded. The worker does the checking (results against a host reference, errors, what is left
// behind); this file launches, bounds the time, and reports the workers' stderr.
#include <conccl/conccl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_test_util.h"

extern char** environ;

namespace {

std::string workerPath() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "conccl_mp_worker";
  self[n] = '\0';
  std::string dir(self);
  return dir.substr(0, dir.rfind('/')) + "/conccl_mp_worker";
}

std::string hexId() {
  concclUniqueId id;
  EXPECT_EQ(concclGetUniqueId(&id), concclSuccess);
  std::string hex;
  char buf[3];
  for (char c : id.internal) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
    hex += buf;
  }
  return hex;
}

struct RankResult {
  int status = -1;  // exit code, or -signal, or -1000 if killed for overrunning
  std::string log;
};

// Sends `sig` to every thread of process `pid` (diagnostics of a hang: scripts/bt_on_signal.c prints a thread's
// backtrace on SIGUSR2, where it is LD_PRELOADed; without it SIGUSR2 is not sent, it would end the worker).
void signalEveryThread(pid_t pid, int sig) {
  if (std::getenv("LD_PRELOAD") == nullptr) return;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const int tid = std::atoi(e->d_name);
      if (tid > 0) syscall(SYS_tgkill, pid, tid, sig);
    }
    closedir(d);
  }
}

// Starts ranks `launch` of an nranks communicator (default: all) and waits at most `limitS` seconds. rankEnv[r]:
// "NAME=value" entries added to rank r's environment.
std::vector<RankResult> runWorkers(const std::string& scenario, int nranks, int timeoutMs, int limitS,
                                   std::vector<int> launch = {}, const std::vector<std::vector<std::string>>& rankEnv = {}) {
  if (launch.empty()) {
    for (int r = 0; r < nranks; ++r) launch.push_back(r);
  }
  // CONCCL_TEST_WORKER_LIMIT_S caps the limit, so that a run with a wall-clock budget still reads the workers' logs
  // of a hang (a device call's own timeout kills the test before it reports).
  if (const char* cap = std::getenv("CONCCL_TEST_WORKER_LIMIT_S"); cap != nullptr && std::atoi(cap) > 0) {
    limitS = std::min(limitS, std::atoi(cap));
  }
  const std::string worker = workerPath();
  const std::string id = hexId();
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r : launch) {
    std::string log = "/tmp/conccl_mp_" + std::to_string(getpid()) + "_" + scenario + "_" + std::to_string(r) + ".log";
    logs.push_back(log);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {
        worker, scenario, std::to_string(nranks), std::to_string(r), id, std::to_string(timeoutMs)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envStore;
    for (char** e = environ; *e != nullptr; ++e) envStore.emplace_back(*e);
    if (static_cast<size_t>(r) < rankEnv.size()) {
      for (const std::string& kv : rankEnv[static_cast<size_t>(r)]) envStore.push_back(kv);
    }
    std::vector<char*> envp;
    for (auto& e : envStore) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, worker.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "cannot start " << worker;
    pids.push_back(rc == 0 ? pid : -1);
  }
  std::vector<RankResult> results(launch.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limitS);
  size_t left = launch.size();
  std::vector<bool> done(launch.size(), false);
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      if (pids[i] < 0) {
        done[i] = true;
        --left;
        continue;
      }
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        results[i].status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        done[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << scenario << ": workers still running after " << limitS << " s (killed)";
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) signalEveryThread(pids[i], SIGUSR2);  // a backtrace per thread where libbt_on_signal is loaded
      }
      if (std::getenv("LD_PRELOAD") != nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        kill(pids[i], SIGKILL);
        waitpid(pids[i], nullptr, 0);
        results[i].status = -1000;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < logs.size(); ++i) {
    std::ifstream in(logs[i]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[i].log = ss.str();
    std::remove(logs[i].c_str());
  }
  return results;
}

void expectAllSucceeded(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].status, 0) << "rank " << r << (results[r].status == -1000 ? " HUNG (killed)" : "")
                                    << ", stderr:\n"
                                    << results[r].log;
  }
}

class MultiProcess : public ::testing::TestWithParam<int> {};

// Every collective, AllToAllv, hot calls, CUDA graphs replayed with fresh inputs, and graphs whose buffers are
// allocated inside the capture (a graph's memory, as PyTorch's cudaMallocAsync backend hands it out under
// torch.cuda.graph) at 16 KiB and 12 MiB a rank (conccl_mp_worker.cc, "collectives").
TEST_P(MultiProcess, EveryCollectiveMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("collectives", GetParam(), 60000, 240);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// The same cases on the regular path (CONCCL_STAGED_MAX_BYTES=0: every call waits for its peers' buffer addresses);
// the test above stages them all (they are at most 4 MiB).
TEST_P(MultiProcess, EveryCollectiveMatchesTheReferenceUnstaged) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("collectives-unstaged", GetParam(), 60000, 240);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// Staged calls on ordinary buffers return before the peers call (no host rendezvous); scenario_staged.h.
TEST_P(MultiProcess, StagedCallsDoNotWaitForPeers) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("no-rendezvous", GetParam(), 60000, 180);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// Late peers (the defaults: the late route at once; core/process_clique.h; scenario_deferred.h): with the peers 2 s
// late, rank 0's host time per call stays within CONCCL_TEST_MAX_HOST_US (default 20 us) for AllReduce calls back to
// back at 1 MiB, 64 MiB and 1 GiB (cudaMalloc memory; on cudaMallocAsync pool memory freed right after each call, the
// 1 MiB AllReduce, and 64 MiB / 1 GiB AllReduce, AllGather, ReduceScatter reported), and within
// CONCCL_TEST_MAX_COLD_HOST_US (250 us: a cold CPU, where the real NCCL
// takes 67-115 us) for one call a round and for every other collective, AllToAllv and Send/Recv, each the first of
// its shape; every result is right.
TEST_P(MultiProcess, CallsDoNotWaitForLatePeers) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("late-skew", GetParam(), 60000, 300);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// Late calls on the pair-owned route (data movement and reductions), the ranks arriving in a new order every call
// (conccl_mp_worker.cc, "pair-owned"): every result right.
TEST_P(MultiProcess, PairOwnedLateCallsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("pair-owned", GetParam(), 60000, 240);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// The same with deferred calls (CONCCL_DEFER_CALLS=1, core/process_clique_proxy.cc).
TEST_P(MultiProcess, DeferredCallsDoNotWaitForLatePeers) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("deferred-skew", GetParam(), 60000, 300);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// Calls on two communicators in different orders on different ranks (p2p on one, every collective kind on the other):
// valid under NCCL, so it must finish.
TEST_P(MultiProcess, CallsOnTwoCommunicatorsInDifferentOrdersFinish) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("cross-order", GetParam(), 60000, 300);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// VMM memory (PyTorch's expandable segments) and cudaMallocAsync pools at 16 and 64 MiB: staged, right.
TEST_P(MultiProcess, MemoryCudaIpcCannotShareWorksAtEverySize) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("memory-kinds", GetParam(), 60000, 300);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// VMM memory created shareable (a POSIX descriptor handle type, as PyTorch's expandable segments), mapped in 2 MiB
// pieces that every buffer crosses, with CONCCL_VMM_EXPORT=1: every collective, AllToAllv and Send/Recv move it
// directly (each rank maps its peers' buffers through their handle servers), right; pieces replaced under two buffers
// between rounds never leave a peer on the old memory (exec/cuda/vmm_export.h); a unit retired while late peers have
// still to map it for an earlier call stays served until they have (exec/retire_after_peers.h).
TEST_P(MultiProcess, ShareableVmmMemoryMovesDirectly) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("vmm-export", GetParam(), 60000, 300);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// Memory every rank frees after using it on two communicators goes back to CUDA within 5 s while one of them makes no
// further call (a subgroup used once; PyTorch's out-of-memory retry makes none either): the retirement log
// (src/core/retire_log.h). cudaMalloc memory (CUDA IPC mappings, shared by both communicators of a process) and
// shareable VMM memory (a unit per communicator, retained by its owner until its peers let go).
TEST_P(MultiProcess, FreedMemoryGoesBackWithoutFurtherCalls) {
  SKIP_WITHOUT_GPU();
  for (const char* scenario : {"memory-return", "memory-return-vmm"}) {
    auto results = runWorkers(scenario, GetParam(), 60000, 120);
    expectAllSucceeded(results);
    for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
  }
}

// A freed allocation's place used again at once on another communicator: the peers map the new allocation while the
// first communicator, idle since, still holds their mappings of the old one (CUDA maps a peer's memory once).
TEST_P(MultiProcess, FreedPlaceUsedAgainAtOnceOnAnotherCommunicator) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("address-reuse", GetParam(), 60000, 120);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// A peer killed (SIGKILL) while the survivors wait for it on the host (deferred) or on the GPU (staged, launched):
// every survivor sees the error within 1 s; nothing is left behind. The victim's status is the signal.
void expectKilledPeerReported(const char* scenario, int nranks) {
  auto results = runWorkers(scenario, nranks, 60000, 90);
  for (size_t r = 0; r + 1 < results.size(); ++r) {
    EXPECT_EQ(results[r].status, 0) << "rank " << r << ":\n" << results[r].log;
    std::fprintf(stderr, "%s", results[r].log.c_str());
  }
  EXPECT_EQ(results.back().status, -SIGKILL) << results.back().log;
}

TEST(MultiProcessDeferred, PeerKilledWhileWaitingOnTheHostIsReportedWithinOneSecond) {
  SKIP_WITHOUT_GPU();
  expectKilledPeerReported("deferred-kill", 3);
}

TEST(MultiProcessDeferred, PeerKilledWhileWaitingOnTheGpuIsReportedWithinOneSecond) {
  SKIP_WITHOUT_GPU();
  expectKilledPeerReported("deferred-kill-gpu", 3);
}

// A replay of a captured call waits on the GPU for a peer that is killed: conccl never saw the replay launched.
TEST(MultiProcessDeferred, PeerKilledDuringAGraphReplayIsReportedWithinOneSecond) {
  SKIP_WITHOUT_GPU();
  expectKilledPeerReported("graph-kill", 3);
}

// concclCommAbort from another thread while calls are deferred and the caller keeps calling.
TEST(MultiProcessDeferred, AbortFromAnotherThreadWithDeferredCalls) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("deferred-abort", 3, 60000, 90));
}

TEST(MultiProcessStaged, CountMismatchIsReportedOnEveryRank) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("staged-mismatch", 3, 20000, 90);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

TEST_P(MultiProcess, SendRecvAcrossProcesses) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("sendrecv", GetParam(), 60000, 180);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

TEST(MultiProcessErrors, SendRecvSizeMismatchFailsBothSides) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("sendrecv-mismatch", 2, 20000, 60));
}

TEST_P(MultiProcess, SymmetricWindowCallsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("symmetric", GetParam(), 60000, 240);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// concclReduceScatterChunked / concclAllGatherChunked with one process per rank (scenario_chunked.h).
TEST_P(MultiProcess, ChunkedCallsAcrossProcesses) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("chunked", GetParam(), 60000, 180);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

// A chunked and a plain reduce-scatter in one call: refused on every rank before anything launches (calls waiting
// on the host for their peers; with late calls staged the same mismatch is found after a launch: scenario_staged.h).
TEST_P(MultiProcess, ChunkedAndPlainCallsTogetherAreRefused) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("chunked-mismatch", GetParam(), 60000, 120);
  expectAllSucceeded(results);
  for (auto& r : results) std::fprintf(stderr, "%s", r.log.c_str());
}

INSTANTIATE_TEST_SUITE_P(Ranks, MultiProcess, ::testing::Values(2, 3, 4));

// Symmetric calls return before the peers call: the watchdog must still turn every failure into an error on
// every rank, and open the flags so that the streams drain.
TEST(MultiProcessSymmetric, OffsetMismatchIsReportedOnEveryRank) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("symmetric-mismatch", 3, 20000, 90));
}

TEST(MultiProcessSymmetric, HungPeerTimesOutAfterTheCallsReturned) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("symmetric-hung", 3, 1500, 60));
}

TEST(MultiProcessSymmetric, DeadPeerIsNoticedAfterTheCallsReturned) {
  SKIP_WITHOUT_GPU();
  auto results = runWorkers("symmetric-dead", 3, 30000, 60);
  for (size_t r = 0; r + 1 < results.size(); ++r) {
    EXPECT_EQ(results[r].status, 0) << "rank " << r << ":\n" << results[r].log;
  }
}

TEST(MultiProcessErrors, BadUsageIsReportedOnEveryRank) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("errors", 3, 30000, 120));
}

TEST(MultiProcessErrors, DeadPeerIsDetectedAndEveryoneAborts) {
  SKIP_WITHOUT_GPU();
  // A long timeout: the survivors must notice the exit itself, not wait for the timeout.
  auto results = runWorkers("dead-peer", 3, 30000, 60);
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].status, 0) << "rank " << r << ":\n" << results[r].log;
  }
}

TEST(MultiProcessErrors, HungPeerTimesOutAndEveryoneAborts) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("hung-peer", 2, 1500, 60));
}

// Issue 13, item 2: GPU work that never completes (one rank's stream stalled by work queued before the call)
// becomes concclTimeout on every process within about timeoutMs; abort then releases the streams.
TEST(MultiProcessErrors, StalledGpuWorkTimesOutOnEveryRank) {
  SKIP_WITHOUT_GPU();
  expectAllSucceeded(runWorkers("gpu-stall", 2, 2000, 60));
}

TEST(MultiProcessErrors, RankThatNeverArrivesFailsInitWithATimeout) {
  SKIP_WITHOUT_GPU();
  // Ranks 0 and 1 of 3 start; rank 2 never does.
  auto results = runWorkers("collectives", 3, 1000, 30, {0, 1});
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].status, 1) << results[r].log;
    EXPECT_NE(results[r].log.find("concclTimeout"), std::string::npos) << results[r].log;
  }
}

// concclCommInitRank from threads of one process (as the header allows): peers in the same process are reached
// without IPC, and the small-message kernel is allowed between them.
// ---- The C API across hosts (api/cross_node.h), hosts simulated on this machine ----
//
// Each worker is told its host by CONCCL_HOSTID and gets its own NCCL_HOSTID (the real NCCL refuses two ranks of one
// host on one GPU; with distinct host ids it talks over its socket transport on loopback). The id is made here with
// CONCCL_RENDEZVOUS=1, so this process is the rendezvous root, and its answer needs the real NCCL: CONCCL_NCCL_REAL_LIB,
// else libnccl.so.2 on the library path (a GPU machine without NCCL fails these tests).

struct CrossLayout {
  const char* name;
  std::vector<int> hostOf;  // [rank] -> simulated host
  const char* chunks;       // CONCCL_NCCL_HIER_CHUNKS at the root
};

// Sets a variable of this process for a scope (the root reads it when the ranks have met).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

std::vector<RankResult> runAcrossHosts(const std::string& scenario, const CrossLayout& l, int limitS) {
  ScopedEnv rendezvous("CONCCL_RENDEZVOUS", "1");
  ScopedEnv chunks("CONCCL_NCCL_HIER_CHUNKS", l.chunks);
  std::vector<std::vector<std::string>> env;
  for (size_t r = 0; r < l.hostOf.size(); ++r) {
    env.push_back({"CONCCL_HOSTID=sim-node-" + std::to_string(l.hostOf[r]),
                   "NCCL_HOSTID=sim-" + std::to_string(getpid()) + "-" + std::to_string(r), "NCCL_SOCKET_IFNAME=lo",
                   "NCCL_IB_DISABLE=1", "NCCL_NVLS_ENABLE=0", "CONCCL_RENDEZVOUS=0", "CONCCL_DEBUG=INFO"});
  }
  return runWorkers(scenario, static_cast<int>(l.hostOf.size()), 60000, limitS, {}, env);
}

// The lines of a worker's log (CONCCL_DEBUG=INFO) that say which path its calls took, for the test's output.
void printRouteLines(size_t rank, const std::string& log) {
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("hierarchical") != std::string::npos || line.find("flat NCCL") != std::string::npos ||
        line.find("one host") != std::string::npos || line.find("pipelined") != std::string::npos ||
        line.find("reported after") != std::string::npos || line.find("OK") != std::string::npos ||
        line.find("peers of this node") != std::string::npos) {
      std::printf("rank %zu: %s\n", rank, line.c_str());
    }
  }
}

class CrossNode : public ::testing::TestWithParam<CrossLayout> {};

TEST_P(CrossNode, EveryCollectiveThroughTheCApi) {
  SKIP_WITHOUT_GPU();
  const CrossLayout& l = GetParam();
  std::map<int, int> perHost;
  for (int h : l.hostOf) ++perHost[h];
  bool even = true;
  for (const auto& [h, n] : perHost) even = even && n == perHost.begin()->second;
  const bool acrossHosts = perHost.size() > 1;
  const bool hierarchical = acrossHosts && even && perHost.begin()->second >= 2;
  auto results = runAcrossHosts(acrossHosts ? "cross-node" : "cross-node-local", l, 300);
  expectAllSucceeded(results);
  // Every rank's log says which path it took (the library's INFO lines): the collectives that decompose ran in
  // phases on a hierarchical communicator, the flat NCCL one carried an uneven layout, conccl alone a single host.
  for (size_t r = 0; r < results.size(); ++r) {
    const std::string& log = results[r].log;
    printRouteLines(r, log);
    if (hierarchical) {
      for (const char* api : {"concclAllReduce", "concclAllGather", "concclReduceScatter", "concclBroadcast",
                              "concclReduce", "concclGather", "concclScatter"}) {
        EXPECT_NE(log.find(std::string(api) + ": hierarchical, "), std::string::npos)
            << "rank " << r << ": " << api << " never ran in phases";
      }
      // The Send/Recv ring: a rank with a ring neighbour on its own host moved that pair on conccl.
      const size_t n = l.hostOf.size();
      if (l.hostOf[(r + 1) % n] == l.hostOf[r] || l.hostOf[(r + n - 1) % n] == l.hostOf[r]) {
        EXPECT_NE(log.find("to peers of this node on conccl"), std::string::npos)
            << "rank " << r << ": its Send/Recv to a peer of its host did not run on conccl";
      }
      if (std::string(l.chunks) != "1") {
        EXPECT_NE(log.find("pipelined in"), std::string::npos) << "rank " << r << ": nothing was pipelined";
      }
    } else if (acrossHosts) {
      EXPECT_NE(log.find("flat NCCL across"), std::string::npos) << "rank " << r << ": not on the flat NCCL";
    } else {
      EXPECT_NE(log.find("on one host: conccl"), std::string::npos) << "rank " << r << ": not conccl alone";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CrossNode,
    ::testing::Values(CrossLayout{"n2x2_interleaved", {0, 1, 0, 1}, "1"},
                      CrossLayout{"n2x3", {0, 0, 0, 1, 1, 1}, "1"}, CrossLayout{"n3x2_pipelined", {0, 0, 1, 1, 2, 2}, "4"},
                      CrossLayout{"uneven_flat", {0, 0, 1}, "1"}, CrossLayout{"one_host", {0, 0, 0}, "1"}),
    [](const ::testing::TestParamInfo<CrossLayout>& p) { return std::string(p.param.name); });

TEST(CrossNodeFaults, DeadNodeIsReportedOnEveryRankWithinOneSecond) {
  SKIP_WITHOUT_GPU();
  const CrossLayout l{"n2x2", {0, 0, 1, 1}, "1"};
  auto results = runAcrossHosts("cross-node-kill", l, 120);
  for (size_t r = 0; r < results.size(); ++r) printRouteLines(r, results[r].log);
  for (size_t r = 0; r + 1 < results.size(); ++r) {
    EXPECT_EQ(results[r].status, 0) << "rank " << r << ", stderr:\n" << results[r].log;
  }
  EXPECT_EQ(results.back().status, 0) << "the rank that ends: " << results.back().log;
}

TEST(InitRankInOneProcess, ThreadsAsRanksWithTheSmallMessageKernelAndCopyEngines) {
  SKIP_WITHOUT_GPU();
  const int n = 2;
  concclUniqueId id;
  ASSERT_EQ(concclGetUniqueId(&id), concclSuccess);
  std::vector<std::string> failures(n);
  auto rankMain = [&](int rank) {
    auto fail = [&](const std::string& what) { failures[static_cast<size_t>(rank)] = what; };
    if (cudaSetDevice(0) != cudaSuccess) return fail("cudaSetDevice");
    concclComm_t comm = nullptr;
    concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
    config.timeoutMs = 30000;
    if (concclCommInitRankConfig(&comm, n, id, rank, &config) != concclSuccess) {
      return fail(std::string("init: ") + concclGetLastError(nullptr));
    }
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    // 1 Ki floats (small-message kernel) and 1 Mi floats (copy engines).
    for (size_t count : {size_t{1} << 10, size_t{1} << 20}) {
      void* raw = nullptr;
      if (cudaMalloc(&raw, count * sizeof(float)) != cudaSuccess) return fail("cudaMalloc");
      auto* buf = static_cast<float*>(raw);
      std::vector<float> host(count);
      for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 5);
      cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream);
      if (concclAllReduce(buf, buf, count, concclFloat32, concclSum, comm, stream) != concclSuccess) {
        return fail(std::string("allreduce: ") + concclGetLastError(comm));
      }
      cudaMemcpyAsync(host.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost, stream);
      if (cudaStreamSynchronize(stream) != cudaSuccess) return fail("sync");
      for (size_t i = 0; i < count; ++i) {
        const float want = 3.0f + 2.0f * static_cast<float>(i % 5);  // (1 + 2) + 2 * (i % 5)
        if (host[i] != want) return fail("element " + std::to_string(i) + " of " + std::to_string(count) + " wrong");
      }
      cudaFree(buf);
    }
    if (concclCommDestroy(comm) != concclSuccess) return fail("destroy");
    cudaStreamDestroy(stream);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(rankMain, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(failures[static_cast<size_t>(r)].empty()) << "rank " << r << ": " << failures[static_cast<size_t>(r)];
}

}  // namespace
