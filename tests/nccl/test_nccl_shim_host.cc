// The shim's conccl path on the CPU: ncclCommInitAll on conccl's host backend (CONCCL_BACKEND=host, which only
// these tests set: NCCL programs pass device memory), one thread driving both ranks through ncclGroupStart/End.
// Proves the NCCL -> conccl wiring (types, ops, results) and that what conccl cannot run exactly fails with a
// message. CONCCL_NCCL_COLLS leaves reduce_scatter out; the fake NCCL stands in for the real one.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

class NcclShimHost : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unsetenv("CONCCL_NCCL_SHIM");
    setenv("CONCCL_BACKEND", "host", 1);
    setenv("CONCCL_NCCL_COLLS", "all_reduce,all_gather,broadcast,reduce,send_recv", 1);
    setenv("CONCCL_NCCL_REAL_LIB", FAKE_NCCL_PATH, 1);
    shim_ = dlopen(CONCCL_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(shim_, nullptr) << dlerror();
  }
  template <class Fn>
  static Fn shimFn(const char* name) {
    return reinterpret_cast<Fn>(dlsym(shim_, name));
  }
  void SetUp() override {
    testing::internal::CaptureStderr();
    ASSERT_EQ(shimFn<decltype(&::ncclCommInitAll)>("ncclCommInitAll")(comms_, 2, nullptr), ncclSuccess);
    log_ = testing::internal::GetCapturedStderr();
  }
  void TearDown() override {
    for (ncclComm_t c : comms_) EXPECT_EQ(shimFn<decltype(&::ncclCommDestroy)>("ncclCommDestroy")(c), ncclSuccess);
  }
  static void* shim_;
  ncclComm_t comms_[2] = {nullptr, nullptr};
  std::string log_;
};

void* NcclShimHost::shim_ = nullptr;

#define SHIM(name) shimFn<decltype(&::name)>(#name)

TEST_F(NcclShimHost, InitAllTakesTheConcclPathAndSaysSo) {
  EXPECT_NE(log_.find("rank 0 nranks 2"), std::string::npos) << log_;
  EXPECT_NE(log_.find("rank 1 nranks 2"), std::string::npos) << log_;
  EXPECT_NE(log_.find("-> conccl (single process, all ranks on this node)"), std::string::npos) << log_;
  int n = 0, r = -1, dev = 0;
  EXPECT_EQ(SHIM(ncclCommCount)(comms_[1], &n), ncclSuccess);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(SHIM(ncclCommUserRank)(comms_[1], &r), ncclSuccess);
  EXPECT_EQ(r, 1);
  EXPECT_EQ(SHIM(ncclCommCuDevice)(comms_[1], &dev), ncclSuccess);
  EXPECT_EQ(dev, -1);  // host backend
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(SHIM(ncclCommGetAsyncError)(comms_[0], &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(SHIM(ncclCommFinalize)(comms_[0]), ncclSuccess);
}

TEST_F(NcclShimHost, AllReduceMapsTypesAndOps) {
  // ncclFloat32 is 7 in NCCL and 8 (concclFloat32) in conccl: a wrong mapping would read doubles.
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(a, a, 3, ncclFloat32, ncclSum, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(b, b, 3, ncclFloat32, ncclSum, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i], 11.0f * static_cast<float>(i + 1));
    EXPECT_EQ(b[i], a[i]);
  }
  int64_t x[2] = {7, -4}, y[2] = {2, 9}, ox[2], oy[2];
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(x, ox, 2, ncclInt64, ncclMax, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(y, oy, 2, ncclInt64, ncclMax, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(ox[0], 7);
  EXPECT_EQ(ox[1], 9);
  EXPECT_EQ(oy[0], 7);
}

TEST_F(NcclShimHost, BcastAllGatherAndSendRecv) {
  int32_t r0[4] = {5, 6, 7, 8}, r1[4] = {0, 0, 0, 0};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclBcast)(r0, 4, ncclInt32, 0, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclBcast)(r1, 4, ncclInt32, 0, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(std::memcmp(r0, r1, sizeof(r0)), 0);

  uint8_t s0[2] = {1, 2}, s1[2] = {3, 4}, g0[4] = {}, g1[4] = {};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllGather)(s0, g0, 2, ncclUint8, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllGather)(s1, g1, 2, ncclUint8, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  const uint8_t expect[4] = {1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(g0, expect, 4), 0);
  EXPECT_EQ(std::memcmp(g1, expect, 4), 0);

  double out[3] = {1.5, 2.5, 3.5}, in[3] = {};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclSend)(out, 3, ncclFloat64, 1, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclRecv)(in, 3, ncclFloat64, 0, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
}

TEST_F(NcclShimHost, WhatConcclCannotRunExactlyFailsWithAMessage) {
  float f[4] = {};
  EXPECT_EQ(SHIM(ncclReduceScatter)(f, f, 2, ncclFloat32, ncclSum, comms_[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("reduce_scatter is not in CONCCL_NCCL_COLLS"),
            std::string::npos)
      << SHIM(ncclGetLastError)(comms_[0]);
  EXPECT_EQ(SHIM(ncclAllReduce)(f, f, 4, ncclFloat8e4m3, ncclSum, comms_[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("does not reduce ncclFloat8e4m3"), std::string::npos);
  EXPECT_EQ(SHIM(ncclAllReduce)(f, f, 4, ncclFloat32, static_cast<ncclRedOp_t>(5), comms_[0], nullptr),
            ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("PreMulSum"), std::string::npos);

  ncclRedOp_t op = ncclSum;
  float scalar = 0.5f;
  EXPECT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comms_[0]),
            ncclInvalidUsage);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("ncclRedOpCreatePreMulSum"), std::string::npos);

  ncclComm_t child = nullptr;
  EXPECT_EQ(SHIM(ncclCommSplit)(comms_[0], 0, 0, &child, nullptr), ncclInvalidUsage);
  EXPECT_EQ(child, nullptr);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("ncclCommSplit"), std::string::npos);
  // None of these reached the fake NCCL: a conccl communicator is never handed to it.
}

TEST_F(NcclShimHost, ConcclErrorsKeepTheirMessage) {
  float f[2] = {};
  // Root out of range: conccl's concclInvalidArgument, with conccl's message.
  EXPECT_EQ(SHIM(ncclBroadcast)(f, f, 2, ncclFloat32, 7, comms_[0], nullptr), ncclInvalidArgument);
  std::string msg = SHIM(ncclGetLastError)(comms_[0]);
  EXPECT_NE(msg.find("ncclBroadcast on conccl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("root"), std::string::npos) << msg;
}

}  // namespace
