// libconccl_nccl.so's locality per communicator, end to end on the CPU: one process makes the id with the shim's
// ncclGetUniqueId (a rendezvous id), then every rank is a process of its own (this binary run again, with
// NCCL_HOSTID / CONCCL_HOSTID placing it on a simulated node) calling the shim's ncclCommInitRank, with the fake NCCL
// (fake_nccl.cc) as the real one. Ranks across hosts must reach the fake's ncclCommInitRankConfig with the id the
// fake's ncclGetUniqueId made at the root (first byte 0xAB) and their own rank; ranks on one host must take the
// conccl path (on a machine without a GPU conccl's init then fails, and its message says it was conccl's).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nccl/fake_nccl.h"

extern char** environ;

namespace {

constexpr uint64_t kRendezvousIdTag = 0x43434c5348523031ull;  // routing.h

void* openShim() {
  setenv("CONCCL_NCCL_REAL_LIB", FAKE_NCCL_PATH, 1);
  unsetenv("CONCCL_NCCL_SHIM");
  void* h = dlopen(CONCCL_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  return h;
}

template <class Fn>
Fn shimFn(void* shim, const char* name) {
  return reinterpret_cast<Fn>(dlsym(shim, name));
}
#define SHIM(h, name) shimFn<decltype(&::name)>(h, #name)

std::string toHex(const ncclUniqueId& id) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : id.internal) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

ncclUniqueId fromHex(const std::string& s) {
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    id.internal[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  }
  return id;
}

// Runs this binary as rank `rank` with extra environment; returns its pid.
pid_t spawnRank(const std::map<std::string, std::string>& env) {
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string v = *e;
    std::string name = v.substr(0, v.find('='));
    if (env.count(name) == 0) vars.push_back(v);
  }
  for (auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=NcclShimLocalityRank.*";
  std::string brief = "--gtest_brief=1";  // a child prints only its failures
  char* argv[] = {self.data(), filter.data(), brief.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  return pid;
}

// Waits for every pid (at most `limit`, then kills the rest); true when all exited 0.
bool waitAll(const std::vector<pid_t>& pids, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (true) {
      pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ok = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

int countNodes(int n, const std::function<std::string(int)>& hostOf) {
  std::map<std::string, int> hosts;
  for (int r = 0; r < n; ++r) hosts[hostOf(r)] = 1;
  return static_cast<int>(hosts.size());
}

class NcclShimLocality : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shim_ = openShim();
    ASSERT_NE(shim_, nullptr) << dlerror();
  }
  static ncclUniqueId makeId() {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    EXPECT_EQ(SHIM(shim_, ncclGetUniqueId)(&id), ncclSuccess);
    uint64_t tail = 0;
    std::memcpy(&tail, id.internal + NCCL_UNIQUE_ID_BYTES - 8, 8);
    EXPECT_EQ(tail, kRendezvousIdTag);
    return id;
  }
  // Ranks [0, n) unless `ranks` says which; host of rank r: hostOf(r).
  static bool runLayout(const ncclUniqueId& id, int n, const char* expect,
                        const std::function<std::string(int)>& hostOf,
                        const char* hostVar = "NCCL_HOSTID", std::vector<int> ranks = {},
                        const std::string& expectMessage = "") {
    if (ranks.empty()) {
      for (int r = 0; r < n; ++r) ranks.push_back(r);
    }
    std::vector<pid_t> pids;
    for (int r : ranks) {
      std::map<std::string, std::string> env = {{"CONCCL_LOC_CHILD", "1"},
                                                {"CONCCL_LOC_ID", toHex(id)},
                                                {"CONCCL_LOC_RANK", std::to_string(r)},
                                                {"CONCCL_LOC_NRANKS", std::to_string(n)},
                                                {"CONCCL_LOC_EXPECT", expect},
                                                {"CONCCL_LOC_MESSAGE", expectMessage},
                                                {"CONCCL_TIMEOUT_MS", "20000"},
                                                {"CONCCL_LOC_NODES", std::to_string(countNodes(n, hostOf))},
                                                {hostVar, hostOf(r)}};
      pids.push_back(spawnRank(env));
      if (pids.back() < 0) return false;
    }
    return waitAll(pids, std::chrono::seconds(60));
  }
  static void* shim_;
};
void* NcclShimLocality::shim_ = nullptr;

TEST_F(NcclShimLocality, EvenSimulatedNodesGetAFlatARailAndAnIntraNodeCommunicator) {
  for (auto [nodes, perNode] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(perNode));
    ncclUniqueId id = makeId();
    const int pn = perNode;
    EXPECT_TRUE(runLayout(id, nodes * perNode, "hier", [pn](int r) { return "node" + std::to_string(r / pn); }));
  }
}

TEST_F(NcclShimLocality, RanksNotNodeMajorMapToNodeAndLocalIndexFromTheHosts) {
  // Round robin: rank r on node r % 2, so its rail rank (node) is r % 2 and its local index r / 2.
  ncclUniqueId id = makeId();
  EXPECT_TRUE(runLayout(id, 6, "hier-rr", [](int r) { return "node" + std::to_string(r % 2); }));
}

TEST_F(NcclShimLocality, UnevenRanksPerHostGoToTheRealNcclWithTheRootsNcclId) {
  // 3 ranks on one host, 1 on another: no even layout, the whole communicator on the real NCCL (and the log says why).
  ncclUniqueId id = makeId();
  EXPECT_TRUE(runLayout(id, 4, "nccl", [](int r) { return std::string(r < 3 ? "node0" : "node1"); }));
}

TEST_F(NcclShimLocality, RanksOnOneHostTakeConcclWhateverTheJobsSize) {
  setenv("WORLD_SIZE", "16", 1);  // the launcher's view no longer decides
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  ncclUniqueId id = makeId();
  EXPECT_TRUE(runLayout(id, 3, "conccl", [](int) { return std::string("node0"); }));
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_WORLD_SIZE");
}

TEST_F(NcclShimLocality, ConcclHostIdWinsOverNcclHostId) {
  // NCCL_HOSTID differs per rank, CONCCL_HOSTID is the same: one host for the shim.
  ncclUniqueId id = makeId();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawnRank({{"CONCCL_LOC_CHILD", "1"},
                              {"CONCCL_LOC_ID", toHex(id)},
                              {"CONCCL_LOC_RANK", std::to_string(r)},
                              {"CONCCL_LOC_NRANKS", "2"},
                              {"CONCCL_LOC_EXPECT", "conccl"},
                              {"CONCCL_TIMEOUT_MS", "20000"},
                              {"NCCL_HOSTID", "n" + std::to_string(r)},
                              {"CONCCL_HOSTID", "same"}}));
  }
  EXPECT_TRUE(waitAll(pids, std::chrono::seconds(60)));
}

TEST_F(NcclShimLocality, ARankThatNeverArrivesFailsTheOthersWithinTheTimeout) {
  setenv("CONCCL_TIMEOUT_MS", "1500", 1);  // read by ncclGetUniqueId: the root's bound, carried in the id
  ncclUniqueId id = makeId();
  unsetenv("CONCCL_TIMEOUT_MS");
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(runLayout(id, 3, "fail", [](int r) { return "node" + std::to_string(r); }, "NCCL_HOSTID", {0, 2},
                        "rank 1 (1 of 3) did not reach the rendezvous"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST_F(NcclShimLocality, AnIdWithAWrongSecretIsRefused) {
  ncclUniqueId id = makeId();
  id.internal[20] ^= 0x40;  // a byte of the secret (rendezvous.cc: bytes 16..31)
  EXPECT_TRUE(runLayout(id, 2, "fail", [](int) { return std::string("node0"); }, "NCCL_HOSTID", {0}, "refused"));
}

// One rank, run as a child process by the tests above (skipped when run directly).
TEST(NcclShimLocalityRank, Rank) {
  const char* child = std::getenv("CONCCL_LOC_CHILD");
  if (child == nullptr) GTEST_SKIP() << "run by NcclShimLocality as a child process";
  void* shim = openShim();
  ASSERT_NE(shim, nullptr) << dlerror();
  void* fake = dlopen(FAKE_NCCL_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(fake, nullptr);
  auto record = reinterpret_cast<FakeNcclRecord* (*)()>(dlsym(fake, "fakeNcclRecord"))();
  const int rank = std::atoi(std::getenv("CONCCL_LOC_RANK"));
  const int nranks = std::atoi(std::getenv("CONCCL_LOC_NRANKS"));
  const std::string expect = std::getenv("CONCCL_LOC_EXPECT");
  const char* message = std::getenv("CONCCL_LOC_MESSAGE");
  ncclUniqueId id = fromHex(std::getenv("CONCCL_LOC_ID"));
  ncclComm_t comm = nullptr;
  ncclResult_t r = SHIM(shim, ncclCommInitRank)(&comm, nranks, id, rank);
  const std::string lastError = SHIM(shim, ncclGetLastError)(nullptr);
  if (expect == "hier" || expect == "hier-rr") {
    // Hosts from NCCL_HOSTID=node<k>: the first init is the flat communicator (all ranks, the root's first NCCL id),
    // the second the rail of this rank's local index (ranked by node, the root's id for that rail).
    const std::string host = std::getenv("NCCL_HOSTID");
    const int node = std::atoi(host.c_str() + 4);  // "node<k>"; nodes are numbered by their lowest rank here
    const int nodes = std::atoi(std::getenv("CONCCL_LOC_NODES"));
    const int perNode = nranks / nodes;
    const int local = expect == "hier" ? rank % perNode : rank / nodes;  // node-major, or round robin
    ASSERT_GE(record->inits, 2) << lastError;
    EXPECT_EQ(record->initNranks[0], nranks);
    EXPECT_EQ(record->initRank[0], rank);
    EXPECT_EQ(record->initNranks[1], nodes);
    EXPECT_EQ(record->initRank[1], node);
    // The root made the flat id first, then one per rail in local order.
    EXPECT_EQ(static_cast<int>(static_cast<unsigned char>(record->initIdByte16[1] - record->initIdByte16[0])),
              1 + local);
    if (r == ncclSuccess) {
      EXPECT_EQ(SHIM(shim, ncclCommDestroy)(comm), ncclSuccess);
    } else {
      // Without a GPU conccl's init of the node's communicator fails; the flat and rail ones are destroyed again.
      EXPECT_NE(lastError.find("intra-node communicator on conccl"), std::string::npos) << lastError;
      EXPECT_EQ(record->destroys, 2);
    }
  } else if (expect == "nccl") {
    ASSERT_EQ(r, ncclSuccess) << lastError;
    EXPECT_STREQ(record->lastCall, "ncclCommInitRankConfig");
    EXPECT_EQ(record->idByte0, 0xAB);  // the id the root's real (fake) ncclGetUniqueId made
    EXPECT_EQ(record->nranks, nranks);
    EXPECT_EQ(record->rank, rank);
    EXPECT_EQ(SHIM(shim, ncclCommDestroy)(comm), ncclSuccess);
  } else if (expect == "conccl") {
    // The fake never saw an init; conccl's did run (and, without a GPU, failed saying so).
    EXPECT_STRNE(record->lastCall, "ncclCommInitRankConfig");
    if (r == ncclSuccess) {
      EXPECT_EQ(SHIM(shim, ncclCommDestroy)(comm), ncclSuccess);
    } else {
      EXPECT_NE(lastError.find("on conccl"), std::string::npos) << lastError;
    }
  } else {
    EXPECT_NE(r, ncclSuccess);
    EXPECT_NE(lastError.find(message ? message : ""), std::string::npos) << lastError;
    EXPECT_STRNE(record->lastCall, "ncclCommInitRankConfig");
  }
}

}  // namespace
