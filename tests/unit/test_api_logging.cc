// CONCCL_DEBUG_FILE: warnings go to the file (with "%p" expanded to the pid), nothing to stdout or stderr.
//
// The log sink reads the environment once per process, at the first message: this file holds one test only, and
// sets the variables before anything in the process can log (ctest runs each test in its own process anyway).
#include <conccl/conccl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace conccl::test {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ApiLogging, DebugFileGetsWarningsAndStdoutStaysSilent) {
  std::string dir = testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  const std::string pattern = dir + "conccl_log_test.%p.txt";
  const std::string path = dir + "conccl_log_test." + std::to_string(getpid()) + ".txt";
  std::remove(path.c_str());
  ASSERT_EQ(setenv("CONCCL_DEBUG_FILE", pattern.c_str(), 1), 0);
  ASSERT_EQ(setenv("CONCCL_DEBUG", "INFO", 1), 0);

  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  // A warning (bad argument) and info lines (communicator creation), from the library's normal paths.
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  concclComm_t comm = nullptr;
  concclResult_t init = concclCommInitAll(&comm, 1, nullptr, &config);
  float x = 1.0f;
  concclResult_t bad = concclAllReduce(&x, &x, 1, concclFloat32, concclSum, nullptr, nullptr);
  concclResult_t badRoot = comm != nullptr ? concclBroadcast(&x, &x, 1, concclFloat32, 3, comm, nullptr)
                                           : concclInternalError;
  concclResult_t destroy = comm != nullptr ? concclCommDestroy(comm) : concclInternalError;
  std::fflush(stdout);
  std::fflush(stderr);
  std::string out = testing::internal::GetCapturedStdout();
  std::string err = testing::internal::GetCapturedStderr();
  unsetenv("CONCCL_DEBUG_FILE");
  unsetenv("CONCCL_DEBUG");

  EXPECT_EQ(init, concclSuccess);
  EXPECT_EQ(bad, concclInvalidArgument);
  EXPECT_EQ(badRoot, concclInvalidArgument);
  EXPECT_EQ(destroy, concclSuccess);
  EXPECT_EQ(out, "") << "the library wrote to stdout";
  EXPECT_EQ(err, "") << "with CONCCL_DEBUG_FILE set, nothing goes to stderr";

  std::string log = readFile(path);
  EXPECT_NE(log.find("CONCCL WARN"), std::string::npos) << log;
  EXPECT_NE(log.find("comm is NULL"), std::string::npos) << log;
  EXPECT_NE(log.find("[rank 0 dev -]"), std::string::npos) << "rank of the failing communicator: " << log;
  EXPECT_NE(log.find("root 3"), std::string::npos) << log;
  EXPECT_NE(log.find("CONCCL INFO"), std::string::npos) << log;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace conccl::test
