// CollectiveCall::callOwner: one rank reduces the whole call for every rank (AllReduce, ReduceScatter, Reduce), the
// basis of the pair-owned route for late reductions (core/process_clique_pair_owned.cc). Proven by the checker for
// every owner, rank count 2..8, in place and out of place (every rank, and mixed), counts from 0 to several scratch
// pieces, every root; back to back with another owner and with the ordinary, staged and push schedules of the same
// call (a communicator's consecutive calls may take any of them). Checked for what the design needs: a non-owner's
// program follows from nranks and its rank alone, and uses nothing but the ready and done flags.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "sched/builder_util.h"
#include "test_sched_util.h"

namespace conccl::sched::testing {
namespace {

const std::vector<CollKind> kReductions = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kReduce};

// The options of an executor that lets ranks read each other's memory (the owner reads every input in place).
BuildOptions peerOptions(BuildOptions o = BuildOptions{}) {
  o.peerReads = true;
  return o;
}

// Per-rank in-place patterns: none, all, and two mixes.
std::vector<std::vector<bool>> inPlacePatterns(int n) {
  std::vector<std::vector<bool>> patterns(4, std::vector<bool>(static_cast<size_t>(n), false));
  for (int r = 0; r < n; ++r) {
    patterns[1][static_cast<size_t>(r)] = true;
    patterns[2][static_cast<size_t>(r)] = r % 2 == 0;
    patterns[3][static_cast<size_t>(r)] = r % 3 == 1;
  }
  return patterns;
}

std::string inPlaceStr(const std::vector<bool>& inPlace) {
  std::string s;
  for (bool b : inPlace) s += b ? "1" : "0";
  return s;
}

// Proves `call` (with its callOwner) alone and replayed, then back to back with the same call under `otherOwner`, and
// with the call's schedules without an owner: ordinary (as `options`), staged (peerScratchOnly) and pushed into
// scratch (no peer reads). Each pair both ways round.
void expectOwnedValid(const CollectiveCall& call, int otherOwner, const BuildOptions& options) {
  SCOPED_TRACE("owner " + std::to_string(call.callOwner) + ", next owner " + std::to_string(otherOwner));
  expectValid(call, options, /*pair=*/true);
  if (::testing::Test::HasFailure()) return;
  const Schedule owned = buildSchedule(call, options);
  if (call.nranks > 1) {
    EXPECT_EQ(owned.algorithm, "owner-reduces");
  }
  CollectiveCall other = call;
  other.callOwner = otherOwner;
  CollectiveCall plain = call;
  plain.callOwner = -1;
  CollectiveCall staged = plain;
  staged.peerScratchOnly = true;
  BuildOptions pushOptions = options;
  pushOptions.peerReads = false;
  const std::vector<std::tuple<const CollectiveCall*, Schedule, const char*>> neighbours = {
      {&other, buildSchedule(other, options), "another owner"},
      {&plain, buildSchedule(plain, options), "no owner"},
      {&staged, buildSchedule(staged, options), "staged"},
      {&plain, buildSchedule(plain, pushOptions), "no owner, pushed into scratch"},
  };
  for (const auto& [neighbour, schedule, what] : neighbours) {
    const CheckResult after = checkSchedulePair(call, owned, *neighbour, schedule);
    EXPECT_TRUE(after.ok) << "owned, then " << what << ": " << after.error;
    const CheckResult before = checkSchedulePair(*neighbour, schedule, call, owned);
    EXPECT_TRUE(before.ok) << what << ", then owned: " << before.error;
  }
}

// Every reduction, rank count 2..8, every owner, counts 0 / 1 / odd / several scratch pieces, in place (none, all,
// mixed), roots on and off the owner; dtype and op cycle through float32 and bf16 with sum, max and avg.
TEST(OwnerReduce, EveryReductionOwnerAndLayoutIsProven) {
  const std::vector<std::pair<concclDataType_t, concclRedOp_t>> kinds = {{concclFloat32, concclSum},
                                                                         {concclBfloat16, concclMax},
                                                                         {concclFloat32, concclAvg},
                                                                         {concclBfloat16, concclSum},
                                                                         {concclFloat32, concclMax}};
  size_t variant = 0;
  for (CollKind kind : kReductions) {
    for (int n = 2; n <= 8; ++n) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{20001}}) {
        for (const std::vector<bool>& inPlace : inPlacePatterns(n)) {
          for (int owner = 0; owner < n; ++owner) {
            std::vector<int> roots = {owner};
            if (kind == CollKind::kReduce) roots = {owner, (owner + 1) % n, n - 1};
            for (int root : roots) {
              const auto [dtype, op] = kinds[variant++ % kinds.size()];
              CollectiveCall call = makeCall(kind, n, count, dtype, op, root);
              call.inPlace = inPlace;
              call.callOwner = owner;
              // Large counts with a small scratch budget: many pieces, slots reused (depth 1 and 2), 1 to 3 lanes.
              const BuildOptions options =
                  peerOptions(count > 1001 ? tinyOptions(1 + owner % 2, 1 + n % 3) : BuildOptions{});
              SCOPED_TRACE("inPlace " + inPlaceStr(inPlace));
              expectOwnedValid(call, (owner + 1 + n / 2) % n, options);
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Every dtype a reduction takes (fp8 is movement only) with every op (avg only on floating point), a few shapes.
TEST(OwnerReduce, EveryDtypeAndOpIsProven) {
  std::mt19937 rng(20261205);
  for (int dt = 0; dt < concclNumTypes; ++dt) {
    const auto dtype = static_cast<concclDataType_t>(dt);
    if (detail::isFp8(dtype)) continue;
    const bool floating =
        dtype == concclFloat16 || dtype == concclBfloat16 || dtype == concclFloat32 || dtype == concclFloat64;
    for (int o = 0; o < concclNumOps; ++o) {
      const auto op = static_cast<concclRedOp_t>(o);
      if (op == concclAvg && !floating) continue;
      for (CollKind kind : kReductions) {
        for (int n : {2, 3, 5}) {
          CollectiveCall call = makeCall(kind, n, 777, dtype, op, static_cast<int>(rng() % static_cast<unsigned>(n)));
          call.inPlace = inPlacePatterns(n)[rng() % 4];
          call.callOwner = static_cast<int>(rng() % static_cast<unsigned>(n));
          SCOPED_TRACE(std::string(detail::dtypeName(dtype)) + " " + detail::opName(op));
          expectOwnedValid(call, (call.callOwner + 1) % n, peerOptions(tinyOptions(2, 2)));
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// One rank: the call is a local copy (or nothing in place) whoever "owns" it.
TEST(OwnerReduce, OneRankIsALocalCopy) {
  for (CollKind kind : kReductions) {
    for (bool inPlace : {false, true}) {
      CollectiveCall call = makeCall(kind, 1, 100, concclFloat32, concclSum, 0, inPlace);
      call.callOwner = 0;
      expectValid(call, peerOptions(), /*pair=*/true);
      expectValid(call, BuildOptions{}, /*pair=*/true);  // nothing to read of a peer: peerReads is not needed
    }
  }
}

// The owner's scratch: staged pieces never exceed the budget, and the slots are reused many times over (the checker
// proves each reuse ordered after the copy out of the slot).
TEST(OwnerReduce, StagedPiecesStayWithinTheScratchBudget) {
  for (CollKind kind : {CollKind::kReduceScatter, CollKind::kReduce}) {
    for (int depth : {1, 2, 3}) {
      BuildOptions options = peerOptions(tinyOptions(depth, 2));
      options.scratchBudget = 3000;  // not a multiple of 256 or of the depth
      options.minChunkBytes = 256;
      CollectiveCall call = makeCall(kind, 3, 10007, concclFloat32, concclSum, /*root=*/2);
      call.callOwner = 0;
      expectValid(call, options, /*pair=*/true);
      const Schedule s = buildSchedule(call, options);
      EXPECT_GT(s.scratchBytes, 0u);
      EXPECT_LE(s.scratchBytes, options.scratchBudget);
      size_t reductions = 0;
      for (const Op& op : s.programs[0].ops) reductions += std::holds_alternative<Reduce>(op) ? 1 : 0;
      EXPECT_GT(reductions, static_cast<size_t>(depth) * 4) << "expected many pieces through few slots";
    }
  }
  // A budget below one 256-byte slot cannot stage anything.
  BuildOptions options = peerOptions();
  options.scratchBudget = 255;
  CollectiveCall call = makeCall(CollKind::kReduce, 2, 100, concclFloat32, concclSum, /*root=*/1);
  call.callOwner = 0;
  EXPECT_THROW(buildSchedule(call, options), Error);
  call.root = 0;  // the owner is the root: no staging, no scratch
  EXPECT_EQ(buildSchedule(call, options).scratchBytes, 0u);
}

// The shape the route relies on: the owner's Reduce ops each read all n ranks (so avg divides by n) and write its own
// memory; only the owner reduces or copies; a non-owner's program is signals and waits on ready / done flags only.
TEST(OwnerReduce, OnlyTheOwnerWorksAndEveryReduceReadsEveryRank) {
  for (CollKind kind : kReductions) {
    for (int n = 2; n <= 8; ++n) {
      for (int owner = 0; owner < n; ++owner) {
        CollectiveCall call = makeCall(kind, n, 4099, concclFloat32, concclAvg, (owner + 1) % n);
        call.callOwner = owner;
        const Schedule s = buildSchedule(call, peerOptions(tinyOptions(2, 2)));
        EXPECT_TRUE(s.peerReads);
        for (int r = 0; r < n; ++r) {
          for (const Op& op : s.programs[static_cast<size_t>(r)].ops) {
            if (r != owner) {
              const auto* sig = std::get_if<Signal>(&op);
              const auto* w = std::get_if<Wait>(&op);
              ASSERT_TRUE(sig != nullptr || w != nullptr) << "non-owner " << r << " issues " << describeOp(op);
              const int slot = sig != nullptr ? sig->slot : w->slot;
              EXPECT_LT(slot, firstFreeSlot(n)) << "non-owner " << r << " uses a flag beyond ready/done";
              if (sig != nullptr) {
                EXPECT_EQ(sig->lane, kMainStream);
              }
            } else if (const auto* red = std::get_if<Reduce>(&op)) {
              ASSERT_EQ(red->inputs.size(), static_cast<size_t>(n));
              for (int q = 0; q < n; ++q) EXPECT_EQ(red->inputs[static_cast<size_t>(q)].rank, q);
              EXPECT_EQ(red->output.rank, owner);
            }
          }
        }
      }
    }
  }
}

// A non-owner launches before it knows its peers (or which of them will own the call): its program must be the same
// for every owner other than itself and for any arguments of the peers, and in fact follows from nranks and its rank
// alone (count, dtype, op, root and its own in-place choice do not enter it).
TEST(OwnerReduce, ANonOwnersProgramIsTheSameWhoeverOwnsTheCall) {
  std::mt19937 rng(11);
  for (int n = 2; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " rank " + std::to_string(r));
      CollectiveCall first = makeCall(CollKind::kAllReduce, n, 0);
      first.callOwner = (r + 1) % n;
      const RankProgram reference = buildSchedule(first, peerOptions()).programs[static_cast<size_t>(r)];
      EXPECT_FALSE(reference.ops.empty());
      for (CollKind kind : kReductions) {
        for (int owner = 0; owner < n; ++owner) {
          if (owner == r) continue;
          for (const std::vector<bool>& pattern : inPlacePatterns(n)) {
            for (bool flipPeers : {false, true}) {
              std::vector<bool> inPlace = pattern;
              if (flipPeers) {
                for (int p = 0; p < n; ++p) {
                  if (p != r) inPlace[static_cast<size_t>(p)] = !inPlace[static_cast<size_t>(p)];
                }
              }
              const size_t count = std::vector<size_t>{0, 1, 1001, 70001}[rng() % 4];
              CollectiveCall call = makeCall(kind, n, count, rng() % 2 == 0 ? concclFloat32 : concclBfloat16, concclSum,
                                             static_cast<int>(rng() % static_cast<unsigned>(n)));
              call.inPlace = inPlace;
              call.callOwner = owner;
              const BuildOptions options = peerOptions(rng() % 2 == 0 ? BuildOptions{} : tinyOptions(1, 3));
              EXPECT_EQ(buildSchedule(call, options).programs[static_cast<size_t>(r)], reference)
                  << collKindName(kind) << " owner " << owner << " count " << count << " inPlace "
                  << inPlaceStr(inPlace);
            }
          }
        }
      }
    }
  }
}

// The reason a non-owner signals "done" to every peer: with n >= 3 two non-owners are ordered by nothing else, so
// without it one's next "ready" could reach the other before it consumed this one. Dropping those signals (and the
// waits for them) must be caught by the checker back to back, which is what makes the proof of the full schedule mean
// something.
TEST(OwnerReduce, WithoutTheNonOwnersDoneTheNextCallCanOvertakeAFlag) {
  CollectiveCall call = makeCall(CollKind::kAllReduce, 3, 1000);
  call.callOwner = 0;
  const BuildOptions options = peerOptions();
  Schedule s = buildSchedule(call, options);
  for (int r = 0; r < 3; ++r) {
    auto& ops = s.programs[static_cast<size_t>(r)].ops;
    std::vector<Op> kept;
    for (const Op& op : ops) {
      const auto* sig = std::get_if<Signal>(&op);
      const auto* w = std::get_if<Wait>(&op);
      // Keep the owner's done to each non-owner (slot doneSlot(n, 0)) and its wait only there.
      if (sig != nullptr && sig->slot >= 3 && sig->slot < 6 && r != 0) continue;
      if (w != nullptr && w->slot >= 3 && w->slot < 6 && (r == 0 || w->slot != doneSlot(3, 0))) continue;
      kept.push_back(op);
    }
    ops = kept;
  }
  ASSERT_TRUE(checkSchedule(call, s).ok) << checkSchedule(call, s).error;  // alone it is correct
  const CheckResult twice = checkSchedulePair(call, s, call, s);
  EXPECT_FALSE(twice.ok);
  EXPECT_NE(twice.error.find("ignal"), std::string::npos) << twice.error;
}

TEST(OwnerReduce, InvalidOwnersAndCombinationsAreRefused) {
  auto refused = [](const CollectiveCall& call, const std::string& fragment, const BuildOptions& o) {
    try {
      buildSchedule(call, o);
      ADD_FAILURE() << "no error for " << callStr(call, o) << " owner " << call.callOwner;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), concclInvalidArgument) << e.what();
      EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
    }
  };
  const BuildOptions options = peerOptions();
  CollectiveCall call = makeCall(CollKind::kAllReduce, 3, 100);
  for (int bad : {-2, 3, 7}) {
    call.callOwner = bad;
    refused(call, "callOwner " + std::to_string(bad) + " out of range", options);
  }
  call.callOwner = 1;
  EXPECT_NO_THROW(buildSchedule(call, options));
  refused(call, "needs BuildOptions::peerReads", BuildOptions{});
  for (CollKind kind :
       {CollKind::kAllGather, CollKind::kBroadcast, CollKind::kAllToAll, CollKind::kGather, CollKind::kScatter}) {
    CollectiveCall movement = makeCall(kind, 3, 100);
    movement.callOwner = 0;
    refused(movement, "callOwner is defined for reductions only", options);
  }
  CollectiveCall staged = call;
  staged.peerScratchOnly = true;
  refused(staged, "callOwner and peerScratchOnly", options);
  CollectiveCall paired = call;
  paired.pairOwner = {-1, 0, 0, 0, -1, 1, 0, 1, -1};
  refused(paired, "callOwner and pairOwner", options);
  CollectiveCall pushed = makeCall(CollKind::kReduceScatter, 3, 100);
  pushed.callOwner = 2;
  pushed.pushInputs = true;
  refused(pushed, "callOwner and pushInputs", options);
  // The checker refuses such calls too (it validates the call it is given).
  const Schedule s = buildSchedule(call, options);
  EXPECT_FALSE(checkSchedule(staged, s).ok);
}

}  // namespace
}  // namespace conccl::sched::testing
