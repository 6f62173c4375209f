// writeWholeLine (src/base/log_line.h): processes sharing one stream (torchrun's ranks on one stderr redirected to a
// file) never interleave inside a line, whatever buffering the process gave the stream. In torchrun jobs (2026-12-03)
// the drop-in's lines, then printed with fprintf, came out cut after ~130 bytes and interleaved with other ranks'
// lines: the stream was buffered in pieces shorter than a line. The test gives the stream such a buffer; fprintf
// fails it (1104 of 1200 lines broken, tried on the CPU machine, 2026-12-03), writeWholeLine must not.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "base/log_line.h"

namespace conccl {
namespace {

TEST(LogLine, ProcessesSharingAStreamWriteWholeLinesWhateverItsBuffer) {
  std::string dir = testing::TempDir();
  if (dir.empty() || dir.back() != '/') dir += '/';
  const std::string path = dir + "conccl_log_line." + std::to_string(getpid()) + ".txt";
  FILE* file = std::fopen(path.c_str(), "w");  // one open file description, shared by the children as by torchrun's
  ASSERT_NE(file, nullptr);
  static char smallBuffer[128];
  ASSERT_EQ(setvbuf(file, smallBuffer, _IOLBF, sizeof(smallBuffer)), 0);  // line-buffered in pieces of 128 bytes
  constexpr int kWriters = 4;
  constexpr int kLines = 300;
  constexpr size_t kBody = 700;  // longer than the lines that interleaved (~250 bytes)
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int i = 0; i < kLines; ++i) {
        writeWholeLine(file, "writer " + std::to_string(w) + " line " + std::to_string(i) + " " +
                                 std::string(kBody, static_cast<char>('a' + w)) + " end\n");
      }
      _exit(0);
    }
  }
  for (int w = 0; w < kWriters; ++w) {
    int status = 0;
    ASSERT_GT(wait(&status), 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::fclose(file);

  std::ifstream in(path);
  std::string line;
  int lines = 0;
  int perWriter[kWriters] = {};
  while (std::getline(in, line)) {
    ++lines;
    int w = -1;
    int i = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "writer %d line %d ", &w, &i), 2) << "line " << lines << ": " << line;
    ASSERT_TRUE(w >= 0 && w < kWriters) << line;
    const std::string want = "writer " + std::to_string(w) + " line " + std::to_string(i) + " " +
                             std::string(kBody, static_cast<char>('a' + w)) + " end";
    EXPECT_EQ(line, want) << "line " << lines << " is not one writer's whole line";
    ++perWriter[w];
  }
  EXPECT_EQ(lines, kWriters * kLines);
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(perWriter[w], kLines) << "writer " << w;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace conccl
