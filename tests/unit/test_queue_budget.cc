// The CUDA_DEVICE_MAX_CONNECTIONS decision (src/exec/queue_budget.h): which communicators can deadlock on shared
// hardware queues and are refused at init (issue 13, item 3).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/queue_budget.h"

namespace conccl::exec {
namespace {

TEST(QueueBudget, ParsesTheEnvironmentLikeCuda) {
  EXPECT_EQ(deviceConnectionsFrom(nullptr), 8);
  EXPECT_EQ(deviceConnectionsFrom(""), 8);
  EXPECT_EQ(deviceConnectionsFrom("junk"), 8);
  EXPECT_EQ(deviceConnectionsFrom("4x"), 8);
  EXPECT_EQ(deviceConnectionsFrom("1"), 1);
  EXPECT_EQ(deviceConnectionsFrom("32"), 32);
  EXPECT_EQ(deviceConnectionsFrom("64"), 32);  // CUDA's maximum
  EXPECT_EQ(deviceConnectionsFrom("0"), 1);
}

TEST(QueueBudget, OneRankPerGpuAlwaysWorks) {
  // Megatron-LM / TransformerEngine set CUDA_DEVICE_MAX_CONNECTIONS=1: fine with one rank per GPU.
  EXPECT_FALSE(hardwareQueueConflict({0}, 2, 1));
  EXPECT_FALSE(hardwareQueueConflict({0, 1}, 2, 1));
  EXPECT_FALSE(hardwareQueueConflict({0, 1, 2, 3, 4, 5, 6, 7}, 16, 1));
  EXPECT_FALSE(hardwareQueueConflict({3, 1}, 16, 8));
}

TEST(QueueBudget, RanksSharingAGpuWithOneConnectionAreRefused) {
  auto reason = hardwareQueueConflict({0, 0}, 1, 1);
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos) << *reason;
  EXPECT_NE(reason->find("device 0"), std::string::npos) << *reason;
  EXPECT_NE(reason->find("2 ranks"), std::string::npos) << *reason;
  EXPECT_TRUE(hardwareQueueConflict({0, 1, 1}, 2, 1));  // two of three ranks share device 1
}

TEST(QueueBudget, CountsRanksTimesLanesPlusOne) {
  // Default 8 queues, default 2 lanes: 2 ranks x 3 streams = 6 fit, 3 x 3 = 9 do not.
  EXPECT_FALSE(hardwareQueueConflict({0, 0}, 2, 8));
  EXPECT_TRUE(hardwareQueueConflict({0, 0, 0}, 2, 8));
  // 32 queues: 8 ranks x 3 = 24 fit; 8 ranks x (4 + 1) = 40 do not; 4 ranks x (7 + 1) = 32 fit exactly.
  EXPECT_FALSE(hardwareQueueConflict(std::vector<int>(8, 0), 2, 32));
  EXPECT_TRUE(hardwareQueueConflict(std::vector<int>(8, 0), 4, 32));
  EXPECT_FALSE(hardwareQueueConflict(std::vector<int>(4, 0), 7, 32));
  // Per device: 4 ranks on each of two GPUs with 2 lanes need 12 queues on each.
  EXPECT_FALSE(hardwareQueueConflict({0, 0, 0, 0, 1, 1, 1, 1}, 2, 12));
  EXPECT_TRUE(hardwareQueueConflict({0, 0, 0, 0, 1, 1, 1, 1}, 2, 11));
}

TEST(QueueBudget, NamesTheOffendingDevice) {
  auto reason = hardwareQueueConflict({0, 1, 1, 1}, 2, 8);
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("device 1"), std::string::npos) << *reason;
  EXPECT_NE(reason->find("9 streams"), std::string::npos) << *reason;
}

}  // namespace
}  // namespace conccl::exec
