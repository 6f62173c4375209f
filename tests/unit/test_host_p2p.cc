// AllToAllv and Send/Recv on the host backend: uneven counts, rings, pairs, self-sends, several ops per pair.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include "common/host_driver.h"

namespace conccl::test {
namespace {

std::vector<concclComm_t> hostComms(int n) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  config.timeoutMs = 60000;
  std::vector<concclComm_t> comms(n);
  EXPECT_EQ(concclCommInitAll(comms.data(), n, nullptr, &config), concclSuccess) << concclGetLastError(nullptr);
  return comms;
}

void destroyAll(std::vector<concclComm_t>& comms) {
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

class HostAllToAllv : public testing::TestWithParam<std::tuple<int, Drive>> {};

TEST_P(HostAllToAllv, UnevenCountsAndDisplacements) {
  const auto [n, drive] = GetParam();
  const concclDataType_t t = concclInt64;
  const size_t es = esize(t);
  std::mt19937_64 rng(99 + n);
  std::uniform_int_distribution<size_t> cnt(0, 300), gap(0, 5);
  // counts[r][p]: elements rank r sends to p.
  std::vector<std::vector<size_t>> counts(n, std::vector<size_t>(n));
  for (auto& row : counts) for (auto& v : row) v = cnt(rng);
  std::vector<std::vector<size_t>> sdispl(n, std::vector<size_t>(n)), rdispl(n, std::vector<size_t>(n)),
      rcounts(n, std::vector<size_t>(n));
  std::vector<size_t> sendTotal(n), recvTotal(n);
  for (int r = 0; r < n; ++r) {
    size_t s = 0, v = 0;
    for (int p = 0; p < n; ++p) {
      s += gap(rng);
      sdispl[r][p] = s;
      s += counts[r][p];
      v += gap(rng);
      rdispl[r][p] = v;
      rcounts[r][p] = counts[p][r];
      v += counts[p][r];
    }
    sendTotal[r] = s;
    recvTotal[r] = v;
  }
  std::vector<Bytes> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = randomData(sendTotal[r], t, rng);
    recv[r] = randomData(recvTotal[r], t, rng);
  }
  std::vector<Bytes> want = recv;  // gaps keep their old contents
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      std::memcpy(want[p].data() + rdispl[p][r] * es, send[r].data() + sdispl[r][p] * es, counts[r][p] * es);
    }
  }
  auto comms = hostComms(n);
  auto results = forEachRank(n, drive, [&](int r) {
    return concclAllToAllv(send[r].data(), counts[r].data(), sdispl[r].data(), recv[r].data(), rcounts[r].data(),
                           rdispl[r].data(), t, comms[r], nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(results[r], concclSuccess) << concclGetLastError(comms[r]);
  for (int r = 0; r < n; ++r) EXPECT_EQ(countWrong(recv[r], want[r], t, false, n), 0u) << "rank " << r;
  destroyAll(comms);
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostAllToAllv,
                         testing::Combine(testing::Values(1, 2, 3, 5, 8), testing::Values(Drive::kGroup, Drive::kThreads)));

TEST(HostSendRecv, RingInOneGroup) {
  const int n = 5;
  const size_t count = 1001;
  auto comms = hostComms(n);
  std::mt19937_64 rng(7);
  std::vector<Bytes> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = randomData(count, concclFloat32, rng);
    recv[r] = randomData(count, concclFloat32, rng);
  }
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(concclSend(send[r].data(), count, concclFloat32, (r + 1) % n, comms[r], nullptr), concclSuccess);
    ASSERT_EQ(concclRecv(recv[r].data(), count, concclFloat32, (r + n - 1) % n, comms[r], nullptr), concclSuccess);
  }
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(recv[r], send[(r + n - 1) % n]) << "rank " << r;
  destroyAll(comms);
}

TEST(HostSendRecv, ThreadPerRankPairsSelfAndSeveralOpsPerPair) {
  const int n = 4;
  auto comms = hostComms(n);
  std::mt19937_64 rng(11);
  // Rank r sends two messages to its partner r^1 and one to itself, in one group per rank.
  std::vector<Bytes> a(n), b(n), self(n), ra(n), rb(n), rself(n);
  for (int r = 0; r < n; ++r) {
    a[r] = randomData(333, concclUint8, rng);
    b[r] = randomData(4099, concclUint8, rng);
    self[r] = randomData(17, concclUint8, rng);
    ra[r].assign(333, 0);
    rb[r].assign(4099, 0);
    rself[r].assign(17, 0);
  }
  auto results = forEachRank(n, Drive::kThreads, [&](int r) {
    int p = r ^ 1;
    concclGroupStart();
    concclSend(a[r].data(), 333, concclUint8, p, comms[r], nullptr);
    concclRecv(ra[r].data(), 333, concclUint8, p, comms[r], nullptr);
    concclSend(b[r].data(), 4099, concclUint8, p, comms[r], nullptr);
    concclRecv(rb[r].data(), 4099, concclUint8, p, comms[r], nullptr);
    concclSend(self[r].data(), 17, concclUint8, r, comms[r], nullptr);
    concclRecv(rself[r].data(), 17, concclUint8, r, comms[r], nullptr);
    return concclGroupEnd();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(results[r], concclSuccess) << concclGetLastError(comms[r]);
    EXPECT_EQ(ra[r], a[r ^ 1]);
    EXPECT_EQ(rb[r], b[r ^ 1]);
    EXPECT_EQ(rself[r], self[r]);
  }
  destroyAll(comms);
}

TEST(HostSendRecv, BlockingPairWithoutGroup) {
  auto comms = hostComms(2);
  Bytes src(1000, 0), dst(1000, 0);
  std::mt19937_64 rng(3);
  src = randomData(1000, concclUint8, rng);
  auto results = forEachRank(2, Drive::kThreads, [&](int r) {
    return r == 0 ? concclSend(src.data(), 1000, concclUint8, 1, comms[0], nullptr)
                  : concclRecv(dst.data(), 1000, concclUint8, 0, comms[1], nullptr);
  });
  EXPECT_EQ(results[0], concclSuccess);
  EXPECT_EQ(results[1], concclSuccess);
  EXPECT_EQ(dst, src);
  destroyAll(comms);
}

}  // namespace
}  // namespace conccl::test
