// Host backend under concurrency and groups: two cliques at once, many back-to-back calls, several collectives
// per rank in one (nested) group, Send/Recv with count 0 and mixed with collectives, in-place and out-of-place
// ranks in one call.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "common/host_driver.h"

namespace conccl::test {
namespace {

constexpr int kTimeoutMs = 20000;  // generous: only reached if a test is broken, then it fails instead of hanging

void destroyAll(const std::vector<concclComm_t>& comms) {
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess) << concclGetLastError(nullptr);
}

// In-place AllReduce(sum) of int32 on every rank, driven by one thread in a group.
concclResult_t groupAllReduce(const std::vector<concclComm_t>& comms, std::vector<std::vector<int32_t>>& bufs) {
  concclGroupStart();
  for (size_t r = 0; r < comms.size(); ++r) {
    concclResult_t res = concclAllReduce(bufs[r].data(), bufs[r].data(), bufs[r].size(), concclInt32, concclSum,
                                         comms[r], nullptr);
    if (res != concclSuccess) {
      concclGroupEnd();
      return res;
    }
  }
  return concclGroupEnd();
}

TEST(HostConcurrency, TwoCliquesFromDifferentThreads) {
  auto a = makeHostComms(2, kTimeoutMs);
  auto b = makeHostComms(3, kTimeoutMs);
  constexpr int kIters = 200;
  // One driver thread per clique (group-driven), at the same time.
  auto drive = [](const std::vector<concclComm_t>& comms, int salt, int* wrong) {
    const int n = static_cast<int>(comms.size());
    for (int it = 0; it < kIters; ++it) {
      std::vector<std::vector<int32_t>> bufs(n, std::vector<int32_t>(33));
      for (int r = 0; r < n; ++r) std::iota(bufs[r].begin(), bufs[r].end(), it * salt + r);
      if (groupAllReduce(comms, bufs) != concclSuccess) {
        ++*wrong;
        return;
      }
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < bufs[r].size(); ++i) {
          int32_t want = 0;
          for (int q = 0; q < n; ++q) want += it * salt + q + static_cast<int32_t>(i);
          if (bufs[r][i] != want) ++*wrong;
        }
      }
    }
  };
  int wrongA = 0, wrongB = 0;
  std::thread ta(drive, std::cref(a), 7, &wrongA), tb(drive, std::cref(b), 13, &wrongB);
  ta.join();
  tb.join();
  EXPECT_EQ(wrongA, 0);
  EXPECT_EQ(wrongB, 0);

  // One thread per rank of both cliques at once (5 threads), different collectives on each clique.
  std::vector<std::vector<float>> ag(2), rs(3);
  std::vector<concclResult_t> results(5, concclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> send(50, static_cast<float>(r + 1));
      ag[r].assign(100, 0.0f);
      for (int it = 0; it < 50 && (results[r] = concclAllGather(send.data(), ag[r].data(), 50, concclFloat32, a[r],
                                                                 nullptr)) == concclSuccess;
           ++it) {
      }
    });
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> send(30, 1.0f);
      rs[r].assign(10, 0.0f);
      for (int it = 0; it < 50 && (results[2 + r] = concclReduceScatter(send.data(), rs[r].data(), 10, concclFloat32,
                                                                        concclSum, b[r], nullptr)) == concclSuccess;
           ++it) {
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(results[i], concclSuccess) << i;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ag[r][0], 1.0f);
    EXPECT_EQ(ag[r][99], 2.0f);
  }
  for (int r = 0; r < 3; ++r) EXPECT_EQ(rs[r][9], 3.0f);

  // One group spanning both cliques, driven by one thread.
  std::vector<std::vector<int32_t>> bufA(2, std::vector<int32_t>(5, 1)), bufB(3, std::vector<int32_t>(5, 2));
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(concclAllReduce(bufB[r].data(), bufB[r].data(), 5, concclInt32, concclSum, b[r], nullptr), concclSuccess);
    if (r < 2) {
      ASSERT_EQ(concclAllReduce(bufA[r].data(), bufA[r].data(), 5, concclInt32, concclSum, a[r], nullptr),
                concclSuccess);
    }
  }
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(nullptr);
  EXPECT_EQ(bufA[1][4], 2);
  EXPECT_EQ(bufB[2][4], 6);
  destroyAll(a);
  destroyAll(b);
}

// 10,000 back-to-back small collectives on 2 ranks driven by one thread, 5 per group (each group end starts one
// launch thread per rank, so this also checks that group state, flags and scratch stay consistent over time).
TEST(HostConcurrency, TenThousandSmallCollectivesGroupDriven) {
  auto comms = makeHostComms(2, kTimeoutMs);
  constexpr int kCalls = 10000, kPerGroup = 5;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<std::vector<int32_t>>> bufs(kPerGroup, std::vector<std::vector<int32_t>>(2));
  for (int it = 0; it < kCalls; it += kPerGroup) {
    ASSERT_EQ(concclGroupStart(), concclSuccess);
    for (int k = 0; k < kPerGroup; ++k) {
      for (int r = 0; r < 2; ++r) {
        bufs[k][r] = {it + k, r, 1, -(it + k)};
        ASSERT_EQ(concclAllReduce(bufs[k][r].data(), bufs[k][r].data(), 4, concclInt32, concclSum, comms[r], nullptr),
                  concclSuccess);
      }
    }
    ASSERT_EQ(concclGroupEnd(), concclSuccess) << "call " << it << ": " << concclGetLastError(comms[0]);
    for (int k = 0; k < kPerGroup; ++k) {
      const int32_t v = it + k;
      for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(bufs[k][r], (std::vector<int32_t>{2 * v, 1, 2, -2 * v})) << "call " << v << " rank " << r;
      }
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  destroyAll(comms);
}

TEST(HostConcurrency, TenThousandSmallCollectivesThreadPerRank) {
  auto comms = makeHostComms(2, kTimeoutMs);
  constexpr int kCalls = 10000;
  std::vector<int> wrong(2, 0);
  auto results = forEachRank(2, Drive::kThreads, [&](int r) {
    std::vector<int32_t> send(3), recv(6);
    for (int it = 0; it < kCalls; ++it) {
      send = {it, r, -it};
      concclResult_t res = concclAllGather(send.data(), recv.data(), 3, concclInt32, comms[r], nullptr);
      if (res != concclSuccess) return res;
      if (recv != std::vector<int32_t>{it, 0, -it, it, 1, -it}) ++wrong[r];
    }
    return concclSuccess;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r], concclSuccess) << concclGetLastError(comms[r]);
    EXPECT_EQ(wrong[r], 0);
  }
  destroyAll(comms);
}

// Several different collectives per rank in one group, recorded through nested groups; the inner
// concclGroupEnd launches nothing.
TEST(HostGroups, SeveralCollectivesPerRankAndNestedGroups) {
  const int n = 3;
  auto comms = makeHostComms(n, kTimeoutMs);
  std::vector<std::vector<float>> arBuf(n), agSend(n), agRecv(n), bcBuf(n), rsSend(n), rsRecv(n), p2pSend(n),
      p2pRecv(n);
  for (int r = 0; r < n; ++r) {
    arBuf[r].assign(8, static_cast<float>(r + 1));
    agSend[r].assign(4, static_cast<float>(10 * r));
    agRecv[r].assign(4 * n, -1.0f);
    bcBuf[r].assign(6, r == 1 ? 42.0f : 0.0f);
    rsSend[r].assign(2 * n, 1.0f);
    rsRecv[r].assign(2, 0.0f);
    p2pSend[r].assign(5, static_cast<float>(100 + r));
    p2pRecv[r].assign(5, 0.0f);
  }
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(concclGroupStart(), concclSuccess);  // nested
    // Send/Recv recorded first on some ranks and last on others: they are fused and launched after the collectives.
    if (r % 2 == 0) {
      ASSERT_EQ(concclSend(p2pSend[r].data(), 5, concclFloat32, (r + 1) % n, comms[r], nullptr), concclSuccess);
    }
    ASSERT_EQ(concclAllReduce(arBuf[r].data(), arBuf[r].data(), 8, concclFloat32, concclSum, comms[r], nullptr),
              concclSuccess);
    ASSERT_EQ(concclAllGather(agSend[r].data(), agRecv[r].data(), 4, concclFloat32, comms[r], nullptr), concclSuccess);
    ASSERT_EQ(concclGroupStart(), concclSuccess);  // nested twice
    ASSERT_EQ(concclBroadcast(bcBuf[r].data(), bcBuf[r].data(), 6, concclFloat32, 1, comms[r], nullptr), concclSuccess);
    ASSERT_EQ(concclGroupEnd(), concclSuccess);
    ASSERT_EQ(concclReduceScatter(rsSend[r].data(), rsRecv[r].data(), 2, concclFloat32, concclMax, comms[r], nullptr),
              concclSuccess);
    ASSERT_EQ(concclRecv(p2pRecv[r].data(), 5, concclFloat32, (r + n - 1) % n, comms[r], nullptr), concclSuccess);
    if (r % 2 == 1) {
      ASSERT_EQ(concclSend(p2pSend[r].data(), 5, concclFloat32, (r + 1) % n, comms[r], nullptr), concclSuccess);
    }
    ASSERT_EQ(concclGroupEnd(), concclSuccess);
    EXPECT_EQ(arBuf[r][0], static_cast<float>(r + 1)) << "an inner concclGroupEnd launched work";
  }
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(arBuf[r][7], 6.0f);
    for (int q = 0; q < n; ++q) EXPECT_EQ(agRecv[r][4 * q + 3], static_cast<float>(10 * q));
    EXPECT_EQ(bcBuf[r][5], 42.0f);
    EXPECT_EQ(rsRecv[r][1], 1.0f);
    EXPECT_EQ(p2pRecv[r][4], static_cast<float>(100 + (r + n - 1) % n));
  }
  EXPECT_EQ(concclGroupEnd(), concclInvalidUsage);  // balanced again: one more end is an error
  destroyAll(comms);
}

// One thread per rank, each with its own group, recording Send/Recv and a collective in different orders on
// different ranks. Inside a group the order carries no meaning, so this must work (and must not mix up the two
// calls' flags and buffers).
TEST(HostGroups, ThreadPerRankGroupsWithP2PAndCollectivesInDifferentOrder) {
  auto comms = makeHostComms(2, 5000);
  for (int it = 0; it < 50; ++it) {
    std::vector<std::vector<int32_t>> ar(2), send(2), recv(2);
    for (int r = 0; r < 2; ++r) {
      ar[r].assign(64, r + 1);
      send[r].assign(64, 1000 * (r + 1) + it);
      recv[r].assign(64, 0);
    }
    auto results = forEachRank(2, Drive::kThreads, [&](int r) {
      int p = 1 - r;
      concclGroupStart();
      if (r == 0) {
        concclSend(send[r].data(), 64, concclInt32, p, comms[r], nullptr);
        concclRecv(recv[r].data(), 64, concclInt32, p, comms[r], nullptr);
        concclAllReduce(ar[r].data(), ar[r].data(), 64, concclInt32, concclSum, comms[r], nullptr);
      } else {
        concclAllReduce(ar[r].data(), ar[r].data(), 64, concclInt32, concclSum, comms[r], nullptr);
        concclRecv(recv[r].data(), 64, concclInt32, p, comms[r], nullptr);
        concclSend(send[r].data(), 64, concclInt32, p, comms[r], nullptr);
      }
      return concclGroupEnd();
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(results[r], concclSuccess) << "iteration " << it << ": " << concclGetLastError(comms[r]);
      ASSERT_EQ(ar[r][63], 3);
      ASSERT_EQ(recv[r][0], 1000 * (2 - r) + it);
    }
  }
  destroyAll(comms);
}

TEST(HostSendRecvEdge, CountZero) {
  auto comms = makeHostComms(2, kTimeoutMs);
  // In a group, NULL buffers, count 0 both ways.
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(concclSend(nullptr, 0, concclFloat32, 1 - r, comms[r], nullptr), concclSuccess);
    ASSERT_EQ(concclRecv(nullptr, 0, concclFloat32, 1 - r, comms[r], nullptr), concclSuccess);
  }
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(nullptr);

  // Blocking, one thread per rank, with a valid pointer and count 0, then a count-0 op next to a real one.
  float x = 1.0f, y = 0.0f;
  auto results = forEachRank(2, Drive::kThreads, [&](int r) {
    return r == 0 ? concclSend(&x, 0, concclFloat32, 1, comms[0], nullptr)
                  : concclRecv(&y, 0, concclFloat32, 0, comms[1], nullptr);
  });
  EXPECT_EQ(results[0], concclSuccess) << concclGetLastError(comms[0]);
  EXPECT_EQ(results[1], concclSuccess) << concclGetLastError(comms[1]);
  EXPECT_EQ(y, 0.0f);
  results = forEachRank(2, Drive::kThreads, [&](int r) {
    concclGroupStart();
    if (r == 0) {
      concclSend(nullptr, 0, concclInt8, 1, comms[0], nullptr);
      concclSend(&x, 1, concclFloat32, 1, comms[0], nullptr);
    } else {
      concclRecv(nullptr, 0, concclInt8, 0, comms[1], nullptr);
      concclRecv(&y, 1, concclFloat32, 0, comms[1], nullptr);
    }
    return concclGroupEnd();
  });
  EXPECT_EQ(results[0], concclSuccess) << concclGetLastError(comms[0]);
  EXPECT_EQ(results[1], concclSuccess) << concclGetLastError(comms[1]);
  EXPECT_EQ(y, 1.0f);
  // Self send of count 0.
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  ASSERT_EQ(concclSend(nullptr, 0, concclFloat32, 0, comms[0], nullptr), concclSuccess);
  ASSERT_EQ(concclRecv(nullptr, 0, concclFloat32, 0, comms[0], nullptr), concclSuccess);
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(nullptr);
  destroyAll(comms);
}

// Some ranks call in place and others out of place in the same call: every collective with an in-place form,
// several counts, both drive modes.
TEST(HostInPlaceMix, MixedAcrossRanks) {
  const Coll colls[] = {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kGather,        Coll::kScatter};
  for (int n : {2, 3, 4}) {
    auto comms = makeHostComms(n, kTimeoutMs, size_t{64} << 10);  // small scratch: pipelined paths too
    for (Coll c : colls) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{20000}}) {
        for (int pattern = 0; pattern < 2; ++pattern) {
          std::vector<bool> inPlace(n);
          for (int r = 0; r < n; ++r) inPlace[r] = (r % 2) == pattern;
          for (int root : {0, n - 1}) {
            if (!isRooted(c) && root != 0) continue;
            Drive drive = (count == 7) ? Drive::kThreads : Drive::kGroup;
            EXPECT_EQ(runAndCheck(c, comms, count, concclFloat32, concclSum, root, inPlace, drive,
                                  count * 131 + static_cast<uint64_t>(n) * 7 + pattern),
                      0u)
                << collKindName(c) << " n=" << n << " count=" << count << " pattern=" << pattern << " root=" << root;
          }
        }
      }
    }
    destroyAll(comms);
  }
}

}  // namespace
}  // namespace conccl::test
