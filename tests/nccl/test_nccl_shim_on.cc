// libconccl_nccl.so with the shim on (the default) and the fake NCCL as the real one, on the CPU: the unique id
// (a rendezvous id, routing.h), the version the shim reports, and calls the real NCCL makes back into a
// preloaded shim. No conccl communicator is created (that needs a GPU: the GPU session's nccl-tests do it).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

class NcclShimOn : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unsetenv("CONCCL_NCCL_SHIM");
    unsetenv("CONCCL_NCCL_COLLS");
    setenv("CONCCL_NCCL_REAL_LIB", FAKE_NCCL_PATH, 1);
    shim_ = dlopen(CONCCL_NCCL_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(shim_, nullptr) << dlerror();
  }
  template <class Fn>
  static Fn shimFn(const char* name) {
    return reinterpret_cast<Fn>(dlsym(shim_, name));
  }
  static void* shim_;
};

void* NcclShimOn::shim_ = nullptr;

#define SHIM(name) shimFn<decltype(&::name)>(#name)

TEST_F(NcclShimOn, ReportsTheNcclVersionItImplements) {
  int version = 0;
  ASSERT_EQ(SHIM(ncclGetVersion)(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  EXPECT_EQ(SHIM(ncclGetVersion)(nullptr), ncclInvalidArgument);
  EXPECT_NE(std::strstr(SHIM(ncclGetLastError)(nullptr), "version is NULL"), nullptr);
}

TEST_F(NcclShimOn, TheIdIsARendezvousIdWhateverTheJobsSize) {
  // Each communicator decides at init from where its ranks are (test_nccl_shim_locality), not from the launcher.
  for (const char* world : {"2", "16"}) {
    setenv("WORLD_SIZE", world, 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
    uint64_t tail = 0;
    std::memcpy(&tail, id.internal + NCCL_UNIQUE_ID_BYTES - 8, 8);
    EXPECT_EQ(tail, 0x43434c5348523031ull);  // routing.h kRendezvousIdTag
    EXPECT_NE(static_cast<unsigned char>(id.internal[0]), 0xAB);  // not the fake's
  }
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_WORLD_SIZE");
  // An id the real NCCL made is the real NCCL's communicator, whatever the shim's switches.
  ncclUniqueId nccl;
  std::memset(&nccl, 0, sizeof(nccl));
  std::memset(nccl.internal, 0xAB, 16);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(SHIM(ncclCommInitRank)(&comm, 16, nccl, 3), ncclSuccess);
  int rank = -1;
  EXPECT_EQ(SHIM(ncclCommUserRank)(comm, &rank), ncclSuccess);
  EXPECT_EQ(rank, 3);
  int x = 0;
  EXPECT_EQ(SHIM(ncclAllReduce)(&x, &x, 1, ncclFloat8e4m3, ncclSum, comm, nullptr), ncclSuccess);  // NCCL's to judge
  EXPECT_EQ(SHIM(ncclCommDestroy)(comm), ncclSuccess);
}

TEST_F(NcclShimOn, UnknownMemoryIsTheRealNcclsToFree) {
  int x = 0;
  // The fake has no ncclMemFree: the shim says so rather than freeing memory it did not allocate.
  EXPECT_EQ(SHIM(ncclMemFree)(&x), ncclInvalidUsage);
  EXPECT_NE(std::strstr(SHIM(ncclGetLastError)(nullptr), "ncclMemFree"), nullptr);
}

TEST_F(NcclShimOn, NullCommunicatorsAreRefused) {
  int x = 0;
  EXPECT_EQ(SHIM(ncclAllReduce)(&x, &x, 1, ncclInt32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::strstr(SHIM(ncclGetLastError)(nullptr), "comm is NULL"), nullptr);
  EXPECT_EQ(SHIM(ncclCommDestroy)(nullptr), ncclSuccess);
}

}  // namespace
