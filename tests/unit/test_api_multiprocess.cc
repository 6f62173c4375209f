// The multi-process API on the CPU (no GPU needed, CUDA build or not): unique ids, the argument checks of
// concclCommInitRank, what it refuses at once (host backend, inside a group), registration on single-process
// communicators, and concclMemAlloc / concclMemFree argument errors. Nothing here waits for a peer: every
// InitRank below must fail before its bootstrap, and the tests bound that with a short config.timeoutMs.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "exec/executor.h"

namespace conccl::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string lastError(concclComm_t comm = nullptr) { return concclGetLastError(comm); }

// Short: every InitRank in this file must fail before it waits for anyone. If one did wait, it gives up
// after this long (and the test fails on its result) instead of hanging CI for the 300 s default.
constexpr int kShortTimeoutMs = 2000;

concclConfig_t hostConfig() {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  config.timeoutMs = kShortTimeoutMs;
  return config;
}

concclUniqueId freshId() {
  concclUniqueId id;
  std::memset(&id, 0xab, sizeof(id));
  EXPECT_EQ(concclGetUniqueId(&id), concclSuccess) << lastError();
  return id;
}

std::vector<concclComm_t> hostComms(int n) {
  concclConfig_t config = hostConfig();
  std::vector<concclComm_t> comms(static_cast<size_t>(n), nullptr);
  EXPECT_EQ(concclCommInitAll(comms.data(), n, nullptr, &config), concclSuccess) << lastError();
  return comms;
}

TEST(ApiMultiprocess, UniqueIdIs128BytesOfPlainData) {
  static_assert(CONCCL_UNIQUE_ID_BYTES == 128);
  static_assert(sizeof(concclUniqueId) == CONCCL_UNIQUE_ID_BYTES);
  EXPECT_EQ(concclGetUniqueId(nullptr), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());

  const concclUniqueId a = freshId();
  const concclUniqueId b = freshId();
  EXPECT_NE(std::memcmp(a.internal, b.internal, sizeof(a.internal)), 0) << "two calls returned the same id";
  // A copy made byte by byte (as after MPI_Bcast or a hex round trip) is the same id.
  concclUniqueId copy;
  std::memcpy(copy.internal, a.internal, sizeof(copy.internal));
  EXPECT_EQ(std::memcmp(copy.internal, a.internal, sizeof(a.internal)), 0);
}

TEST(ApiMultiprocess, InitRankArgumentErrors) {
  const concclUniqueId id = freshId();
  concclConfig_t config = hostConfig();  // a valid id and good arguments would give NotSupported, never a wait
  concclComm_t comm = nullptr;

  EXPECT_EQ(concclCommInitRankConfig(nullptr, 2, id, 0, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("comm"), std::string::npos) << lastError();

  EXPECT_EQ(concclCommInitRankConfig(&comm, 0, id, 0, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("nranks"), std::string::npos) << lastError();

  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, id, -1, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("rank"), std::string::npos) << lastError();

  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, id, 2, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("rank"), std::string::npos) << lastError();

  // The plain form (config NULL) checks its arguments the same way.
  EXPECT_EQ(concclCommInitRank(nullptr, 2, id, 0), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(concclCommInitRank(&comm, 2, id, 5), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(comm, nullptr);
}

TEST(ApiMultiprocess, InitRankRefusesAnIdThatIsNotOne) {
  concclUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  concclConfig_t config = hostConfig();
  concclComm_t comm = nullptr;
  const auto start = Clock::now();
  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, zero, 0, &config), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());
  EXPECT_NE(lastError().find("unique id"), std::string::npos) << lastError();
  EXPECT_EQ(concclCommInitRank(&comm, 1, zero, 0), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());

  // Garbage that is not all zeros, and a valid id with one byte of its header changed, are refused too.
  concclUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, garbage, 1, &config), concclInvalidArgument);
  concclUniqueId damaged = freshId();
  damaged.internal[0] = static_cast<char>(damaged.internal[0] ^ 0x01);
  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, damaged, 1, &config), concclInvalidArgument);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(comm, nullptr);
}

TEST(ApiMultiprocess, HostBackendIsRefusedAtOnceOnEveryRank) {
  const concclUniqueId id = freshId();
  concclConfig_t config = hostConfig();
  for (int rank = 0; rank < 2; ++rank) {
    concclComm_t comm = nullptr;
    const auto start = Clock::now();
    EXPECT_EQ(concclCommInitRankConfig(&comm, 2, id, rank, &config), concclNotSupported) << lastError();
    const auto elapsed = Clock::now() - start;
    EXPECT_LT(elapsed, std::chrono::seconds(1)) << "rank " << rank << " waited for its peers before refusing";
    EXPECT_FALSE(lastError().empty());
    EXPECT_NE(lastError().find("host"), std::string::npos) << lastError();
    EXPECT_EQ(comm, nullptr);
  }
  // A single-rank "communicator" is refused the same way: the host backend is single-process only.
  concclComm_t comm = nullptr;
  EXPECT_EQ(concclCommInitRankConfig(&comm, 1, freshId(), 0, &config), concclNotSupported) << lastError();
}

TEST(ApiMultiprocess, CudaBackendWithoutDeviceIsRefusedAtOnce) {
  if (exec::cudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendCuda;
  config.timeoutMs = kShortTimeoutMs;
  concclComm_t comm = nullptr;
  const auto start = Clock::now();
  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, freshId(), 1, &config), concclNotSupported) << lastError();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(comm, nullptr);
}

TEST(ApiMultiprocess, InitRankInsideGroupIsInvalidUsage) {
  const concclUniqueId id = freshId();
  concclConfig_t config = hostConfig();
  concclComm_t comm = nullptr;
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  const auto start = Clock::now();
  EXPECT_EQ(concclCommInitRankConfig(&comm, 2, id, 0, &config), concclInvalidUsage) << lastError();
  EXPECT_NE(lastError().find("concclGroupStart"), std::string::npos) << lastError();
  EXPECT_EQ(concclCommInitRank(&comm, 2, id, 1), concclInvalidUsage) << lastError();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(concclGroupEnd(), concclSuccess) << lastError();
  EXPECT_EQ(comm, nullptr);
  // The group is closed: a second GroupEnd is unbalanced.
  EXPECT_EQ(concclGroupEnd(), concclInvalidUsage);
}

TEST(ApiMultiprocess, RegisterArgumentErrors) {
  auto comms = hostComms(2);
  concclComm_t c = comms[0];
  std::vector<float> buf(64, 1.0f);
  void* handle = nullptr;

  EXPECT_NE(concclCommRegister(nullptr, buf.data(), sizeof(float) * buf.size(), &handle), concclSuccess);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(concclCommRegister(c, nullptr, 16, &handle), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("buff"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclCommRegister(c, buf.data(), 0, &handle), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("size"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclCommRegister(c, buf.data(), 16, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("handle"), std::string::npos) << lastError(c);
  EXPECT_EQ(handle, nullptr);

  EXPECT_NE(concclCommDeregister(nullptr, &handle), concclSuccess);
  EXPECT_EQ(concclCommDeregister(c, nullptr), concclInvalidArgument);
  int notAHandle = 0;
  EXPECT_EQ(concclCommDeregister(c, &notAHandle), concclInvalidArgument);

  for (auto comm : comms) EXPECT_EQ(concclCommDestroy(comm), concclSuccess) << lastError();
}

TEST(ApiMultiprocess, RegisterAndDeregisterOnHostCommunicator) {
  auto comms = hostComms(2);
  std::vector<float> a(256, 1.0f), b(256, 2.0f);

  void* h0 = nullptr;
  void* h0again = nullptr;
  void* h1 = nullptr;
  ASSERT_EQ(concclCommRegister(comms[0], a.data(), a.size() * sizeof(float), &h0), concclSuccess)
      << lastError(comms[0]);
  ASSERT_NE(h0, nullptr);
  // Registering the same buffer again gives a distinct handle; each is deregistered once.
  ASSERT_EQ(concclCommRegister(comms[0], a.data(), 16, &h0again), concclSuccess) << lastError(comms[0]);
  EXPECT_NE(h0again, h0);
  ASSERT_EQ(concclCommRegister(comms[1], b.data(), b.size() * sizeof(float), &h1), concclSuccess)
      << lastError(comms[1]);
  EXPECT_NE(h1, h0);

  // A handle belongs to the communicator that returned it.
  EXPECT_EQ(concclCommDeregister(comms[1], h0), concclInvalidArgument);
  EXPECT_FALSE(lastError(comms[1]).empty());
  EXPECT_EQ(concclCommDeregister(comms[0], h1), concclInvalidArgument);

  EXPECT_EQ(concclCommDeregister(comms[0], h0), concclSuccess) << lastError(comms[0]);
  EXPECT_EQ(concclCommDeregister(comms[0], h0), concclInvalidArgument);  // twice
  EXPECT_FALSE(lastError(comms[0]).empty());
  EXPECT_EQ(concclCommDeregister(comms[1], h1), concclSuccess) << lastError(comms[1]);

  // Registration does not disturb the communicator: a collective on the registered buffers still runs.
  std::vector<float> r0(256), r1(256);
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  EXPECT_EQ(concclAllReduce(a.data(), r0.data(), 256, concclFloat32, concclSum, comms[0], nullptr), concclSuccess);
  EXPECT_EQ(concclAllReduce(b.data(), r1.data(), 256, concclFloat32, concclSum, comms[1], nullptr), concclSuccess);
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << lastError();
  EXPECT_EQ(r0[0], 3.0f);
  EXPECT_EQ(r1[255], 3.0f);

  // h0again is left registered: destroy releases it.
  for (auto comm : comms) EXPECT_EQ(concclCommDestroy(comm), concclSuccess) << lastError();
}

TEST(ApiMultiprocess, WindowRegisterArgumentErrors) {
  auto comms = hostComms(2);
  concclComm_t c = comms[0];
  std::vector<float> buf(64, 1.0f);
  concclWindow_t win = nullptr;

  EXPECT_NE(concclCommWindowRegister(nullptr, buf.data(), sizeof(float) * buf.size(), &win), concclSuccess);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(concclCommWindowRegister(c, nullptr, 16, &win), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("buff is NULL"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclCommWindowRegister(c, buf.data(), 0, &win), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("size is 0"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclCommWindowRegister(c, buf.data(), 16, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("win is NULL"), std::string::npos) << lastError(c);
  EXPECT_EQ(win, nullptr);
  // Collective across processes (it waits for the peers): refused inside a group, like InitRank.
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  EXPECT_EQ(concclCommWindowRegister(c, buf.data(), 16, &win), concclInvalidUsage);
  EXPECT_NE(lastError(c).find("concclGroupStart"), std::string::npos) << lastError(c);
  ASSERT_EQ(concclGroupEnd(), concclSuccess);
  EXPECT_EQ(win, nullptr);

  EXPECT_NE(concclCommWindowDeregister(nullptr, win), concclSuccess);
  EXPECT_EQ(concclCommWindowDeregister(c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("win is NULL"), std::string::npos) << lastError(c);
  for (auto comm : comms) EXPECT_EQ(concclCommDestroy(comm), concclSuccess) << lastError();
}

TEST(ApiMultiprocess, WindowsOnHostCommunicator) {
  // Single-process communicators need no windows: registration validates and hands out a handle, and the
  // collectives on window buffers run as before.
  auto comms = hostComms(2);
  std::vector<float> a(512), b(512);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 13);
    b[i] = static_cast<float>((i * 7) % 11);
  }
  concclWindow_t w0 = nullptr, w1 = nullptr;
  ASSERT_EQ(concclCommWindowRegister(comms[0], a.data(), a.size() * sizeof(float), &w0), concclSuccess)
      << lastError(comms[0]);
  ASSERT_EQ(concclCommWindowRegister(comms[1], b.data(), b.size() * sizeof(float), &w1), concclSuccess)
      << lastError(comms[1]);
  ASSERT_NE(w0, nullptr);
  EXPECT_NE(w0, w1);
  // A handle belongs to the communicator that returned it.
  EXPECT_EQ(concclCommWindowDeregister(comms[1], w0), concclInvalidArgument);
  EXPECT_NE(lastError(comms[1]).find("concclCommWindowRegister"), std::string::npos) << lastError(comms[1]);

  // In place, first half of each window: sum of both ranks' values.
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  EXPECT_EQ(concclAllReduce(a.data(), a.data(), 256, concclFloat32, concclSum, comms[0], nullptr), concclSuccess);
  EXPECT_EQ(concclAllReduce(b.data(), b.data(), 256, concclFloat32, concclSum, comms[1], nullptr), concclSuccess);
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << lastError();
  for (size_t i = 0; i < 256; ++i) {
    const float want = static_cast<float>(i % 13) + static_cast<float>((i * 7) % 11);
    ASSERT_EQ(a[i], want) << i;
    ASSERT_EQ(b[i], want) << i;
  }
  EXPECT_EQ(a[300], static_cast<float>(300 % 13));  // the rest of the window untouched

  EXPECT_EQ(concclCommWindowDeregister(comms[0], w0), concclSuccess) << lastError(comms[0]);
  EXPECT_EQ(concclCommWindowDeregister(comms[0], w0), concclInvalidArgument);  // twice
  // w1 is left registered: destroy releases it.
  for (auto comm : comms) EXPECT_EQ(concclCommDestroy(comm), concclSuccess) << lastError();
}

TEST(ApiMultiprocess, MemAllocAndFreeArguments) {
  EXPECT_EQ(concclMemAlloc(nullptr, 8), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(concclMemAlloc(&p, 0), concclInvalidArgument);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(concclMemFree(nullptr), concclSuccess);
}

TEST(ApiMultiprocess, MemAllocWithoutDeviceIsNotSupported) {
  if (exec::cudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  void* p = nullptr;
  EXPECT_EQ(concclMemAlloc(&p, 1024), concclNotSupported);
  EXPECT_FALSE(lastError().empty());
  EXPECT_EQ(p, nullptr);
}

}  // namespace
}  // namespace conccl::test
