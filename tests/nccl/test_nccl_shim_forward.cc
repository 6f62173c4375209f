// The shim library itself (libconccl_nccl.so) on the CPU, with CONCCL_NCCL_SHIM=0 and the fake NCCL as the real
// one: every call must reach the fake with the application's arguments and the fake's own communicator in place
// of the shim's wrapper. Built only where the shim is (CUDA + nccl.h); needs no GPU (nothing reaches conccl's
// executor). Declarations come from the real nccl.h, so the calls below are type-checked against NCCL's API.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "nccl/fake_nccl.h"

namespace {


class NcclShimForward : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("CONCCL_NCCL_SHIM", "0", 1);
    setenv("CONCCL_NCCL_REAL_LIB", FAKE_NCCL_PATH, 1);
    shim_ = dlopen(CONCCL_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(shim_, nullptr) << dlerror();
    fake_ = dlopen(FAKE_NCCL_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(fake_, nullptr) << dlerror();
  }

  template <class Fn>
  static Fn shimFn(const char* name) {
    void* s = dlsym(shim_, name);
    EXPECT_NE(s, nullptr) << name;
    return reinterpret_cast<Fn>(s);
  }

  static FakeNcclRecord* record() {
    auto fn = reinterpret_cast<FakeNcclRecord* (*)()>(dlsym(fake_, "fakeNcclRecord"));
    return fn();
  }

  static void* shim_;
  static void* fake_;
};

void* NcclShimForward::shim_ = nullptr;
void* NcclShimForward::fake_ = nullptr;

#define SHIM(name) shimFn<decltype(&::name)>(#name)

// Every function nccl.h declares (read from the header the shim was compiled against) is exported by the shim, so
// that no call of a preloaded program can reach the real NCCL with a shim handle unseen. The exceptions take no
// communicator and are harmless when they reach the real NCCL directly.
TEST_F(NcclShimForward, ExportsEveryFunctionOfNcclH) {
  std::ifstream header(NCCL_HEADER_PATH);
  ASSERT_TRUE(header.good()) << NCCL_HEADER_PATH;
  std::stringstream text;
  text << header.rdbuf();
  const std::string src = text.str();
  std::regex decl(R"((?:ncclResult_t|const char\s*\*|void)\s+(nccl[A-Za-z]+)\s*\()");
  const std::set<std::string> notExported = {"ncclResetDebugInit"};  // deprecated, no communicator
  int declared = 0;
  for (auto it = std::sregex_iterator(src.begin(), src.end(), decl); it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1];
    ++declared;
    if (notExported.count(name)) continue;
    EXPECT_NE(dlsym(shim_, name.c_str()), nullptr) << name << " is declared in nccl.h but not exported by the shim";
  }
  EXPECT_GE(declared, 40);  // the regex still matches the header's style
}

TEST_F(NcclShimForward, ExportsNccl228Api) {
  for (const char* name : {"ncclGetVersion",
                           "ncclGetUniqueId",
                           "ncclCommInitRank",
                           "ncclCommInitRankConfig",
                           "ncclCommInitAll",
                           "ncclCommDestroy",
                           "ncclCommAbort",
                           "ncclCommFinalize",
                           "ncclCommGetAsyncError",
                           "ncclCommCount",
                           "ncclCommCuDevice",
                           "ncclCommUserRank",
                           "ncclGetErrorString",
                           "ncclGetLastError",
                           "ncclGroupStart",
                           "ncclGroupEnd",
                           "ncclAllReduce",
                           "ncclBroadcast",
                           "ncclBcast",
                           "ncclReduce",
                           "ncclAllGather",
                           "ncclReduceScatter",
                           "ncclAlltoAll",
                           "ncclGather",
                           "ncclScatter",
                           "ncclSend",
                           "ncclRecv",
                           "ncclRedOpCreatePreMulSum",
                           "ncclRedOpDestroy",
                           "ncclMemAlloc",
                           "ncclMemFree",
                           "ncclCommRegister",
                           "ncclCommDeregister",
                           "ncclCommWindowRegister",
                           "ncclCommWindowDeregister",
                           "ncclCommSplit",
                           "ncclCommShrink",
                           "ncclCommRevoke",
                           "ncclCommInitRankScalable",
                           "ncclGroupSimulateEnd"}) {
    EXPECT_NE(dlsym(shim_, name), nullptr) << name;
  }
  EXPECT_STREQ(SHIM(ncclGetErrorString)(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)");
}

TEST_F(NcclShimForward, ShimOffForwardsACommunicatorsWholeLife) {
  int version = 0;
  ASSERT_EQ(SHIM(ncclGetVersion)(&version), ncclSuccess);
  EXPECT_EQ(version, 99999);  // the fake's, not the shim's 22809

  ncclUniqueId id;
  ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  EXPECT_EQ(static_cast<unsigned char>(id.internal[0]), 0xAB);
  EXPECT_EQ(id.internal[127], 0);  // no conccl mark

  ncclComm_t comm = nullptr;
  testing::internal::CaptureStderr();
  ASSERT_EQ(SHIM(ncclCommInitRank)(&comm, 4, id, 2), ncclSuccess);
  std::string log = testing::internal::GetCapturedStderr();
  // One line per communicator, always: which path it takes and why.
  EXPECT_NE(log.find("NCCL INFO conccl-shim: ncclCommInitRank: comm"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 2 nranks 4"), std::string::npos) << log;
  EXPECT_NE(log.find("-> NCCL (CONCCL_NCCL_SHIM=0)"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_EQ(record()->nranks, 4);
  EXPECT_EQ(record()->rank, 2);
  EXPECT_EQ(record()->idByte0, 0xAB);
  EXPECT_EQ(record()->configPassed, 0);
  ASSERT_NE(comm, nullptr);

  int count = 0, rank = -1;
  EXPECT_EQ(SHIM(ncclCommCount)(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(SHIM(ncclCommUserRank)(comm, &rank), ncclSuccess);
  EXPECT_EQ(rank, 2);

  // The fake's communicator, which the shim hands to it in place of its wrapper.
  ncclComm_t fakeComm = nullptr;
  ASSERT_EQ(SHIM(ncclAllReduce)(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  fakeComm = static_cast<ncclComm_t>(record()->comm);
  EXPECT_NE(fakeComm, comm);

  float send[3], recv[3];
  auto stream = reinterpret_cast<cudaStream_t>(0x5150);
  ASSERT_EQ(SHIM(ncclAllReduce)(send, recv, 3, ncclBfloat16, ncclMax, comm, stream), ncclSuccess);
  EXPECT_STREQ(record()->lastCall, "ncclAllReduce");
  EXPECT_EQ(record()->sendbuff, send);
  EXPECT_EQ(record()->recvbuff, recv);
  EXPECT_EQ(record()->count, 3u);
  EXPECT_EQ(record()->datatype, ncclBfloat16);
  EXPECT_EQ(record()->op, ncclMax);
  EXPECT_EQ(record()->stream, static_cast<void*>(stream));
  EXPECT_EQ(record()->comm, static_cast<void*>(fakeComm));

  // ncclBcast reaches the real ncclBroadcast in place (the real ncclBcast would call back into the shim).
  ASSERT_EQ(SHIM(ncclBcast)(recv, 3, ncclInt32, 1, comm, stream), ncclSuccess);
  EXPECT_STREQ(record()->lastCall, "ncclBroadcast");
  EXPECT_EQ(record()->sendbuff, recv);
  EXPECT_EQ(record()->recvbuff, recv);
  EXPECT_EQ(record()->root, 1);
  EXPECT_EQ(record()->datatype, ncclInt32);

  // A created op (PreMulSum) is the real NCCL's business on a forwarded communicator.
  ncclRedOp_t op = ncclSum;
  double scalar = 0.5;
  ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_EQ(static_cast<int>(op), 5);
  EXPECT_EQ(record()->comm, static_cast<void*>(fakeComm));
  ASSERT_EQ(SHIM(ncclAllReduce)(send, recv, 3, ncclFloat64, op, comm, stream), ncclSuccess);
  EXPECT_EQ(record()->op, 5);

  int starts = record()->groupStarts, ends = record()->groupEnds;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess);
  EXPECT_EQ(record()->groupStarts, starts + 1);
  EXPECT_EQ(record()->groupEnds, ends + 1);

  EXPECT_STREQ(SHIM(ncclGetLastError)(comm), "fake NCCL's last error");

  ASSERT_EQ(SHIM(ncclCommDestroy)(comm), ncclSuccess);
  EXPECT_STREQ(record()->lastCall, "ncclCommDestroy");
  EXPECT_EQ(record()->comm, static_cast<void*>(fakeComm));
}

// ncclGroupSimulateEnd with the group's calls on forwarded communicators: the real NCCL simulates (its estimate
// comes back), and the group is closed in the shim and in conccl as well (a further ncclGroupEnd is unbalanced).
TEST_F(NcclShimForward, GroupSimulateEndReachesTheRealNcclAndClosesTheGroup) {
  ncclUniqueId id;
  ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(SHIM(ncclCommInitRank)(&comm, 2, id, 0), ncclSuccess);
  const int sims = record()->groupSimulateEnds, ends = record()->groupEnds;
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  float x = 0;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupSimulateEnd)(&info), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  EXPECT_EQ(record()->groupSimulateEnds, sims + 1);
  EXPECT_EQ(record()->groupEnds, ends);
  EXPECT_EQ(info.estimatedTime, 42.5f);  // the real NCCL's estimate, untouched (no conccl call was in the group)
  EXPECT_EQ(SHIM(ncclGroupEnd)(), ncclInvalidUsage);  // closed: nothing is left open to end
  // Nested: the inner ncclGroupSimulateEnd ends one level only.
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupSimulateEnd)(&info), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupEnd)(), ncclSuccess);
  // A simInfo not made by NCCL_SIM_INFO_INITIALIZER fails, and the group is ended all the same.
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  EXPECT_EQ(SHIM(ncclGroupSimulateEnd)(&bad), ncclInvalidArgument);
  EXPECT_NE(std::strstr(SHIM(ncclGetLastError)(nullptr), "NCCL_SIM_INFO_INITIALIZER"), nullptr);
  EXPECT_EQ(SHIM(ncclGroupEnd)(), ncclInvalidUsage);
  // NULL is ncclGroupEnd (NCCL's ncclGroupEndInternal without simInfo launches).
  const int endsBefore = record()->groupEnds;
  ASSERT_EQ(SHIM(ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(SHIM(ncclGroupSimulateEnd)(nullptr), ncclSuccess);
  EXPECT_EQ(record()->groupEnds, endsBefore + 1);
  // Outside any group: ncclInvalidUsage.
  EXPECT_EQ(SHIM(ncclGroupSimulateEnd)(&info), ncclInvalidUsage);
  ASSERT_EQ(SHIM(ncclCommDestroy)(comm), ncclSuccess);
}

// The real NCCL calls some of its own exported functions through the PLT (ncclBroadcast, ncclCommRegister, ...),
// which land in a preloaded shim with the real NCCL's communicator: they must go back to it untouched.
TEST_F(NcclShimForward, RealCommunicatorsPassedBackAreForwarded) {
  ncclUniqueId id;
  ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(SHIM(ncclCommInitRank)(&comm, 2, id, 0), ncclSuccess);
  ASSERT_EQ(SHIM(ncclAllReduce)(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  auto fakeComm = static_cast<ncclComm_t>(record()->comm);
  int x = 0;
  ASSERT_EQ(SHIM(ncclBroadcast)(&x, &x, 1, ncclInt8, 0, fakeComm, nullptr), ncclSuccess);
  EXPECT_EQ(record()->comm, static_cast<void*>(fakeComm));
  int count = 0;
  EXPECT_EQ(SHIM(ncclCommCount)(fakeComm, &count), ncclSuccess);
  EXPECT_EQ(count, 2);
  ASSERT_EQ(SHIM(ncclCommDestroy)(comm), ncclSuccess);
}

TEST_F(NcclShimForward, MissingRealFunctionsFailWithAMessage) {
  ncclUniqueId id;
  ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(SHIM(ncclCommInitRank)(&comm, 2, id, 1), ncclSuccess);
  // The fake has no ncclAllGather.
  int x = 0;
  EXPECT_EQ(SHIM(ncclAllGather)(&x, &x, 1, ncclInt32, comm, nullptr), ncclInvalidUsage);
  EXPECT_NE(std::strstr(SHIM(ncclGetLastError)(comm), "ncclAllGather"), nullptr) << SHIM(ncclGetLastError)(comm);
  EXPECT_EQ(SHIM(ncclCommCount)(nullptr, &x), ncclInvalidArgument);
  ASSERT_EQ(SHIM(ncclCommDestroy)(comm), ncclSuccess);
}

}  // namespace
