// The C API across hosts on the CPU (api/cross_node.h): when concclGetUniqueId starts a rendezvous, the id's layout,
// the root's hierarchical answer and its reading on every rank, and a whole communicator across hosts on the flat
// path with ranks as threads (each told its host) over a fake real NCCL (fake_nccl.cc, which records its calls).
// The hierarchical path's GPU side is test_gpu_multiprocess's CrossNode tests.
#include <conccl/conccl.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/cross_node.h"
#include "base/error.h"
#include "core/bootstrap.h"
#include "nccl/fake_nccl.h"
#include "nccl/hier_answer.h"
#include "nccl/nccl_abi.h"
#include "nccl/type_map.h"

namespace conccl::test {
namespace {

using Env = std::map<std::string, std::string>;
nccl::EnvLookup lookupIn(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

TEST(CrossNodeRendezvous, WhenTheIdCarriesARendezvous) {
  std::string why;
  EXPECT_FALSE(api::wantsRendezvous(lookupIn({}), &why)) << why;
  EXPECT_TRUE(api::wantsRendezvous(lookupIn({{"CONCCL_RENDEZVOUS", "1"}}), &why));
  EXPECT_FALSE(api::wantsRendezvous(lookupIn({{"CONCCL_RENDEZVOUS", "0"}, {"CONCCL_HOSTID", "a"}}), &why));
  EXPECT_TRUE(api::wantsRendezvous(lookupIn({{"CONCCL_HOSTID", "a"}}), &why));
  EXPECT_NE(why.find("CONCCL_HOSTID"), std::string::npos) << why;
  EXPECT_TRUE(api::wantsRendezvous(lookupIn({{"NCCL_HOSTID", "b"}}), &why));
  EXPECT_TRUE(api::wantsRendezvous(lookupIn({{"WORLD_SIZE", "16"}, {"LOCAL_WORLD_SIZE", "8"}}), &why));
  EXPECT_FALSE(api::wantsRendezvous(lookupIn({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "8"}}), &why));
  EXPECT_THROW(api::wantsRendezvous(lookupIn({{"CONCCL_RENDEZVOUS", "yes"}}), &why), Error);
}

// Sets CONCCL_RENDEZVOUS for one test.
struct RendezvousSwitch {
  explicit RendezvousSwitch(const char* v) { setenv("CONCCL_RENDEZVOUS", v, 1); }
  ~RendezvousSwitch() { unsetenv("CONCCL_RENDEZVOUS"); }
};

TEST(CrossNodeRendezvous, IdWithARendezvousKeepsItsLocalPartAndTheDropInsMark) {
  concclUniqueId plain{}, met{};
  {
    RendezvousSwitch off("0");
    ASSERT_EQ(concclGetUniqueId(&plain), concclSuccess) << concclGetLastError(nullptr);
  }
  {
    RendezvousSwitch on("1");
    ASSERT_EQ(concclGetUniqueId(&met), concclSuccess) << concclGetLastError(nullptr);
  }
  EXPECT_FALSE(api::idHasRendezvous(plain));
  EXPECT_TRUE(api::idHasRendezvous(met));
  // Both are conccl ids (the local part parses); the last 8 bytes stay zero for the NCCL drop-in's mark.
  EXPECT_NO_THROW(parseUniqueId(plain));
  EXPECT_NO_THROW(parseUniqueId(met));
  for (int i = CONCCL_UNIQUE_ID_BYTES - 8; i < CONCCL_UNIQUE_ID_BYTES; ++i) EXPECT_EQ(met.internal[i], 0) << i;
  // A damaged rendezvous (port 0) is not one.
  concclUniqueId broken = met;
  std::memset(broken.internal + sizeof(UniqueIdData) + 8, 0, 2);
  EXPECT_FALSE(api::idHasRendezvous(broken));
  {
    RendezvousSwitch bad("sometimes");
    concclUniqueId id{};
    EXPECT_EQ(concclGetUniqueId(&id), concclInvalidArgument);
    EXPECT_NE(std::string(concclGetLastError(nullptr)).find("CONCCL_RENDEZVOUS"), std::string::npos);
  }
}

// A symbol of the fake NCCL the library loaded (by then).
void* dlsymFake(const char* name) {
  void* h = dlopen(FAKE_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
  return h != nullptr ? dlsym(h, name) : nullptr;
}

int fakeRailId(nccl::RailId* id) {
  static unsigned char made = 0;
  std::memset(id->internal, 0, sizeof(id->internal));
  id->internal[0] = static_cast<char>(++made);
  return 0;
}

TEST(CrossNodeAnswer, EveryRankReadsItsIdsFromTheRootsAnswer) {
  nccl::RailApi api;
  api.getUniqueId = fakeRailId;
  // Ranks interleaved over two hosts: node 0 = {0, 2}, node 1 = {1, 3}.
  const std::vector<uint64_t> hosts = {7, 9, 7, 9};
  std::string answer, why, error;
  ASSERT_TRUE(nccl::makeHierarchicalAnswer(hosts, 3, api, &answer, &why, &error)) << why << error;
  std::set<std::string> railIds, nodeIds;
  for (int r = 0; r < 4; ++r) {
    nccl::HierAnswer a = nccl::parseHierarchicalAnswer(answer, hosts, 4, r);
    ASSERT_TRUE(a.error.empty()) << a.error;
    EXPECT_EQ(a.layout.nodes, 2);
    EXPECT_EQ(a.layout.perNode, 2);
    EXPECT_FALSE(a.layout.nodeMajor);
    EXPECT_EQ(a.chunks, 3);
    ASSERT_EQ(a.nodeIds.size(), 2u);
    ASSERT_EQ(a.railIds.size(), 2u);
    for (const auto& id : a.nodeIds) nodeIds.insert(std::string(id.internal, sizeof(id.internal)));
    for (const auto& id : a.railIds) railIds.insert(std::string(id.internal, sizeof(id.internal)));
    EXPECT_NE(a.reason.find("2 nodes x 2 ranks"), std::string::npos) << a.reason;
  }
  EXPECT_EQ(nodeIds.size(), 2u) << "every rank must read the same two node ids";
  EXPECT_EQ(railIds.size(), 2u) << "every rank must read the same two rail ids";
  for (const std::string& id : nodeIds) {
    concclUniqueId cid;
    std::memcpy(cid.internal, id.data(), sizeof(cid.internal));
    EXPECT_NO_THROW(parseUniqueId(cid));
    EXPECT_FALSE(api::idHasRendezvous(cid)) << "a node's id must stay on its host";
  }
  // A rank whose view of the hosts differs, a rank outside, a cut answer: refused.
  EXPECT_FALSE(nccl::parseHierarchicalAnswer(answer, {7, 7, 9, 9, 9, 9}, 6, 0).error.empty());
  EXPECT_FALSE(nccl::parseHierarchicalAnswer(answer, hosts, 4, 4).error.empty());
  EXPECT_FALSE(nccl::parseHierarchicalAnswer(answer.substr(0, 200), hosts, 4, 0).error.empty());
  // Not hierarchical: one rank per host, uneven hosts.
  EXPECT_FALSE(nccl::makeHierarchicalAnswer({1, 2, 3}, 1, api, &answer, &why, &error));
  EXPECT_FALSE(nccl::makeHierarchicalAnswer({1, 1, 2}, 1, api, &answer, &why, &error));
  EXPECT_TRUE(error.empty()) << error;
}

TEST(CrossNodeTypes, EveryNcclTypeMapsBackToItself) {
  for (int t = 0; t < nccl::kNumTypes; ++t) {
    auto c = nccl::toConcclType(t);
    ASSERT_TRUE(c.has_value()) << t;
    EXPECT_EQ(nccl::toNcclType(*c), t);
  }
  // concclRedOp_t and ncclRedOp_t share the values of the five built-in ops.
  EXPECT_EQ(nccl::toConcclOp(nccl::kMax), concclMax);
  EXPECT_EQ(static_cast<int>(concclAvg), nccl::kAvg);
}

// Ranks 0 and 1 on host 11, rank 2 on host 22: uneven, so the communicator is the fake NCCL's flat one.
TEST(CrossNodeFlat, AnUnevenLayoutRunsOnTheRealNcclThroughTheCApi) {
  setenv("CONCCL_NCCL_REAL_LIB", FAKE_NCCL_PATH, 1);
  RendezvousSwitch on("1");
  concclUniqueId id{};
  ASSERT_EQ(concclGetUniqueId(&id), concclSuccess) << concclGetLastError(nullptr);
  const std::vector<uint64_t> hosts = {11, 11, 22};
  std::vector<concclComm_t> comms(3, nullptr);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[static_cast<size_t>(r)] = api::initThroughRendezvous(3, id, r, nullptr, hosts[static_cast<size_t>(r)]);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.message();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(errors[static_cast<size_t>(r)].empty()) << errors[static_cast<size_t>(r)];

  auto recordFn = reinterpret_cast<FakeNcclRecord* (*)()>(dlsymFake("fakeNcclRecord"));
  ASSERT_NE(recordFn, nullptr) << "the fake NCCL is not loaded";
  FakeNcclRecord* record = recordFn();
  int count = 0, rank = -1;
  ASSERT_EQ(concclCommCount(comms[2], &count), concclSuccess);
  ASSERT_EQ(concclCommUserRank(comms[2], &rank), concclSuccess);
  EXPECT_EQ(count, 3);
  EXPECT_EQ(rank, 2);
  // A collective: NCCL's type and op values, the caller's buffers and count.
  float a[4] = {}, b[4] = {};
  ASSERT_EQ(concclAllReduce(a, b, 4, concclBfloat16, concclMax, comms[1], nullptr), concclSuccess)
      << concclGetLastError(comms[1]);
  EXPECT_STREQ(record->lastCall, "ncclAllReduce");
  EXPECT_EQ(record->datatype, nccl::kBfloat16);
  EXPECT_EQ(record->op, nccl::kMax);
  EXPECT_EQ(record->count, 4u);
  EXPECT_EQ(record->sendbuff, a);
  // Send / receive, in a group: NCCL's group brackets them; matched by bytes (uint8).
  const int startsBefore = record->groupStarts, endsBefore = record->groupEnds;
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  ASSERT_EQ(concclSend(a, 4, concclFloat32, 2, comms[0], nullptr), concclSuccess) << concclGetLastError(comms[0]);
  EXPECT_EQ(record->count, 16u);
  EXPECT_EQ(record->datatype, nccl::kUint8);
  EXPECT_EQ(record->peer, 2);
  ASSERT_EQ(concclGroupEnd(), concclSuccess);
  EXPECT_EQ(record->groupStarts, startsBefore + 1);
  EXPECT_EQ(record->groupEnds, endsBefore + 1);
  // AllToAllv: one group of the real NCCL's sends and receives, zero counts skipped.
  {
    const size_t counts[3] = {2, 0, 1}, displs[3] = {0, 2, 2};
    const int sends = record->sends, recvs = record->recvs, starts = record->groupStarts;
    ASSERT_EQ(concclAllToAllv(a, counts, displs, b, counts, displs, concclFloat32, comms[1], nullptr), concclSuccess)
        << concclGetLastError(comms[1]);
    EXPECT_EQ(record->sends, sends + 2);
    EXPECT_EQ(record->recvs, recvs + 2);
    EXPECT_EQ(record->groupStarts, starts + 1);
    EXPECT_EQ(record->groupEnds, record->groupStarts - startsBefore + endsBefore);
  }
  // What only a one-host communicator has is refused with a reason, not crashed on.
  concclCallResources_t res{};
  EXPECT_EQ(concclCallResources(comms[0], concclCollAllReduce, 16, concclFloat32, 0, &res), concclNotSupported);
  concclWindow_t win = nullptr;
  EXPECT_EQ(concclCommWindowRegister(comms[0], a, sizeof(a), &win), concclNotSupported);
  concclResult_t async = concclInternalError;
  ASSERT_EQ(concclCommGetAsyncError(comms[0], &async), concclSuccess);
  EXPECT_EQ(async, concclSuccess);
  void* handle = nullptr;
  ASSERT_EQ(concclCommRegister(comms[0], a, sizeof(a), &handle), concclSuccess);
  EXPECT_EQ(concclCommDeregister(comms[0], handle), concclSuccess);
  const int destroysBefore = record->destroys, abortsBefore = record->aborts;
  EXPECT_EQ(concclCommDestroy(comms[0]), concclSuccess);
  EXPECT_EQ(concclCommDestroy(comms[1]), concclSuccess);
  EXPECT_EQ(concclCommAbort(comms[2]), concclSuccess);
  EXPECT_EQ(record->destroys, destroysBefore + 2);
  EXPECT_EQ(record->aborts, abortsBefore + 1);
  // The handle is gone.
  EXPECT_EQ(concclCommCount(comms[0], &count), concclInvalidUsage);
  unsetenv("CONCCL_NCCL_REAL_LIB");
}

}  // namespace
}  // namespace conccl::test
