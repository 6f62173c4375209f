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
#include <thread>
#include <vector>

namespace {

class NcclShimHost : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unsetenv("CONCCL_NCCL_SHIM");
    setenv("CONCCL_BACKEND", "host", 1);
    setenv("CONCCL_NCCL_COLLS", "all_reduce,all_gather,broadcast,reduce,send_recv,all_to_all", 1);
    setenv("CONCCL_NCCL_REAL_LIB", FAKE_NCCL_PATH, 1);
    // 8 blocks of the smallest size: a group that kept its PreMulSum scratch, or a call that did not give it back,
    // would exhaust it within a few calls (ScratchLeaksNothing).
    setenv("CONCCL_NCCL_SCRATCH_MAX_BYTES", "512K", 1);
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

// NCCL runs AllToAll in place (nccl-tests checks that column); conccl refuses it, so the shim stages the input.
TEST_F(NcclShimHost, AllToAllInPlaceIsStaged) {
  int32_t b0[4] = {1, 2, 3, 4}, b1[4] = {5, 6, 7, 8};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAlltoAll)(b0, b0, 2, ncclInt32, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAlltoAll)(b1, b1, 2, ncclInt32, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  const int32_t want0[4] = {1, 2, 5, 6}, want1[4] = {3, 4, 7, 8};
  EXPECT_EQ(std::memcmp(b0, want0, sizeof(b0)), 0);
  EXPECT_EQ(std::memcmp(b1, want1, sizeof(b1)), 0);
  // Out of place is untouched by the staging.
  int32_t s0[4] = {1, 2, 3, 4}, s1[4] = {5, 6, 7, 8}, o0[4] = {}, o1[4] = {};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAlltoAll)(s0, o0, 2, ncclInt32, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAlltoAll)(s1, o1, 2, ncclInt32, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(std::memcmp(o0, want0, sizeof(o0)), 0);
  EXPECT_EQ(std::memcmp(o1, want1, sizeof(o1)), 0);
}

TEST_F(NcclShimHost, WhatConcclCannotRunExactlyFailsWithAMessage) {
  float f[4] = {};
  EXPECT_EQ(SHIM(ncclReduceScatter)(f, f, 2, ncclFloat32, ncclSum, comms_[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("reduce_scatter is not in CONCCL_NCCL_COLLS"),
            std::string::npos)
      << SHIM(ncclGetLastError)(comms_[0]);
  EXPECT_EQ(SHIM(ncclAllReduce)(f, f, 4, ncclFloat8e4m3, ncclSum, comms_[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("does not reduce ncclFloat8e4m3"), std::string::npos);
  // An op the communicator never made.
  EXPECT_EQ(SHIM(ncclAllReduce)(f, f, 4, ncclFloat32, static_cast<ncclRedOp_t>(5), comms_[0], nullptr),
            ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("PreMulSum"), std::string::npos);
  EXPECT_EQ(SHIM(ncclRedOpDestroy)(static_cast<ncclRedOp_t>(9), comms_[0]), ncclInvalidArgument);
  // A PreMulSum op of fp8 (conccl does not sum fp8), and a split inside a group (it must exchange first).
  ncclRedOp_t op = ncclSum;
  float scalar = 0.5f;
  EXPECT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&op, &scalar, ncclFloat8e4m3, ncclScalarHostImmediate, comms_[0]),
            ncclInvalidArgument);
  ncclComm_t child = nullptr;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  EXPECT_EQ(SHIM(ncclCommSplit)(comms_[0], 0, 0, &child, nullptr), ncclInvalidUsage);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess);
  EXPECT_EQ(child, nullptr);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("inside ncclGroupStart/End"), std::string::npos);
  // None of these reached the fake NCCL: a conccl communicator is never handed to it.
}

// NCCL's PreMulSum: sum over ranks of (scalar * x_r), each product rounded to the type before the sum. The
// expected values are computed the same way here; two calls in one group each keep their own pre-multiplied input.
TEST_F(NcclShimHost, PreMulSumPreMultipliesBeforeTheSum) {
  ncclRedOp_t ops[2];
  const float scalar = 1.0f / 3.0f;
  for (int r = 0; r < 2; ++r) {
    float s = scalar;  // HostImmediate: read at creation, so the variable may change afterwards
    ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&ops[r], &s, ncclFloat32, ncclScalarHostImmediate, comms_[r]),
              ncclSuccess)
        << SHIM(ncclGetLastError)(comms_[r]);
    s = 100.0f;
    EXPECT_GE(static_cast<int>(ops[r]), static_cast<int>(ncclNumOps));
  }
  float x0[4] = {1, 2, 3, 0.1f}, x1[4] = {10, 20, 30, 0.7f}, y0[4] = {}, y1[4] = {};
  float rs0[2] = {}, rs1[2] = {};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(x0, y0, 4, ncclFloat32, ops[0], comms_[0], nullptr), ncclSuccess)
      << SHIM(ncclGetLastError)(comms_[0]);
  ASSERT_EQ(SHIM(ncclAllReduce)(x1, y1, 4, ncclFloat32, ops[1], comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclReduceScatter)(x0, rs0, 2, ncclFloat32, ops[0], comms_[0], nullptr), ncclInvalidArgument)
      << "reduce_scatter is left out of CONCCL_NCCL_COLLS in this suite";
  // Other inputs than the all-reduce's: a scratch region shared by two calls of the group would show.
  float z0[2] = {5.5f, -6.25f}, z1[2] = {7.0f, 0.3f};
  ASSERT_EQ(SHIM(ncclReduce)(z1, rs1, 2, ncclFloat32, ops[1], 1, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclReduce)(z0, rs0, 2, ncclFloat32, ops[0], 1, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  for (int i = 0; i < 4; ++i) {
    const float expect = x0[i] * scalar + x1[i] * scalar;
    EXPECT_EQ(y0[i], expect) << i;
    EXPECT_EQ(y1[i], expect) << i;
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(rs1[i], z0[i] * scalar + z1[i] * scalar) << i;
  // Inputs untouched (the multiplication goes to scratch memory); the ops are destroyed once.
  EXPECT_EQ(x0[3], 0.1f);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(SHIM(ncclRedOpDestroy)(ops[r], comms_[r]), ncclSuccess);
    EXPECT_EQ(SHIM(ncclRedOpDestroy)(ops[r], comms_[r]), ncclInvalidArgument);
  }
  // Integer PreMulSum wraps like the type; an op used with another type than its own is refused.
  ncclRedOp_t iop;
  int64_t k = -3;
  int64_t a[2] = {5, 7}, b[2] = {1, 2}, oa[2] = {}, ob[2] = {};
  ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&iop, &k, ncclInt64, ncclScalarHostImmediate, comms_[0]), ncclSuccess);
  ncclRedOp_t iop1;
  ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&iop1, &k, ncclInt64, ncclScalarHostImmediate, comms_[1]), ncclSuccess);
  EXPECT_EQ(SHIM(ncclAllReduce)(x0, y0, 4, ncclFloat32, iop, comms_[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("made for ncclInt64"), std::string::npos)
      << SHIM(ncclGetLastError)(comms_[0]);
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(a, oa, 2, ncclInt64, iop, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(b, ob, 2, ncclInt64, iop1, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(oa[0], -18);
  EXPECT_EQ(ob[1], -27);
}

// ncclGroupSimulateEnd on conccl communicators: the group's calls are dropped (their buffers untouched), the
// estimate is "unknown", the group is closed, and the next group starts clean (its own calls only).
TEST_F(NcclShimHost, GroupSimulateEndDropsTheGroupsCallsAndTheNextGroupStartsClean) {
  float a[2] = {1, 2}, b[2] = {10, 20}, oa[2] = {-1, -1}, ob[2] = {-1, -1};
  ncclRedOp_t ops[2];
  const float half = 0.5f;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&ops[r], const_cast<float*>(&half), ncclFloat32,
                                             ncclScalarHostImmediate, comms_[r]),
              ncclSuccess);
  }
  int32_t s0[2] = {1, 2}, s1[2] = {3, 4}, g0[4] = {}, g1[4] = {};
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(a, a, 2, ncclFloat32, ncclSum, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(b, b, 2, ncclFloat32, ncclSum, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(a, oa, 2, ncclFloat32, ops[0], comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(b, ob, 2, ncclFloat32, ops[1], comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllGather)(s0, g0, 2, ncclInt32, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllGather)(s1, g1, 2, ncclInt32, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupSimulateEnd)(&info), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(b[1], 20.0f);
  EXPECT_EQ(oa[0], -1.0f);
  EXPECT_EQ(ob[1], -1.0f);
  EXPECT_EQ(g0[3], 0);
  EXPECT_EQ(g1[0], 0);
  EXPECT_EQ(info.estimatedTime, NCCL_UNDEF_FLOAT);  // conccl estimates nothing: unknown, not the fake's 42.5
  EXPECT_EQ(SHIM(ncclGroupEnd)(), ncclInvalidUsage) << "the simulated group must be closed";
  // The next group runs its own calls only: had the dropped ones survived, a and b would be summed too.
  float c[2] = {3, 4}, d[2] = {5, 6};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(c, c, 2, ncclFloat32, ncclSum, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(d, d, 2, ncclFloat32, ncclSum, comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(c[0], 8.0f);
  EXPECT_EQ(d[1], 10.0f);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(b[1], 20.0f);
  EXPECT_EQ(oa[0], -1.0f);
  // Nested: the inner ncclGroupSimulateEnd only ends its level; the outer ncclGroupEnd runs the calls.
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(a, oa, 2, ncclFloat32, ops[0], comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(b, ob, 2, ncclFloat32, ops[1], comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupSimulateEnd)(&info), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(oa[0], 0.5f * 1 + 0.5f * 10);
  EXPECT_EQ(ob[1], 0.5f * 2 + 0.5f * 20);
  // A bad simInfo: ncclInvalidArgument with a message, the calls dropped, the group closed.
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 1;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(c, c, 2, ncclFloat32, ncclSum, comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(d, d, 2, ncclFloat32, ncclSum, comms_[1], nullptr), ncclSuccess);
  EXPECT_EQ(SHIM(ncclGroupSimulateEnd)(&bad), ncclInvalidArgument);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(nullptr)).find("NCCL_SIM_INFO_INITIALIZER"), std::string::npos);
  EXPECT_EQ(c[0], 8.0f);
  EXPECT_EQ(SHIM(ncclGroupEnd)(), ncclInvalidUsage);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(SHIM(ncclRedOpDestroy)(ops[r], comms_[r]), ncclSuccess);
}

// The scratch limit of this suite is 512 KiB (8 blocks of 64 KiB). Calls that kept their block (in or out of
// groups, launched or simulated) would exhaust it within a few rounds; a call above the limit fails with a message.
TEST_F(NcclShimHost, ScratchLeaksNothingAndTheLimitIsAClearError) {
  ncclRedOp_t ops[2];
  const float third = 1.0f / 3.0f;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&ops[r], const_cast<float*>(&third), ncclFloat32,
                                             ncclScalarHostImmediate, comms_[r]),
              ncclSuccess);
  }
  std::vector<float> x0(1000, 3.0f), x1(1000, 6.0f), y0(1000), y1(1000);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  for (int round = 0; round < 30; ++round) {
    ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(SHIM(ncclAllReduce)(x0.data(), y0.data(), 1000, ncclFloat32, ops[0], comms_[0], nullptr), ncclSuccess)
          << "round " << round << ": " << SHIM(ncclGetLastError)(comms_[0]);
      ASSERT_EQ(SHIM(ncclAllReduce)(x1.data(), y1.data(), 1000, ncclFloat32, ops[1], comms_[1], nullptr), ncclSuccess)
          << "round " << round << ": " << SHIM(ncclGetLastError)(comms_[1]);
    }
    if (round % 2 == 0) {
      ASSERT_EQ(SHIM(ncclGroupSimulateEnd)(&info), ncclSuccess);
    } else {
      ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
      EXPECT_EQ(y0[999], 3.0f * third + 6.0f * third);
    }
  }
  // In-place AllToAll staging takes from the same pool and gives back too.
  std::vector<int32_t> b0(4000, 1), b1(4000, 2);
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
    ASSERT_EQ(SHIM(ncclAlltoAll)(b0.data(), b0.data(), 2000, ncclInt32, comms_[0], nullptr), ncclSuccess);
    ASSERT_EQ(SHIM(ncclAlltoAll)(b1.data(), b1.data(), 2000, ncclInt32, comms_[1], nullptr), ncclSuccess);
    ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  }
  // 1 MiB of input does not fit under 512 KiB: an error naming the limit, nothing run.
  std::vector<float> big(1 << 18, 1.0f), out(1 << 18, -1.0f);
  EXPECT_EQ(SHIM(ncclAllReduce)(big.data(), out.data(), big.size(), ncclFloat32, ops[0], comms_[0], nullptr),
            ncclSystemError);
  EXPECT_NE(std::string(SHIM(ncclGetLastError)(comms_[0])).find("CONCCL_NCCL_SCRATCH_MAX_BYTES"), std::string::npos)
      << SHIM(ncclGetLastError)(comms_[0]);
  EXPECT_EQ(out[0], -1.0f);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(SHIM(ncclRedOpDestroy)(ops[r], comms_[r]), ncclSuccess);
}

// bf16 PreMulSum on the host backend, with the scalar read as NCCL reads it: two bytes of bf16. A float passed as a
// bf16 scalar (what PyTorch's ProcessGroupNCCL does) is read as its two low bytes: 0.5f -> bf16 0x0000 = 0.
TEST_F(NcclShimHost, Bfloat16ScalarIsTwoBytesOfBfloat16) {
  const uint16_t bf16Half = 0x3f00;  // 0.5
  const float floatHalf = 0.5f;     // 0x3f000000: its low two bytes are 0
  ncclRedOp_t good[2], torchLike[2];
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&good[r], const_cast<uint16_t*>(&bf16Half), ncclBfloat16,
                                             ncclScalarHostImmediate, comms_[r]),
              ncclSuccess)
        << SHIM(ncclGetLastError)(comms_[r]);
    ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&torchLike[r], const_cast<float*>(&floatHalf), ncclBfloat16,
                                             ncclScalarHostImmediate, comms_[r]),
              ncclSuccess);
  }
  // bf16 1.0, 3.0, -2.5 on rank 0; 2.0, 0.5, 6.0 on rank 1.
  uint16_t x0[3] = {0x3f80, 0x4040, 0xc020}, x1[3] = {0x4000, 0x3f00, 0x40c0}, y0[3] = {}, y1[3] = {};
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(x0, y0, 3, ncclBfloat16, good[0], comms_[0], nullptr), ncclSuccess)
      << SHIM(ncclGetLastError)(comms_[0]);
  ASSERT_EQ(SHIM(ncclAllReduce)(x1, y1, 3, ncclBfloat16, good[1], comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  const uint16_t want[3] = {0x3fc0, 0x3fe0, 0x3fe0};  // 1.5, 1.75, 1.75 (exact)
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(y0[i], want[i]) << i;
    EXPECT_EQ(y1[i], want[i]) << i;
  }
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(x0, y0, 3, ncclBfloat16, torchLike[0], comms_[0], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(x1, y1, 3, ncclBfloat16, torchLike[1], comms_[1], nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y0[i] & 0x7fff, 0) << i;  // +-0: multiplied by bf16 0
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(SHIM(ncclRedOpDestroy)(good[r], comms_[r]), ncclSuccess);
    EXPECT_EQ(SHIM(ncclRedOpDestroy)(torchLike[r], comms_[r]), ncclSuccess);
  }
}

TEST_F(NcclShimHost, ConcclErrorsKeepTheirMessage) {
  float f[2] = {};
  // Root out of range: conccl's concclInvalidArgument, with conccl's message.
  EXPECT_EQ(SHIM(ncclBroadcast)(f, f, 2, ncclFloat32, 7, comms_[0], nullptr), ncclInvalidArgument);
  std::string msg = SHIM(ncclGetLastError)(comms_[0]);
  EXPECT_NE(msg.find("ncclBroadcast on conccl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("root"), std::string::npos) << msg;
}


// ncclCommSplit of a conccl communicator: one thread per parent rank (the split exchanges with the peers before
// returning, as NCCL's does), colors {0, 1, 0, NOCOLOR}, keys {5, 0, 1, 0}: child A = parents {2, 0} in that
// order, child B = parent {1}, parent 3 gets NULL. The children then run an all-reduce.
TEST(NcclShimHostSplit, ColorsKeysAndNoColorAsNccl) {
  setenv("CONCCL_BACKEND", "host", 1);
  void* shim = dlopen(CONCCL_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(shim, nullptr) << dlerror();
  auto fn = [&](const char* name) { return dlsym(shim, name); };
  auto initAll = reinterpret_cast<decltype(&::ncclCommInitAll)>(fn("ncclCommInitAll"));
  auto split = reinterpret_cast<decltype(&::ncclCommSplit)>(fn("ncclCommSplit"));
  auto count = reinterpret_cast<decltype(&::ncclCommCount)>(fn("ncclCommCount"));
  auto userRank = reinterpret_cast<decltype(&::ncclCommUserRank)>(fn("ncclCommUserRank"));
  auto allReduce = reinterpret_cast<decltype(&::ncclAllReduce)>(fn("ncclAllReduce"));
  auto destroy = reinterpret_cast<decltype(&::ncclCommDestroy)>(fn("ncclCommDestroy"));
  auto lastError = reinterpret_cast<decltype(&::ncclGetLastError)>(fn("ncclGetLastError"));
  ncclComm_t parents[4] = {};
  testing::internal::CaptureStderr();
  ASSERT_EQ(initAll(parents, 4, nullptr), ncclSuccess);
  const int colors[4] = {0, 1, 0, NCCL_SPLIT_NOCOLOR}, keys[4] = {5, 0, 1, 0};
  ncclComm_t children[4] = {};
  ncclResult_t results[4] = {};
  std::string errors[4];
  int sizes[4] = {}, ranks[4] = {};
  float sums[4][2] = {};
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      results[r] = split(parents[r], colors[r], keys[r], &children[r], nullptr);
      if (results[r] != ncclSuccess) {
        errors[r] = lastError(parents[r]);
        return;
      }
      if (children[r] == nullptr) return;
      count(children[r], &sizes[r]);
      userRank(children[r], &ranks[r]);
      float x[2] = {static_cast<float>(r + 1), static_cast<float>(10 * (r + 1))};
      if (allReduce(x, sums[r], 2, ncclFloat32, ncclSum, children[r], nullptr) != ncclSuccess) {
        errors[r] = lastError(children[r]);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string log = testing::internal::GetCapturedStderr();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(results[r], ncclSuccess) << r << ": " << errors[r];
    EXPECT_TRUE(errors[r].empty()) << r << ": " << errors[r];
  }
  EXPECT_EQ(children[3], nullptr);
  EXPECT_EQ(sizes[0], 2);
  EXPECT_EQ(sizes[2], 2);
  EXPECT_EQ(sizes[1], 1);
  EXPECT_EQ(ranks[2], 0);  // key 1 before key 5
  EXPECT_EQ(ranks[0], 1);
  EXPECT_EQ(ranks[1], 0);
  EXPECT_EQ(sums[0][0], 1.0f + 3.0f);  // parents 0 and 2
  EXPECT_EQ(sums[2][1], 10.0f + 30.0f);
  EXPECT_EQ(sums[1][0], 2.0f);
  EXPECT_NE(log.find("ncclCommSplit: comm"), std::string::npos) << log;
  EXPECT_NE(log.find("-> conccl (split of a conccl communicator: color 0, key 5, parent rank 0)"), std::string::npos)
      << log;
  for (int r = 0; r < 4; ++r) {
    if (children[r] != nullptr) {
      EXPECT_EQ(destroy(children[r]), ncclSuccess);
    }
    EXPECT_EQ(destroy(parents[r]), ncclSuccess);
  }
}

}  // namespace
