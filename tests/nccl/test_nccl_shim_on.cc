// libconccl_nccl.so with the shim on (the default) and the fake NCCL as the real one, on the CPU: the per-job
// unique-id decision and its mark, the version the shim reports, and calls the real NCCL makes back into a
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

TEST_F(NcclShimOn, OneNodeJobsGetAMarkedConcclIdOthersTheRealNcclsId) {
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_WORLD_SIZE");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  uint64_t tail = 0;
  std::memcpy(&tail, id.internal + NCCL_UNIQUE_ID_BYTES - 8, 8);
  EXPECT_EQ(tail, 0x43434c53484d3031ull);  // routing.h kConcclIdTag
  EXPECT_NE(static_cast<unsigned char>(id.internal[0]), 0xAB);

  setenv("WORLD_SIZE", "16", 1);
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  EXPECT_EQ(static_cast<unsigned char>(id.internal[0]), 0xAB);  // the fake's
  std::memcpy(&tail, id.internal + NCCL_UNIQUE_ID_BYTES - 8, 8);
  EXPECT_EQ(tail, 0u);
  // ... and a communicator made from it is the real NCCL's.
  ncclComm_t comm = nullptr;
  ASSERT_EQ(SHIM(ncclCommInitRank)(&comm, 16, id, 3), ncclSuccess);
  int rank = -1;
  EXPECT_EQ(SHIM(ncclCommUserRank)(comm, &rank), ncclSuccess);
  EXPECT_EQ(rank, 3);
  int x = 0;
  EXPECT_EQ(SHIM(ncclAllReduce)(&x, &x, 1, ncclFloat8e4m3, ncclSum, comm, nullptr), ncclSuccess);  // NCCL's to judge
  EXPECT_EQ(SHIM(ncclCommDestroy)(comm), ncclSuccess);
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_WORLD_SIZE");
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
