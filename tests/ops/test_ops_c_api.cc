// The fused ops' C interface (include/conccl/ops/conccl_ops.h): every argument check that needs no GPU returns the
// right code with a message saying what was wrong, nothing is enqueued, and the last-error text is per thread.
// Host-backend communicators stand in for real ones: they pass the NULL checks and are then refused (the ops run on the
// CUDA backend only), so no CUDA call is ever made here.
#include <conccl/conccl.h>
#include <conccl/ops/conccl_ops.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace conccl::test {
namespace {

std::string lastError() { return concclOpsGetLastError(); }

// Host-backend communicators of one clique (no GPU needed).
class OpsCApi : public ::testing::Test {
 protected:
  void SetUp() override {
    concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
    config.backend = concclBackendHost;
    comms_.assign(2, nullptr);
    ASSERT_EQ(concclCommInitAll(comms_.data(), 2, nullptr, &config), concclSuccess) << concclGetLastError(nullptr);
  }
  void TearDown() override {
    for (concclComm_t comm : comms_) {
      if (comm != nullptr) {
        EXPECT_EQ(concclOpsReleaseComm(comm), concclSuccess);
        EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
      }
    }
  }

  // Stand-ins for device buffers: never dereferenced, the calls fail before any use.
  char buf_[4][16] = {};
  void* p(int i) { return buf_[i]; }
  std::vector<concclComm_t> comms_;
};

TEST_F(OpsCApi, NullCommAndBuffers) {
  EXPECT_EQ(concclOpsAllGatherMatmul(nullptr, p(0), p(1), p(2), p(3), 4, 8, 16, concclBfloat16, nullptr),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("concclOpsAllGatherMatmul: comm is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsMatmulReduceScatter(nullptr, p(0), p(1), p(2), p(3), 4, 8, 16, concclBfloat16, nullptr),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("concclOpsMatmulReduceScatter: comm is NULL"), std::string::npos) << lastError();

  concclComm_t comm = comms_[0];
  const struct {
    int nullIndex;
    const char* name;
  } agCases[] = {{0, "aShard is NULL"}, {1, "aFull is NULL"}, {2, "b is NULL"}, {3, "c is NULL"}};
  for (const auto& tc : agCases) {
    void* q[4] = {p(0), p(1), p(2), p(3)};
    q[tc.nullIndex] = nullptr;
    EXPECT_EQ(concclOpsAllGatherMatmul(comm, q[0], q[1], q[2], q[3], 4, 8, 16, concclBfloat16, nullptr),
              concclInvalidArgument);
    EXPECT_NE(lastError().find(tc.name), std::string::npos) << lastError();
  }
  const struct {
    int nullIndex;
    const char* name;
  } rsCases[] = {{0, "a is NULL"}, {1, "b is NULL"}, {2, "partial is NULL"}, {3, "c is NULL"}};
  for (const auto& tc : rsCases) {
    void* q[4] = {p(0), p(1), p(2), p(3)};
    q[tc.nullIndex] = nullptr;
    EXPECT_EQ(concclOpsMatmulReduceScatter(comm, q[0], q[1], q[2], q[3], 4, 8, 16, concclFloat16, nullptr),
              concclInvalidArgument);
    EXPECT_NE(lastError().find(tc.name), std::string::npos) << lastError();
  }
}

TEST_F(OpsCApi, BadSizes) {
  concclComm_t comm = comms_[0];
  const int64_t bad[][3] = {{0, 8, 16}, {4, 0, 16}, {4, 8, 0}, {-1, 8, 16}, {4, -8, 16}, {4, 8, INT64_MIN}};
  for (const auto& s : bad) {
    EXPECT_EQ(concclOpsAllGatherMatmul(comm, p(0), p(1), p(2), p(3), s[0], s[1], s[2], concclBfloat16, nullptr),
              concclInvalidArgument);
    EXPECT_NE(lastError().find("mShard, n and k must be > 0"), std::string::npos) << lastError();
    EXPECT_EQ(concclOpsMatmulReduceScatter(comm, p(0), p(1), p(2), p(3), s[0], s[1], s[2], concclBfloat16, nullptr),
              concclInvalidArgument);
    EXPECT_NE(lastError().find("mShard, n and kShard must be > 0"), std::string::npos) << lastError();
  }
  // k x n elements of 2 bytes that no pointer can address: refused before the communicator is even asked.
  const int64_t huge = int64_t{1} << 40;
  EXPECT_EQ(concclOpsAllGatherMatmul(comm, p(0), p(1), p(2), p(3), 4, huge, huge, concclBfloat16, nullptr),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("byte count overflows"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsMatmulReduceScatter(comm, p(0), p(1), p(2), p(3), 4, huge, huge, concclBfloat16, nullptr),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("byte count overflows"), std::string::npos) << lastError();
}

TEST_F(OpsCApi, BadAndUnsupportedTypes) {
  concclComm_t comm = comms_[0];
  // Not a concclDataType_t at all: an invalid argument.
  for (int t : {-1, static_cast<int>(concclNumTypes), 99}) {
    const auto type = static_cast<concclDataType_t>(t);
    EXPECT_EQ(concclOpsAllGatherMatmul(comm, p(0), p(1), p(2), p(3), 4, 8, 16, type, nullptr), concclInvalidArgument);
    EXPECT_NE(lastError().find("is not a concclDataType_t"), std::string::npos) << lastError();
    EXPECT_EQ(concclOpsMatmulReduceScatter(comm, p(0), p(1), p(2), p(3), 4, 8, 16, type, nullptr),
              concclInvalidArgument);
    EXPECT_NE(lastError().find("is not a concclDataType_t"), std::string::npos) << lastError();
  }
  // A valid type without a GEMM here: not supported.
  for (concclDataType_t type : {concclFloat32, concclFloat8e4m3, concclInt8}) {
    EXPECT_EQ(concclOpsAllGatherMatmul(comm, p(0), p(1), p(2), p(3), 4, 8, 16, type, nullptr), concclNotSupported);
    EXPECT_NE(lastError().find("only concclBfloat16 and concclFloat16"), std::string::npos) << lastError();
    EXPECT_EQ(concclOpsMatmulReduceScatter(comm, p(0), p(1), p(2), p(3), 4, 8, 16, type, nullptr), concclNotSupported);
    EXPECT_NE(lastError().find("only concclBfloat16 and concclFloat16"), std::string::npos) << lastError();
  }
}

TEST_F(OpsCApi, HostBackendAndDeadCommunicators) {
  EXPECT_EQ(concclOpsAllGatherMatmul(comms_[0], p(0), p(1), p(2), p(3), 4, 8, 16, concclBfloat16, nullptr),
            concclNotSupported);
  EXPECT_NE(lastError().find("host-backend communicator"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsMatmulReduceScatter(comms_[1], p(0), p(1), p(2), p(3), 4, 8, 16, concclFloat16, nullptr),
            concclNotSupported);
  EXPECT_NE(lastError().find("host-backend communicator"), std::string::npos) << lastError();

  // A destroyed communicator is refused as conccl refuses it (conccl keeps a registry of live ones).
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  concclComm_t dead = nullptr;
  ASSERT_EQ(concclCommInitAll(&dead, 1, nullptr, &config), concclSuccess);
  ASSERT_EQ(concclCommDestroy(dead), concclSuccess);
  EXPECT_EQ(concclOpsAllGatherMatmul(dead, p(0), p(1), p(2), p(3), 4, 8, 16, concclBfloat16, nullptr),
            concclInvalidUsage);
  EXPECT_NE(lastError().find("not a live communicator"), std::string::npos) << lastError();
}

TEST_F(OpsCApi, GroupArguments) {
  const void* in[2] = {p(0), p(1)};
  void* out[2] = {p(2), p(3)};
  cudaStream_t streams[2] = {nullptr, nullptr};
  EXPECT_EQ(concclOpsAllGatherMatmulGroup(0, comms_.data(), in, out, in, out, 4, 8, 16, concclBfloat16, streams),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("nranks must be >= 1"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsAllGatherMatmulGroup(2, nullptr, in, out, in, out, 4, 8, 16, concclBfloat16, streams),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("comms is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsAllGatherMatmulGroup(2, comms_.data(), in, nullptr, in, out, 4, 8, 16, concclBfloat16, streams),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("aFull is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsAllGatherMatmulGroup(2, comms_.data(), in, out, in, out, 4, 8, 16, concclBfloat16, nullptr),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("streams is NULL"), std::string::npos) << lastError();
  concclComm_t twice[2] = {comms_[0], comms_[0]};
  EXPECT_EQ(concclOpsAllGatherMatmulGroup(2, twice, in, out, in, out, 4, 8, 16, concclBfloat16, streams),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("the same communicator"), std::string::npos) << lastError();
  // A NULL entry is named by its rank.
  const void* inWithNull[2] = {p(0), nullptr};
  EXPECT_EQ(
      concclOpsAllGatherMatmulGroup(2, comms_.data(), inWithNull, out, in, out, 4, 8, 16, concclBfloat16, streams),
      concclInvalidArgument);
  EXPECT_NE(lastError().find("comms[1]: aShard is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsAllGatherMatmulGroup(2, comms_.data(), in, out, in, out, 4, 8, 16, concclBfloat16, streams),
            concclNotSupported);
  EXPECT_NE(lastError().find("comms[0]: comm is a host-backend communicator"), std::string::npos) << lastError();

  EXPECT_EQ(concclOpsMatmulReduceScatterGroup(-3, comms_.data(), in, in, out, out, 4, 8, 16, concclBfloat16, streams),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("nranks must be >= 1"), std::string::npos) << lastError();
  EXPECT_EQ(
      concclOpsMatmulReduceScatterGroup(2, comms_.data(), in, in, nullptr, out, 4, 8, 16, concclBfloat16, streams),
      concclInvalidArgument);
  EXPECT_NE(lastError().find("partial is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsMatmulReduceScatterGroup(2, comms_.data(), in, in, out, out, 0, 8, 16, concclBfloat16, streams),
            concclInvalidArgument);
  EXPECT_NE(lastError().find("comms[0]: "), std::string::npos) << lastError();
  EXPECT_NE(lastError().find("must be > 0"), std::string::npos) << lastError();
  EXPECT_EQ(concclOpsMatmulReduceScatterGroup(2, comms_.data(), in, in, out, out, 4, 8, 16, concclFloat32, streams),
            concclNotSupported);
  EXPECT_EQ(concclOpsMatmulReduceScatterGroup(2, comms_.data(), in, in, out, out, 4, 8, 16, concclFloat16, streams),
            concclNotSupported);
  EXPECT_NE(lastError().find("host-backend communicator"), std::string::npos) << lastError();

  // No group was left open by the failures: a group of this thread still starts and ends balanced.
  EXPECT_EQ(concclGroupStart(), concclSuccess);
  EXPECT_EQ(concclGroupEnd(), concclSuccess);
}

TEST_F(OpsCApi, ReleaseAndLastErrorPerThread) {
  EXPECT_EQ(concclOpsReleaseComm(nullptr), concclInvalidArgument);
  EXPECT_NE(lastError().find("concclOpsReleaseComm: comm is NULL"), std::string::npos) << lastError();
  // A communicator the library holds nothing for: nothing to free, not an error.
  EXPECT_EQ(concclOpsReleaseComm(comms_[0]), concclSuccess);

  // The message is the calling thread's: a fresh thread sees none, and its own failure does not replace ours.
  EXPECT_EQ(concclOpsAllGatherMatmul(nullptr, p(0), p(1), p(2), p(3), 4, 8, 16, concclBfloat16, nullptr),
            concclInvalidArgument);
  const std::string mine = lastError();
  std::string otherBefore, otherAfter;
  std::thread([&] {
    otherBefore = concclOpsGetLastError();
    (void)concclOpsReleaseComm(nullptr);
    otherAfter = concclOpsGetLastError();
  }).join();
  EXPECT_EQ(otherBefore, "");
  EXPECT_NE(otherAfter.find("concclOpsReleaseComm"), std::string::npos) << otherAfter;
  EXPECT_EQ(lastError(), mine);
}

}  // namespace
}  // namespace conccl::test
