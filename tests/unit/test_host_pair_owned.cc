// Pair-owned movement schedules (sched::CollectiveCall::pairOwner) run, not only proven: each rank's program on the
// host executor (a thread per rank, real memory), several calls back to back on one executor with a different
// ownership each time (the flags of one call's handshakes reused by the next), results compared with the collective's
// definition on fresh random data.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "exec/executor.h"
#include "sched/schedule.h"
#include "test_sched_util.h"

namespace conccl {
namespace {

using sched::CollKind;
using sched::CollectiveCall;

// Every rank's buffers of one call, filled with fresh random floats (outputs with a poison value).
struct Buffers {
  std::vector<std::vector<std::vector<float>>> bytes;  // [rank][buffer index] -> elements
  exec::CallBinding binding;

  Buffers(const CollectiveCall& call, std::mt19937& rng) {
    const auto n = static_cast<size_t>(call.nranks);
    bytes.resize(n);
    binding.buffers.resize(n);
    binding.streams.assign(n, nullptr);
    std::uniform_real_distribution<float> value(-100.0f, 100.0f);
    for (size_t r = 0; r < n; ++r) {
      const std::vector<size_t> sizes = sched::bufferBytes(call, static_cast<int>(r));
      for (size_t b = 0; b < sizes.size(); ++b) {
        std::vector<float> v(sizes[b] / sizeof(float));
        for (float& x : v) x = b == 0 ? value(rng) : -12345.0f;
        bytes[r].push_back(std::move(v));
      }
      for (auto& v : bytes[r]) binding.buffers[r].push_back(v.empty() ? nullptr : v.data());
    }
  }
  const std::vector<float>& send(int r) const { return bytes[static_cast<size_t>(r)][0]; }
  const std::vector<float>& recv(int r) const { return bytes[static_cast<size_t>(r)][1]; }
};

// The expected recvbuff of every rank, from the sendbuffs.
std::vector<float> expected(const CollectiveCall& call, const Buffers& b, int r) {
  const int n = call.nranks;
  const size_t c = call.count;
  std::vector<float> want;
  switch (call.kind) {
    case CollKind::kAllGather:
      for (int p = 0; p < n; ++p) want.insert(want.end(), b.send(p).begin(), b.send(p).end());
      break;
    case CollKind::kBroadcast:
      want = b.send(call.root);
      break;
    case CollKind::kScatter:
      want.assign(b.send(call.root).begin() + static_cast<long>(static_cast<size_t>(r) * c),
                  b.send(call.root).begin() + static_cast<long>(static_cast<size_t>(r + 1) * c));
      break;
    case CollKind::kGather:
      if (r != call.root) break;  // only the root receives
      for (int p = 0; p < n; ++p) want.insert(want.end(), b.send(p).begin(), b.send(p).end());
      break;
    case CollKind::kAllToAll:
      for (int p = 0; p < n; ++p) {
        want.insert(want.end(), b.send(p).begin() + static_cast<long>(static_cast<size_t>(r) * c),
                    b.send(p).begin() + static_cast<long>(static_cast<size_t>(r + 1) * c));
      }
      break;
    default:
      ADD_FAILURE() << "no reference for " << sched::collKindName(call.kind);
  }
  return want;
}

// engine = copy: own blocks through peers (echoed back by, or bounced through the scratch of, the next rank, moved by
// that pair's owner: sched::detail::emitPairOwned), on the same executor as the calls before.
class HostPairOwned : public ::testing::TestWithParam<concclEngine_t> {};

TEST_P(HostPairOwned, MovementCollectivesRunCorrectlyWithAChangingOwnershipBackToBack) {
  std::mt19937 rng(20261204);
  Config config;
  config.engine = GetParam();
  for (int n : {2, 3, 4}) {
    const std::unique_ptr<exec::Executor> executor = exec::makeHostExecutor(n, config);
    ASSERT_EQ(executor->buildOptions().ownBlockViaPeer, GetParam() == concclEngineCopy);
    for (CollKind kind : {CollKind::kAllGather, CollKind::kBroadcast, CollKind::kScatter, CollKind::kAllToAll,
                          CollKind::kGather}) {
      for (int call = 0; call < 4; ++call) {
        const size_t count = call % 2 == 0 ? 1000 : 70000;  // the large one is split across lanes
        CollectiveCall c = sched::testing::makeCall(kind, n, count, concclFloat32, concclSum,
                                                    static_cast<int>(rng() % static_cast<unsigned>(n)), false);
        c.pairOwner = sched::testing::randomPairOwners(n, rng);
        const sched::Schedule s = sched::buildSchedule(c, executor->buildOptions());
        ASSERT_EQ(s.algorithm, "pair-owned");
        Buffers b(c, rng);
        std::vector<std::thread> ranks;
        for (int r = 0; r < n; ++r) ranks.emplace_back([&, r] { executor->launch(s, b.binding, r); });
        for (auto& t : ranks) t.join();
        for (int r = 0; r < n; ++r) {
          if (kind == CollKind::kBroadcast && r == c.root && b.recv(r).empty()) continue;
          const std::vector<float> want = expected(c, b, r);
          ASSERT_EQ(b.recv(r).size(), want.size());
          if (want.empty()) continue;  // a Gather's non-root receives nothing
          EXPECT_EQ(std::memcmp(b.recv(r).data(), want.data(), want.size() * sizeof(float)), 0)
              << sched::collKindName(kind) << " n=" << n << " call " << call << " rank " << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, HostPairOwned, ::testing::Values(concclEngineAuto, concclEngineCopy),
                         [](const ::testing::TestParamInfo<concclEngine_t>& i) {
                           return std::string(i.param == concclEngineCopy ? "OwnBlocksThroughPeers" : "Default");
                         });

}  // namespace
}  // namespace conccl
