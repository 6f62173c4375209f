// Bad input and bad usage: each returns the right code with a message, and nothing crashes or hangs.
#include <conccl/conccl.h>

#include <algorithm>
#include <cstddef>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/host_driver.h"
#include "core/config.h"
#include "exec/executor.h"

namespace conccl::test {
namespace {

std::vector<concclComm_t> hostComms(int n, int timeoutMs = 60000) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  config.timeoutMs = timeoutMs;
  std::vector<concclComm_t> comms(n);
  EXPECT_EQ(concclCommInitAll(comms.data(), n, nullptr, &config), concclSuccess) << concclGetLastError(nullptr);
  return comms;
}

std::string lastError(concclComm_t comm = nullptr) { return concclGetLastError(comm); }

// The configuration a one-rank communicator made from `config` reports (it is destroyed again); a failed init or
// query is a test failure and leaves the result's magic 0.
concclConfig_t resolvedConfig(const concclConfig_t& config) {
  concclConfig_t got = CONCCL_CONFIG_INITIALIZER;
  concclComm_t comm = nullptr;
  if (concclCommInitAll(&comm, 1, nullptr, &config) != concclSuccess) {
    ADD_FAILURE() << "init: " << lastError();
    got.magic = 0;
    return got;
  }
  EXPECT_EQ(concclCommGetConfig(comm, &got), concclSuccess);
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
  return got;
}

TEST(ApiErrors, VersionAndErrorStrings) {
  int version = 0;
  ASSERT_EQ(concclGetVersion(&version), concclSuccess);
  EXPECT_EQ(version, CONCCL_VERSION_CODE);
  EXPECT_EQ(concclGetVersion(nullptr), concclInvalidArgument);
  for (int r = 0; r <= concclNumResults; ++r) {
    ASSERT_NE(concclGetErrorString(static_cast<concclResult_t>(r)), nullptr);
  }
  EXPECT_NE(std::string(concclGetErrorString(concclTimeout)).find("Timeout"), std::string::npos);
}

TEST(ApiErrors, InitArguments) {
  concclComm_t comm = nullptr;
  EXPECT_EQ(concclCommInitAll(nullptr, 1, nullptr, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError().find("comms is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(concclCommInitAll(&comm, 0, nullptr, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError().find("ndev"), std::string::npos);

  concclConfig_t bad = CONCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &bad), concclInvalidArgument);
  EXPECT_NE(lastError().find("CONCCL_CONFIG_INITIALIZER"), std::string::npos);

  concclConfig_t newer = CONCCL_CONFIG_INITIALIZER;
  newer.version = CONCCL_VERSION_CODE + 1;
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &newer), concclInvalidArgument);
  EXPECT_NE(lastError().find("newer"), std::string::npos);

  concclConfig_t lanes = CONCCL_CONFIG_INITIALIZER;
  lanes.backend = concclBackendHost;
  lanes.lanes = 0;
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &lanes), concclInvalidArgument);
  EXPECT_NE(lastError().find("lanes"), std::string::npos);
  EXPECT_EQ(comm, nullptr);  // untouched on failure
}

TEST(ApiErrors, CudaBackendWithoutDevice) {
  if (exec::cudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendCuda;
  concclComm_t comm = nullptr;
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclNotSupported);
  EXPECT_FALSE(lastError().empty());
}

TEST(ApiErrors, EnvironmentOverridesAndBadValues) {
  setenv("CONCCL_LANES", "3", 1);
  setenv("CONCCL_BACKEND", "host", 1);
  concclComm_t comm = nullptr;
  ASSERT_EQ(concclCommInitAll(&comm, 1, nullptr, nullptr), concclSuccess) << lastError();
  concclConfig_t got = CONCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(concclCommGetConfig(comm, &got), concclSuccess);
  EXPECT_EQ(got.lanes, 3);
  EXPECT_EQ(got.backend, concclBackendHost);
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);

  setenv("CONCCL_LANES", "many", 1);
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError().find("CONCCL_LANES"), std::string::npos);
  unsetenv("CONCCL_LANES");
  unsetenv("CONCCL_BACKEND");
}

// reduceCtas 0 means auto (the default); the tuning variables are range-checked like the others.
TEST(ApiErrors, AutoReduceCtasAndTuningVariables) {
  concclComm_t comm = nullptr;
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  EXPECT_EQ(resolvedConfig(config).reduceCtas, 0);
  config.reduceCtas = 8;
  EXPECT_EQ(resolvedConfig(config).reduceCtas, 8);
  config.reduceCtas = -1;
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("reduceCtas"), std::string::npos);
  config.reduceCtas = CONCCL_CONFIG_UNDEF_INT;
  for (const char* name :
       {"CONCCL_PIPELINE_DEPTH", "CONCCL_MIN_CHUNK_BYTES", "CONCCL_GRAPH_CACHE", "CONCCL_STAGED_MAX_BYTES",
        "CONCCL_POOL_BOUNCE_MAX_BYTES", "CONCCL_POOL_BOUNCE_IDLE_MS", "CONCCL_THREAD_STAGED",
        "CONCCL_UNMAP_QUIET_US", "CONCCL_UNMAP_QUIET_MAX_MS"}) {
    const std::string bad = name == std::string("CONCCL_MIN_CHUNK_BYTES") ? "12"
                            : name == std::string("CONCCL_GRAPH_CACHE")   ? "-1"
                                                                          : "0x";
    setenv(name, bad.c_str(), 1);
    EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclInvalidArgument) << name;
    EXPECT_NE(lastError().find(name), std::string::npos) << lastError();
    unsetenv(name);
  }
}

// engine is auto or copy; CONCCL_THREAD_STAGED is 0 or 1 (its value 2 is Config::threadStaged through
// ConfigTestHook); the variables that only reproduced fixed bugs or compared replaced designs are not read at all.
TEST(ApiErrors, EngineAndThreadStagedValuesAndRemovedVariables) {
  concclComm_t comm = nullptr;
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  config.engine = 2;
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("engine"), std::string::npos) << lastError();
  config.engine = CONCCL_CONFIG_UNDEF_INT;
  setenv("CONCCL_ENGINE", "sm", 1);
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("auto|copy"), std::string::npos) << lastError();
  unsetenv("CONCCL_ENGINE");
  setenv("CONCCL_THREAD_STAGED", "2", 1);
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclInvalidArgument);
  EXPECT_NE(lastError().find("CONCCL_THREAD_STAGED"), std::string::npos) << lastError();
  unsetenv("CONCCL_THREAD_STAGED");
  for (const char* name : {"CONCCL_PEER_REDUCE", "CONCCL_GRAPH_CACHE_MAX_BYTES", "CONCCL_CALL_ORDER",
                           "CONCCL_QUEUE_CLAIM"}) {
    setenv(name, "not read", 1);
  }
  EXPECT_EQ(concclCommInitAll(&comm, 1, nullptr, &config), concclSuccess) << lastError();
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
  for (const char* name : {"CONCCL_PEER_REDUCE", "CONCCL_GRAPH_CACHE_MAX_BYTES", "CONCCL_CALL_ORDER",
                           "CONCCL_QUEUE_CLAIM"}) {
    unsetenv(name);
  }
}

// ConfigTestHook edits every Config resolved while it lives, and no other.
TEST(ApiErrors, ConfigTestHookAppliesWhileItLives) {
  EXPECT_TRUE(resolveConfig(nullptr, false).peerReduce);
  {
    ConfigTestHook hook([](Config& config) {
      config.peerReduce = false;
      config.threadStaged = 2;
    });
    const Config config = resolveConfig(nullptr, false);
    EXPECT_FALSE(config.peerReduce);
    EXPECT_EQ(config.threadStaged, 2);
  }
  const Config config = resolveConfig(nullptr, false);
  EXPECT_TRUE(config.peerReduce);
  EXPECT_EQ(config.threadStaged, 0);
}

// Reductions give the same results whether reducers read their peers in place (the default) or receive the
// inputs into scratch first (Config::peerReduce false, a test-only switch), here on the host backend with several
// pieces per share.
TEST(ApiErrors, PeerReadsAndScratchExchangeAgree) {
  const int n = 3;
  const size_t count = (size_t{3} << 20) + 7;  // 12 MiB per rank: several 1 MiB pieces per share
  std::vector<std::vector<float>> results;
  for (const bool peer : {true, false}) {
    setenv("CONCCL_MIN_CHUNK_BYTES", "1M", 1);
    std::vector<concclComm_t> comms;
    {
      ConfigTestHook hook([peer](Config& config) { config.peerReduce = peer; });
      comms = hostComms(n);
    }
    unsetenv("CONCCL_MIN_CHUNK_BYTES");
    std::vector<std::vector<float>> send(n, std::vector<float>(count)), recv(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<float>((i * 7 + static_cast<size_t>(r) * 3) % 101);
    }
    ASSERT_EQ(concclGroupStart(), concclSuccess);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(concclAllReduce(send[r].data(), recv[r].data(), count, concclFloat32, concclSum, comms[r], nullptr),
                concclSuccess);
    }
    ASSERT_EQ(concclGroupEnd(), concclSuccess) << lastError();
    ASSERT_EQ(concclGroupStart(), concclSuccess);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(concclReduce(send[r].data(), r == 1 ? send[r].data() : nullptr, count, concclFloat32, concclMax, 1,
                             comms[r], nullptr),
                concclSuccess);
    }
    ASSERT_EQ(concclGroupEnd(), concclSuccess) << lastError();
    for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; i += 4099) {
        float sum = 0, max = 0;
        for (int q = 0; q < n; ++q) {
          const float v = static_cast<float>((i * 7 + static_cast<size_t>(q) * 3) % 101);
          sum += v;
          max = std::max(max, v);
        }
        ASSERT_EQ(recv[r][i], sum) << "peer reads " << peer << " rank " << r << " element " << i;
        if (r == 1) {
          ASSERT_EQ(send[r][i], max) << "peer reads " << peer << " element " << i;
        }
      }
    }
    results.push_back(recv[0]);
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(ApiErrors, SmallMessageBytesFromFieldEnvironmentAndOlderStructs) {
  concclComm_t comm = nullptr;
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  concclConfig_t got = CONCCL_CONFIG_INITIALIZER;
  // Default.
  EXPECT_EQ(resolvedConfig(config).smallMessageBytes, size_t{64} << 10);
  // The environment, then the field over it.
  setenv("CONCCL_SMALL_MESSAGE_BYTES", "16K", 1);
  EXPECT_EQ(resolvedConfig(config).smallMessageBytes, size_t{16} << 10);
  config.smallMessageBytes = 0;
  EXPECT_EQ(resolvedConfig(config).smallMessageBytes, 0u);
  unsetenv("CONCCL_SMALL_MESSAGE_BYTES");
  // A struct from a header that ends at timeoutMs: accepted, the new field keeps its default, and GetConfig
  // writes no byte past the caller's struct.
  concclConfig_t older = CONCCL_CONFIG_INITIALIZER;
  older.backend = concclBackendHost;
  older.size = offsetof(concclConfig_t, smallMessageBytes);
  older.smallMessageBytes = 12345;  // beyond the struct: must be ignored
  ASSERT_EQ(concclCommInitAll(&comm, 1, nullptr, &older), concclSuccess) << lastError();
  concclConfig_t out = CONCCL_CONFIG_INITIALIZER;
  out.size = offsetof(concclConfig_t, smallMessageBytes);
  out.smallMessageBytes = 777;
  ASSERT_EQ(concclCommGetConfig(comm, &out), concclSuccess);
  EXPECT_EQ(out.smallMessageBytes, 777u);
  ASSERT_EQ(concclCommGetConfig(comm, &got), concclSuccess);
  EXPECT_EQ(got.smallMessageBytes, size_t{64} << 10);
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
}

TEST(ApiErrors, NullAndDeadHandles) {
  float x = 1;
  EXPECT_EQ(concclAllReduce(&x, &x, 1, concclFloat32, concclSum, nullptr, nullptr), concclInvalidArgument);
  auto comms = hostComms(1);
  concclComm_t dead = comms[0];
  ASSERT_EQ(concclCommDestroy(dead), concclSuccess);
  EXPECT_EQ(concclAllReduce(&x, &x, 1, concclFloat32, concclSum, dead, nullptr), concclInvalidUsage);
  EXPECT_NE(lastError().find("not a live communicator"), std::string::npos);
  EXPECT_EQ(concclCommDestroy(dead), concclInvalidUsage);
  int n = 0;
  EXPECT_EQ(concclCommCount(dead, &n), concclInvalidUsage);
}

TEST(ApiErrors, LocalArgumentChecks) {
  auto comms = hostComms(1);
  concclComm_t c = comms[0];
  float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t fp8[4] = {1, 2, 3, 4};
  auto badType = static_cast<concclDataType_t>(concclNumTypes);
  auto badOp = static_cast<concclRedOp_t>(concclNumOps);
  EXPECT_EQ(concclAllGather(buf, buf + 4, 1, badType, c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("datatype"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclAllReduce(buf, buf + 4, 1, concclFloat32, badOp, c, nullptr), concclInvalidArgument);
  EXPECT_EQ(concclAllReduce(fp8, fp8 + 2, 1, concclFloat8e4m3, concclSum, c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("data movement only"), std::string::npos);
  EXPECT_EQ(concclBroadcast(buf, buf, 1, concclFloat32, 1, c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("root"), std::string::npos);
  EXPECT_EQ(concclReduce(buf, buf, 1, concclFloat32, concclSum, -1, c, nullptr), concclInvalidArgument);
  EXPECT_EQ(concclSend(buf, 1, concclFloat32, 5, c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("peer"), std::string::npos);
  EXPECT_EQ(concclRecv(nullptr, 1, concclFloat32, 0, c, nullptr), concclInvalidArgument);
  EXPECT_EQ(concclAllReduce(buf, buf + 4, SIZE_MAX / 2, concclFloat32, concclSum, c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("overflows"), std::string::npos);
  EXPECT_EQ(concclAllReduce(buf, buf + 1, 4, concclFloat32, concclSum, c, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("overlap"), std::string::npos);
  EXPECT_EQ(concclAllToAll(buf, buf, 4, concclFloat32, c, nullptr), concclInvalidArgument);
  EXPECT_EQ(concclAllToAllv(buf, nullptr, nullptr, buf + 4, nullptr, nullptr, concclFloat32, c, nullptr),
            concclInvalidArgument);
  // concclAllGatherChunked: the events array is required, and the host backend has no CUDA events.
  cudaEvent_t events[1] = {nullptr};
  EXPECT_EQ(concclAllGatherChunked(buf, buf + 4, 1, concclFloat32, c, nullptr, nullptr), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("chunkReady"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclAllGatherChunked(buf, buf + 4, 1, concclFloat32, c, nullptr, events), concclNotSupported);
  EXPECT_NE(lastError(c).find("host backend"), std::string::npos) << lastError(c);
  // concclReduceScatterChunked: piece count in range, the events array required, no host backend.
  const cudaEvent_t pieces[2] = {nullptr, nullptr};
  EXPECT_EQ(concclReduceScatterChunked(buf, buf + 4, 1, concclFloat32, concclSum, c, nullptr, 0, pieces),
            concclInvalidArgument);
  EXPECT_NE(lastError(c).find("piecesPerBlock"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclReduceScatterChunked(buf, buf + 4, 1, concclFloat32, concclSum, c, nullptr, 4097, pieces),
            concclInvalidArgument);
  EXPECT_EQ(concclReduceScatterChunked(buf, buf + 4, 1, concclFloat32, concclSum, c, nullptr, 1, nullptr),
            concclInvalidArgument);
  EXPECT_NE(lastError(c).find("pieceReady"), std::string::npos) << lastError(c);
  EXPECT_EQ(concclReduceScatterChunked(buf, buf + 4, 1, concclFloat8e4m3, concclSum, c, nullptr, 1, pieces),
            concclInvalidArgument);
  EXPECT_EQ(concclReduceScatterChunked(buf, buf + 4, 1, concclFloat32, concclSum, c, nullptr, 1, pieces),
            concclNotSupported);
  EXPECT_NE(lastError(c).find("host backend"), std::string::npos) << lastError(c);
  auto fakeStream = reinterpret_cast<cudaStream_t>(0x1);
  EXPECT_EQ(concclAllReduce(buf, buf + 4, 4, concclFloat32, concclSum, c, fakeStream), concclInvalidArgument);
  EXPECT_NE(lastError(c).find("stream"), std::string::npos);
  EXPECT_EQ(concclGroupEnd(), concclInvalidUsage);
  // The communicator is still usable after argument errors.
  EXPECT_EQ(concclAllReduce(buf, buf + 4, 4, concclFloat32, concclSum, c, nullptr), concclSuccess) << lastError(c);
  EXPECT_EQ(buf[4], 1.0f);
  EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

TEST(ApiErrors, NullBufferIsReportedOnEveryRank) {
  auto comms = hostComms(3);
  std::vector<std::vector<float>> send(3, std::vector<float>(10, 1.0f)), recv(3, std::vector<float>(30));
  auto results = forEachRank(3, Drive::kGroup, [&](int r) {
    return concclAllGather(send[r].data(), r == 1 ? nullptr : recv[r].data(), 10, concclFloat32, comms[r], nullptr);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r], concclInvalidArgument);
    EXPECT_NE(lastError(comms[r]).find("rank 1 recvbuff is NULL"), std::string::npos) << lastError(comms[r]);
  }
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

TEST(ApiErrors, MismatchedCountsAcrossRanks) {
  auto comms = hostComms(3);
  std::vector<std::vector<float>> buf(3, std::vector<float>(20, 1.0f));
  auto results = forEachRank(3, Drive::kThreads, [&](int r) {
    return concclAllReduce(buf[r].data(), buf[r].data(), r == 2 ? 20 : 10, concclFloat32, concclSum, comms[r], nullptr);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r], concclInvalidArgument);
    EXPECT_NE(lastError(comms[r]).find("disagree on the count"), std::string::npos) << lastError(comms[r]);
  }
  // Mismatched op and root are reported too, and the communicator keeps working afterwards.
  results = forEachRank(3, Drive::kGroup, [&](int r) {
    return concclReduce(buf[r].data(), buf[r].data(), 10, concclFloat32, concclSum, r == 0 ? 0 : 1, comms[r], nullptr);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(results[r], concclInvalidArgument);
  results = forEachRank(3, Drive::kGroup, [&](int r) {
    return concclAllReduce(buf[r].data(), buf[r].data(), 10, concclFloat32, concclSum, comms[r], nullptr);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(results[r], concclSuccess) << lastError(comms[r]);
  EXPECT_EQ(buf[0][0], 3.0f);
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

TEST(ApiErrors, MismatchedAllToAllvCounts) {
  auto comms = hostComms(2);
  std::vector<std::vector<float>> send(2, std::vector<float>(8, 1)), recv(2, std::vector<float>(8));
  size_t sc[2][2] = {{2, 2}, {2, 2}}, rc[2][2] = {{2, 3}, {2, 2}}, d[2] = {0, 4};
  auto results = forEachRank(2, Drive::kGroup, [&](int r) {
    return concclAllToAllv(send[r].data(), sc[r], d, recv[r].data(), rc[r], d, concclFloat32, comms[r], nullptr);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(results[r], concclInvalidArgument) << lastError(comms[r]);
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

TEST(ApiErrors, MissingRankTimesOutThenAbortCleansUp) {
  auto comms = hostComms(2, /*timeoutMs=*/300);
  std::vector<float> buf(16, 1.0f);
  auto start = std::chrono::steady_clock::now();
  // Rank 1 never calls.
  EXPECT_EQ(concclAllReduce(buf.data(), buf.data(), 16, concclFloat32, concclSum, comms[0], nullptr), concclTimeout);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, std::chrono::seconds(10));
  EXPECT_NE(lastError(comms[0]).find("rank(s) 1"), std::string::npos) << lastError(comms[0]);
  concclResult_t async = concclSuccess;
  ASSERT_EQ(concclCommGetAsyncError(comms[1], &async), concclSuccess);
  EXPECT_EQ(async, concclTimeout);
  // Out of service now: later calls fail fast instead of hanging.
  EXPECT_EQ(concclAllReduce(buf.data(), buf.data(), 16, concclFloat32, concclSum, comms[1], nullptr),
            concclInvalidUsage);
  EXPECT_EQ(concclCommAbort(comms[0]), concclSuccess);
  EXPECT_EQ(concclCommAbort(comms[1]), concclSuccess);
}

TEST(ApiErrors, PeerMissingFromSendRecvTimesOut) {
  auto comms = hostComms(2, /*timeoutMs=*/200);
  std::vector<float> buf(4, 1.0f);
  EXPECT_EQ(concclSend(buf.data(), 4, concclFloat32, 1, comms[0], nullptr), concclTimeout);
  for (auto c : comms) EXPECT_EQ(concclCommAbort(c), concclSuccess);
}

TEST(ApiErrors, QueriesValidateOutputs) {
  auto comms = hostComms(2);
  int v = -5;
  EXPECT_EQ(concclCommCount(comms[0], nullptr), concclInvalidArgument);
  ASSERT_EQ(concclCommCount(comms[0], &v), concclSuccess);
  EXPECT_EQ(v, 2);
  ASSERT_EQ(concclCommUserRank(comms[1], &v), concclSuccess);
  EXPECT_EQ(v, 1);
  ASSERT_EQ(concclCommCuDevice(comms[1], &v), concclSuccess);
  EXPECT_EQ(v, -1);
  for (auto c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

}  // namespace
}  // namespace conccl::test
