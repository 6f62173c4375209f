// Owner-reduces schedules (sched::CollectiveCall::callOwner) run, not only proven: each rank's program on the host
// executor (a thread per rank, real memory, the owner's Reduce ops reading its peers' buffers in place), several calls
// back to back on one executor with a different owner each time and ordinary calls between them (the flags and the
// owner's scratch reused by the next call), ranks in place or not, results compared bit for bit with the host
// reduction (exec/host/host_reduce.h) over every rank's input in rank order.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "exec/executor.h"
#include "exec/host/host_reduce.h"
#include "sched/builder_util.h"
#include "sched/schedule.h"
#include "test_sched_util.h"

namespace conccl {
namespace {

using sched::CollectiveCall;
using sched::CollKind;

// Every rank's buffers of one call: random inputs, outputs poisoned; an in-place rank has only the buffer its program
// references (sched::inPlaceBuffer), which holds its input.
struct Buffers {
  std::vector<std::vector<std::vector<uint8_t>>> bytes;  // [rank][buffer index]
  std::vector<std::vector<uint8_t>> input;               // [rank] -> its logical sendbuff before the call
  exec::CallBinding binding;

  Buffers(const CollectiveCall& call, std::mt19937& rng) {
    const auto n = static_cast<size_t>(call.nranks);
    const size_t es = sched::detail::typeSize(call.dtype);
    bytes.resize(n);
    input.resize(n);
    binding.buffers.resize(n);
    binding.streams.assign(n, nullptr);
    std::uniform_real_distribution<float> value(-100.0f, 100.0f);
    auto fillRandom = [&](std::vector<uint8_t>& v) {
      for (size_t i = 0; i + es <= v.size(); i += es) {
        const float x = value(rng);
        if (call.dtype == concclBfloat16) {
          const uint16_t b = exec::floatToBf16(x);
          std::memcpy(&v[i], &b, sizeof(b));
        } else {
          std::memcpy(&v[i], &x, sizeof(x));
        }
      }
    };
    for (size_t r = 0; r < n; ++r) {
      const int rank = static_cast<int>(r);
      const std::vector<size_t> sizes = sched::bufferBytes(call, rank);
      const bool inPlace = sched::detail::inPlaceRank(call, rank);
      const int used = sched::inPlaceBuffer(call.kind);
      for (size_t b = 0; b < sizes.size(); ++b) {
        const bool allocated = !inPlace || static_cast<int>(b) == used;
        bytes[r].emplace_back(allocated ? sizes[b] : 0, uint8_t{0xA5});
      }
      std::vector<uint8_t>& send = bytes[r][inPlace ? static_cast<size_t>(used) : 0];
      fillRandom(send);
      input[r] = send;
      for (auto& v : bytes[r]) binding.buffers[r].push_back(v.empty() ? nullptr : v.data());
    }
  }

  // The buffer that holds rank r's output (at r * count elements for an in-place ReduceScatter rank).
  const std::vector<uint8_t>& outputBuffer(const CollectiveCall& call, int r) const {
    const bool inPlace = sched::detail::inPlaceRank(call, r);
    return bytes[static_cast<size_t>(r)][inPlace ? static_cast<size_t>(sched::inPlaceBuffer(call.kind)) : 1];
  }
};

// What rank r's recvbuff must hold: the reduction over every rank's input (block r for ReduceScatter), in rank order.
std::vector<uint8_t> expected(const CollectiveCall& call, const Buffers& b, int r) {
  const size_t bytes = call.count * sched::detail::typeSize(call.dtype);
  const size_t at = call.kind == CollKind::kReduceScatter ? static_cast<size_t>(r) * bytes : 0;
  std::vector<const void*> inputs;
  for (const auto& in : b.input) inputs.push_back(in.data() + at);
  std::vector<uint8_t> want(bytes);
  if (bytes > 0) exec::reduceHost(inputs, want.data(), call.count, call.dtype, call.op);
  return want;
}

void runAndCheck(exec::Executor& executor, const CollectiveCall& call, std::mt19937& rng, const std::string& what) {
  SCOPED_TRACE(what);
  const sched::Schedule s = sched::buildSchedule(call, executor.buildOptions());
  if (call.callOwner >= 0) {
    ASSERT_EQ(s.algorithm, "owner-reduces");
  }
  Buffers b(call, rng);
  std::vector<std::thread> ranks;
  for (int r = 0; r < call.nranks; ++r) ranks.emplace_back([&, r] { executor.launch(s, b.binding, r); });
  for (auto& t : ranks) t.join();
  const size_t bytes = call.count * sched::detail::typeSize(call.dtype);
  for (int r = 0; r < call.nranks; ++r) {
    if (call.kind == CollKind::kReduce && r != call.root) continue;
    const bool inPlace = sched::detail::inPlaceRank(call, r);
    const size_t at = inPlace && call.kind == CollKind::kReduceScatter ? static_cast<size_t>(r) * bytes : 0;
    const std::vector<uint8_t>& out = b.outputBuffer(call, r);
    ASSERT_GE(out.size(), at + bytes);
    const std::vector<uint8_t> want = expected(call, b, r);
    EXPECT_EQ(bytes == 0 ? 0 : std::memcmp(out.data() + at, want.data(), bytes), 0) << "rank " << r << " output";
    if (!inPlace) {
      EXPECT_EQ(b.bytes[static_cast<size_t>(r)][0], b.input[static_cast<size_t>(r)]) << "rank " << r << " sendbuff";
    }
  }
}

TEST(HostOwnerReduce, ReductionsRunCorrectlyWithAChangingOwnerBackToBack) {
  std::mt19937 rng(20261205);
  const std::vector<std::pair<concclDataType_t, concclRedOp_t>> variants = {
      {concclFloat32, concclSum}, {concclBfloat16, concclSum}, {concclFloat32, concclAvg}, {concclBfloat16, concclMax}};
  for (int n : {2, 3, 4}) {
    Config config;
    config.scratchBytes = size_t{64} << 10;  // large calls go through the owner's scratch in many pieces
    const std::unique_ptr<exec::Executor> executor = exec::makeHostExecutor(n, config);
    ASSERT_TRUE(executor->buildOptions().peerReads);
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kReduce}) {
      for (int i = 0; i < 8; ++i) {
        const size_t count = std::vector<size_t>{1000, 70001, 0, 1}[static_cast<size_t>(i) % 4];
        const auto [dtype, op] = variants[static_cast<size_t>(i) % variants.size()];
        CollectiveCall c =
            sched::testing::makeCall(kind, n, count, dtype, op, static_cast<int>(rng() % static_cast<unsigned>(n)));
        for (int r = 0; r < n; ++r) c.inPlace[static_cast<size_t>(r)] = rng() % 2 == 0;
        // Every owner in turn, and every third call an ordinary one (no owner) in between.
        c.callOwner = i % 3 == 2 ? -1 : (i + n / 2) % n;
        runAndCheck(*executor, c, rng,
                    std::string(sched::collKindName(kind)) + " n=" + std::to_string(n) + " call " + std::to_string(i) +
                        " owner " + std::to_string(c.callOwner) + " root " + std::to_string(c.root) + " count " +
                        std::to_string(count));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace conccl
