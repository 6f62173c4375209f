// Every builder x ranks 1..8 x counts {0, 1, 7, 4099, 1<<20} x in/out of place, with the default options
// and with a tiny scratch budget (many pipelined chunks), each schedule proven by the checker. Element
// types and ops rotate through the matrix (the schedule depends only on the element size), and separate
// tests cover every (dtype, op) of every collective at least once.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "test_sched_util.h"

namespace conccl::sched::testing {
namespace {

const std::vector<size_t> kCounts = {0, 1, 7, 4099, size_t{1} << 20};
const std::vector<concclDataType_t> kAllTypes = {concclInt8,    concclUint8,   concclInt32,      concclUint32,
                                                 concclInt64,   concclUint64,  concclFloat16,    concclBfloat16,
                                                 concclFloat32, concclFloat64, concclFloat8e4m3, concclFloat8e5m2};
const std::vector<concclDataType_t> kReduceTypes(kAllTypes.begin(), kAllTypes.end() - 2);
const std::vector<concclRedOp_t> kOps = {concclSum, concclProd, concclMax, concclMin, concclAvg};

const std::vector<CollKind> kKinds = {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllReduce,
                                      CollKind::kBroadcast, CollKind::kReduce,        CollKind::kAllToAll,
                                      CollKind::kGather,    CollKind::kScatter};

bool reduces(CollKind k) {
  return k == CollKind::kReduceScatter || k == CollKind::kAllReduce || k == CollKind::kReduce;
}

// Picks a dtype, op and root that vary along the matrix.
CollectiveCall matrixCall(CollKind kind, int n, size_t countIdx, bool inPlace) {
  const size_t salt = static_cast<size_t>(n) * 7 + countIdx * 3 + (inPlace ? 1 : 0);
  const auto& types = reduces(kind) ? kReduceTypes : kAllTypes;
  return makeCall(kind, n, kCounts[countIdx], types[salt % types.size()], kOps[salt % kOps.size()],
                  static_cast<int>((salt / 2) % static_cast<size_t>(n)), inPlace);
}

using MatrixParam = std::tuple<CollKind, int, size_t, bool>;

class SchedMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(SchedMatrix, DefaultOptions) {
  const auto [kind, n, countIdx, inPlace] = GetParam();
  expectValid(matrixCall(kind, n, countIdx, inPlace), BuildOptions{});
}

TEST_P(SchedMatrix, TinyScratch) {
  const auto [kind, n, countIdx, inPlace] = GetParam();
  // Depth and lanes vary with the rank count so that every combination of depth 1..3 and lanes 1..4 shows up.
  for (int depth = 1; depth <= 3; ++depth) {
    if (kCounts[countIdx] == (size_t{1} << 20) && depth != 1 + n % 3) continue;  // keep the big ones affordable
    expectValid(matrixCall(kind, n, countIdx, inPlace), tinyOptions(depth, 1 + (n + depth) % 4));
  }
}

// Reducers reading the peers' inputs in place (the CUDA executor with peer access, the host executor).
TEST_P(SchedMatrix, PeerReads) {
  const auto [kind, n, countIdx, inPlace] = GetParam();
  BuildOptions o;
  o.peerReads = true;
  expectValid(matrixCall(kind, n, countIdx, inPlace), o);
  for (int depth = 1; depth <= 3; ++depth) {
    if (kCounts[countIdx] == (size_t{1} << 20) && depth != 1 + n % 3) continue;
    BuildOptions tiny = tinyOptions(depth, 1 + (n + depth) % 4);
    tiny.peerReads = true;
    expectValid(matrixCall(kind, n, countIdx, inPlace), tiny);
  }
}

// A rank's own block routed through a peer (BuildOptions::ownBlockViaPeer): proven by the checker alone and back
// to back with itself (scratch regions reused by the next call), with the default and a tiny scratch budget.
TEST_P(SchedMatrix, OwnBlockViaPeer) {
  const auto [kind, n, countIdx, inPlace] = GetParam();
  const bool pair = kCounts[countIdx] <= 4099;
  BuildOptions o;
  o.ownBlockViaPeer = true;
  expectValid(matrixCall(kind, n, countIdx, inPlace), o, pair);
  BuildOptions tiny = tinyOptions(1 + n % 3, 1 + n % 4);
  tiny.ownBlockViaPeer = true;
  tiny.peerReads = n % 2 == 0;
  if (kCounts[countIdx] == (size_t{1} << 20)) tiny.scratchBudget = 1u << 20;  // keep the piece count affordable
  expectValid(matrixCall(kind, n, countIdx, inPlace), tiny, pair);
}

// CollectiveCall::peerScratchOnly (ranks of a process clique launching without their peers' buffer addresses): no
// rank's program touches a peer's call buffers, whatever the options ask for; proven alone and back to back.
TEST_P(SchedMatrix, PeerScratchOnly) {
  const auto [kind, n, countIdx, inPlace] = GetParam();
  CollectiveCall call = matrixCall(kind, n, countIdx, inPlace);
  call.peerScratchOnly = true;
  const bool pair = kCounts[countIdx] <= 4099;
  BuildOptions wide;
  wide.peerReads = true;
  wide.ownBlockViaPeer = true;
  BuildOptions tiny = tinyOptions(1 + n % 3, 1 + n % 4);
  if (kCounts[countIdx] == (size_t{1} << 20)) tiny.scratchBudget = 1u << 20;  // keep the chunk count affordable
  for (const BuildOptions& o : {BuildOptions{}, wide, tiny}) {
    expectValid(call, o, pair);
    const Schedule s = buildSchedule(call, o);
    EXPECT_FALSE(s.peerReads);
    for (int r = 0; r < n; ++r) {
      forEachPeerLocation(s.programs[static_cast<size_t>(r)], r, [&](const Location& loc) {
        EXPECT_EQ(loc.buffer, kScratch) << "rank " << r << " touches buffer " << loc.buffer << " of rank " << loc.rank;
      });
    }
  }
}

std::string matrixName(const ::testing::TestParamInfo<MatrixParam>& info) {
  const auto [kind, n, countIdx, inPlace] = info.param;
  return std::string(collKindName(kind)) + "_n" + std::to_string(n) + "_c" + std::to_string(kCounts[countIdx]) +
         (inPlace ? "_inplace" : "_outofplace");
}

std::vector<MatrixParam> matrixParams() {
  std::vector<MatrixParam> v;
  for (CollKind k : kKinds) {
    for (int n = 1; n <= 8; ++n) {
      for (size_t c = 0; c < kCounts.size(); ++c) {
        for (bool ip : {false, true}) {
          if (ip && k == CollKind::kAllToAll) continue;  // not supported in place
          v.emplace_back(k, n, c, ip);
        }
      }
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, SchedMatrix, ::testing::ValuesIn(matrixParams()), matrixName);

// Every (dtype, op) of every reduction, with several chunks per share.
TEST(SchedCoverage, EveryReductionTypeAndOp) {
  for (CollKind k : {CollKind::kReduceScatter, CollKind::kAllReduce, CollKind::kReduce}) {
    for (concclDataType_t t : kReduceTypes) {
      for (concclRedOp_t op : kOps) {
        expectValid(makeCall(k, 3, 4099, t, op, 1, false), tinyOptions(2, 2));
        expectValid(makeCall(k, 4, 7, t, op, 3, true), BuildOptions{});
      }
    }
  }
}

// Every dtype (fp8 included) of every data-movement collective.
TEST(SchedCoverage, EveryDataMovementType) {
  for (CollKind k : kKinds) {
    if (reduces(k)) continue;
    for (concclDataType_t t : kAllTypes) {
      expectValid(makeCall(k, 3, 4099, t, concclSum, 2, false), tinyOptions(1, 3));
      if (k != CollKind::kAllToAll) expectValid(makeCall(k, 5, 7, t, concclSum, 0, true), BuildOptions{});
    }
  }
}

// Mixed in-place and out-of-place ranks in one call, and every root.
TEST(SchedCoverage, MixedInPlaceAndRoots) {
  for (CollKind k : kKinds) {
    if (k == CollKind::kAllToAll) continue;
    for (int n : {2, 5, 8}) {
      for (int root = 0; root < n; ++root) {
        CollectiveCall c = makeCall(k, n, 1000 + static_cast<size_t>(root), concclFloat16, concclMax, root, false);
        for (int r = 0; r < n; ++r) c.inPlace[static_cast<size_t>(r)] = (r + root) % 2 == 0;
        expectValid(c, tinyOptions(2, 2));
      }
    }
  }
}

// Back-to-back replays of the same schedule (flag and scratch reuse across calls), for every collective.
TEST(SchedReplay, SameScheduleTwice) {
  for (CollKind k : kKinds) {
    for (int n : {1, 2, 3, 8}) {
      for (bool ip : {false, true}) {
        if (ip && k == CollKind::kAllToAll) continue;
        expectValid(makeCall(k, n, 4099, concclFloat32, concclSum, n - 1, ip), tinyOptions(2, 2), /*pair=*/true);
        expectValid(makeCall(k, n, 7, concclInt8, concclMin, 0, ip), BuildOptions{}, /*pair=*/true);
      }
    }
  }
}

// Two different calls back to back (e.g. a ReduceScatter then an AllGather reusing the same flags).
TEST(SchedReplay, DifferentCallsBackToBack) {
  const BuildOptions o = tinyOptions(3, 2);
  for (int n : {2, 3, 8}) {
    std::vector<CollectiveCall> calls;
    for (CollKind k : kKinds) calls.push_back(makeCall(k, n, 5000, concclBfloat16, concclSum, n / 2, false));
    calls.push_back(makeAllToAllv(n, 7u + static_cast<unsigned>(n)));
    for (const CollectiveCall& a : calls) {
      for (const CollectiveCall& b : calls) {
        SCOPED_TRACE(callStr(a, o) + " then " + callStr(b, o));
        const Schedule sa = buildSchedule(a, o), sb = buildSchedule(b, o);
        const CheckResult r = checkSchedulePair(a, sa, b, sb);
        EXPECT_TRUE(r.ok) << r.error;
      }
    }
  }
}

TEST(SchedAllToAllv, RandomUnevenCounts) {
  for (int n = 1; n <= 8; ++n) {
    for (unsigned seed = 0; seed < 6; ++seed) {
      const concclDataType_t t = kAllTypes[(seed + static_cast<unsigned>(n)) % kAllTypes.size()];
      expectValid(makeAllToAllv(n, seed * 31u + static_cast<unsigned>(n), t),
                  seed % 2 ? tinyOptions(1, 3) : BuildOptions{},
                  /*pair=*/seed == 0);
    }
  }
  // Large and all-zero variants.
  expectValid(makeAllToAllv(4, 99, concclFloat32, 200000), tinyOptions(2, 4));
  expectValid(makeAllToAllv(3, 5, concclInt8, 1), BuildOptions{});
}

// Properties of the generated schedules beyond correctness.
TEST(SchedShape, PipelinedReductionUsesBoundedScratchAndManyChunks) {
  const BuildOptions o = tinyOptions(2, 2);
  const Schedule s = buildSchedule(makeCall(CollKind::kAllReduce, 4, size_t{1} << 20), o);
  EXPECT_LE(s.scratchBytes, o.scratchBudget);
  EXPECT_GT(s.scratchBytes, 0u);
  EXPECT_NE(s.algorithm.find("chunks="), std::string::npos) << s.algorithm;
  size_t reduces = 0;
  for (const RankProgram& p : s.programs) {
    for (const Op& op : p.ops) reduces += std::holds_alternative<Reduce>(op) ? 1 : 0;
  }
  EXPECT_GT(reduces, 4u * 10u);  // many chunks per share
}

TEST(SchedShape, ZeroCountMovesNothing) {
  for (CollKind k : kKinds) {
    const Schedule s = buildSchedule(makeCall(k, 4, 0), BuildOptions{});
    for (const RankProgram& p : s.programs) EXPECT_TRUE(p.ops.empty()) << collKindName(k);
  }
}

TEST(SchedShape, SingleRankIsALocalCopy) {
  for (CollKind k : kKinds) {
    const Schedule s = buildSchedule(makeCall(k, 1, 100), BuildOptions{});
    ASSERT_EQ(s.programs.size(), 1u);
    for (const Op& op : s.programs[0].ops) EXPECT_TRUE(std::holds_alternative<Copy>(op)) << collKindName(k);
    if (k != CollKind::kAllToAll) {
      const Schedule inPlace = buildSchedule(makeCall(k, 1, 100, concclFloat32, concclSum, 0, true), BuildOptions{});
      // Nothing to move; an AllGather only marks its (own) block ready.
      for (const Op& op : inPlace.programs[0].ops) {
        EXPECT_TRUE(k == CollKind::kAllGather && std::holds_alternative<Ready>(op)) << collKindName(k);
      }
    }
  }
}

// AllGather marks every block Ready where it has landed: a peer's block right after the Wait for that peer's "done",
// the own block first when in place; an own block copied out of place stays unmarked (it lands on a lane).
TEST(SchedShape, AllGatherMarksEachBlockWhereItLanded) {
  for (int n : {2, 3, 5}) {
    for (bool inPlace : {false, true}) {
      const CollectiveCall call = makeCall(CollKind::kAllGather, n, 1000, concclFloat32, concclSum, 0, inPlace);
      const Schedule s = buildSchedule(call, BuildOptions{});
      for (int me = 0; me < n; ++me) {
        const auto& ops = s.programs[static_cast<size_t>(me)].ops;
        std::vector<int> marked(static_cast<size_t>(n), 0);
        for (size_t i = 0; i < ops.size(); ++i) {
          const auto* mark = std::get_if<Ready>(&ops[i]);
          if (mark == nullptr) continue;
          ASSERT_GE(mark->tag, 0);
          ASSERT_LT(mark->tag, n);
          ++marked[static_cast<size_t>(mark->tag)];
          if (mark->tag == me) {
            EXPECT_EQ(i, 0u) << "the own block is marked first";
          } else {
            ASSERT_GT(i, 0u);
            const auto* wait = std::get_if<Wait>(&ops[i - 1]);
            ASSERT_NE(wait, nullptr) << "a peer's block is marked right after a Wait";
            EXPECT_EQ(wait->slot, doneSlot(n, mark->tag));
          }
        }
        for (int p = 0; p < n; ++p) {
          EXPECT_EQ(marked[static_cast<size_t>(p)], p == me && !inPlace ? 0 : 1)
              << "n " << n << " rank " << me << " block " << p << (inPlace ? " in place" : "");
        }
      }
    }
  }
}

TEST(SchedShape, LargeCopiesAreSplitAcrossLanes) {
  BuildOptions o;
  o.lanes = 4;
  const Schedule s = buildSchedule(makeCall(CollKind::kBroadcast, 2, size_t{1} << 20), o);
  std::vector<bool> used(4, false);
  for (const Op& op : s.programs[0].ops) {
    if (const auto* c = std::get_if<Copy>(&op); c != nullptr && c->dst.rank == 1)
      used[static_cast<size_t>(c->lane)] = true;
  }
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(used[static_cast<size_t>(l)]) << "lane " << l;
}

TEST(SchedShape, SlotsDependOnlyOnRanksAndOptions) {
  for (int n = 1; n <= 8; ++n) {
    for (int depth = 1; depth <= 4; ++depth) {
      for (int lanes = 1; lanes <= 4; ++lanes) {
        BuildOptions o = tinyOptions(depth, lanes);
        EXPECT_GE(maxSlots(n, o), firstFreeSlot(n));
        EXPECT_EQ(readySlot(n, n - 1), n - 1);
        EXPECT_EQ(doneSlot(n, 0), n);
        EXPECT_EQ(firstFreeSlot(n), 2 * n);
      }
    }
  }
}

// Executors choose a path per call from Schedule::copyBytes: it must be each program's copy volume, for every rank.
TEST(ScheduleCopyBytes, FilledByTheBuilderForEveryRank) {
  for (CollKind kind : {CollKind::kAllGather, CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduceScatter}) {
    CollectiveCall call;
    call.kind = kind;
    call.nranks = 3;
    call.count = 4099;
    call.root = 1;
    call.inPlace.assign(3, false);
    Schedule s = buildSchedule(call, BuildOptions{});
    ASSERT_EQ(s.copyBytes.size(), s.programs.size());
    size_t total = 0;
    for (size_t r = 0; r < s.programs.size(); ++r) {
      EXPECT_EQ(s.copyBytes[r], programCopyBytes(s.programs[r])) << collKindName(kind) << " rank " << r;
      total += s.copyBytes[r];
    }
    EXPECT_GT(total, 0u) << collKindName(kind);
  }
}

// Executors size a rank's part of a call from Schedule::workBytes: copies plus reduction outputs, so that a
// reduction reading its peers in place (no copies at all) is not mistaken for a small call.
TEST(ScheduleCopyBytes, WorkBytesCountReductionOutputs) {
  for (bool peerReads : {false, true}) {
    CollectiveCall call;
    call.kind = CollKind::kReduceScatter;
    call.nranks = 2;
    call.count = 1 << 20;
    call.dtype = concclFloat32;
    call.inPlace.assign(2, false);
    BuildOptions o;
    o.peerReads = peerReads;
    Schedule s = buildSchedule(call, o);
    ASSERT_EQ(s.workBytes.size(), s.programs.size());
    for (size_t r = 0; r < s.programs.size(); ++r) {
      EXPECT_EQ(s.workBytes[r], programWorkBytes(s.programs[r]));
      // Each rank produces its whole share (4 MiB); pushed schedules also copy the peer's half into its scratch.
      EXPECT_EQ(s.workBytes[r], (size_t{4} << 20) + (peerReads ? 0 : (size_t{4} << 20))) << "peerReads " << peerReads;
      if (peerReads) {
        EXPECT_EQ(s.copyBytes[r], 0u);
      }
    }
    EXPECT_EQ(s.peerReads, peerReads);
  }
}

// concclReduceScatterChunked: inputs still being produced are pushed by their owners even where peers could read them
// in place, and every rank's own input is read only by that rank's ops (its executor orders them after its producer).
TEST(PushInputs, ReduceScatterPushesEvenWithPeerReads) {
  for (int n : {2, 3, 5, 8}) {
    for (size_t count : {size_t{1}, size_t{4099}, size_t{1} << 20}) {
      for (bool inPlace : {false, true}) {
        CollectiveCall call = makeCall(CollKind::kReduceScatter, n, count, concclBfloat16, concclSum, 0, inPlace);
        call.pushInputs = true;
        for (BuildOptions o : {BuildOptions{}, tinyOptions(1 + n % 3, 1 + n % 4)}) {
          o.peerReads = true;
          expectValid(call, o, /*pair=*/count <= 4099);
          const Schedule s = buildSchedule(call, o);
          EXPECT_FALSE(s.peerReads) << "n " << n << " count " << count;
          for (int r = 0; r < n; ++r) {
            forEachPeerLocation(s.programs[static_cast<size_t>(r)], r, [&](const Location& loc) {
              EXPECT_NE(loc.buffer, 0) << "rank " << r << " touches rank " << loc.rank << "'s sendbuff";
            });
          }
        }
      }
    }
  }
}

// AllToAllv through the receivers' scratch (memory a peer process cannot map): built from the whole count matrix.
TEST(PeerScratchOnly, AllToAllv) {
  for (int n = 2; n <= 6; ++n) {
    CollectiveCall v = makeAllToAllv(n, 7 + static_cast<unsigned>(n));
    v.peerScratchOnly = true;
    for (const BuildOptions& o : {BuildOptions{}, tinyOptions(2, 2), tinyOptions(1, 3)}) {
      expectValid(v, o, n == 3);
      const Schedule s = buildSchedule(v, o);
      for (int r = 0; r < n; ++r) {
        forEachPeerLocation(s.programs[static_cast<size_t>(r)], r, [&](const Location& loc) {
          EXPECT_EQ(loc.buffer, kScratch) << "rank " << r << " touches buffer " << loc.buffer << " of rank " << loc.rank;
        });
      }
    }
  }
}

// A rank that launches a staged AllToAllv before its peers have called knows only its own row and column of the count
// matrix (core ProcessClique::allToAllvMirror: each peer sends it what it receives and receives what it sends, nothing
// else, displacements 0). Its program from that view must be the one it has in the whole call, or the two kinds of
// rank would not fit together; and the view itself must be a valid call.
TEST(PeerScratchOnly, AllToAllvProgramFollowsFromTheRanksOwnCounts) {
  for (int n = 2; n <= 6; ++n) {
    for (unsigned seed = 1; seed <= 3; ++seed) {
      CollectiveCall whole = makeAllToAllv(n, 100 * seed + static_cast<unsigned>(n), concclFloat32,
                                           seed == 3 ? 300000 : 3000);  // seed 3: several chunks per pair
      whole.peerScratchOnly = true;
      const auto un = static_cast<size_t>(n);
      for (const BuildOptions& o : {BuildOptions{}, tinyOptions(2, 2), tinyOptions(1, 3)}) {
        const Schedule full = buildSchedule(whole, o);
        for (int me = 0; me < n; ++me) {
          const auto m = static_cast<size_t>(me);
          CollectiveCall view = whole;
          for (size_t p = 0; p < un; ++p) {
            if (p == m) continue;
            view.sendCounts[p].assign(un, 0);
            view.sendDispls[p].assign(un, 0);
            view.recvCounts[p].assign(un, 0);
            view.recvDispls[p].assign(un, 0);
            view.sendCounts[p][m] = whole.recvCounts[m][p];
            view.recvCounts[p][m] = whole.sendCounts[m][p];
          }
          const Schedule mine = buildSchedule(view, o);
          EXPECT_EQ(mine.programs[m], full.programs[m]) << "n " << n << " seed " << seed << " rank " << me;
        }
      }
    }
  }
}

TEST(PeerScratchOnly, NotForSendRecv) {
  CollectiveCall p2p = makeCall(CollKind::kSendRecv, 2, 0);
  p2p.inPlace.clear();
  p2p.p2p = {{P2POp{true, 1, 16, 0}}, {P2POp{false, 0, 16, 0}}};
  p2p.peerScratchOnly = true;
  EXPECT_THROW(buildSchedule(p2p, BuildOptions{}), conccl::Error);
}

// A staged AllGather still marks each peer's block Ready (concclAllGatherChunked records its events there), after the
// last chunk from that peer was copied into place.
TEST(PeerScratchOnly, AllGatherMarksEveryPeerBlock) {
  CollectiveCall call = makeCall(CollKind::kAllGather, 4, 4099, concclFloat32);
  call.peerScratchOnly = true;
  const Schedule s = buildSchedule(call, tinyOptions(2, 2));
  for (int r = 0; r < 4; ++r) {
    std::vector<int> tags;
    for (const Op& op : s.programs[static_cast<size_t>(r)].ops) {
      if (const auto* mark = std::get_if<Ready>(&op)) tags.push_back(mark->tag);
    }
    std::sort(tags.begin(), tags.end());
    std::vector<int> peers;
    for (int p = 0; p < 4; ++p) {
      if (p != r) peers.push_back(p);
    }
    EXPECT_EQ(tags, peers) << "rank " << r;
  }
}

// A staged AllReduce's all-gather puts its slots past the reduce-scatter pipeline's, so the pipeline's ready at program
// start covers it: one ready per pair (each rank signals each peer once), not two. With a scratch too small for both
// phases the all-gather reuses the pipeline's slots after a ready of its own. Both are proven valid back to back by
// the matrix above (SchedMatrix.PeerScratchOnly).
TEST(PeerScratchOnly, AllReduceHandshakesOncePerPairWhenBothPhasesFit) {
  auto readySignals = [](const Schedule& s, int r) {
    int k = 0;
    for (const Op& op : s.programs[static_cast<size_t>(r)].ops) {
      if (const auto* sig = std::get_if<Signal>(&op); sig != nullptr && sig->slot == readySlot(s.nranks, r)) ++k;
    }
    return k;
  };
  for (int n : {2, 3, 4, 8}) {
    // 2 MiB: above the one shot's 1 MiB with more than two ranks (SmallAllReduceIsOneShotWhereItFits).
    CollectiveCall call = makeCall(CollKind::kAllReduce, n, (size_t{2} << 20) / 4);
    call.peerScratchOnly = true;
    const Schedule fits = buildSchedule(call, BuildOptions{});
    if (n > 2) {
      EXPECT_NE(fits.algorithm, "staged one-shot");
    }
    const BuildOptions small = tinyOptions(1, 2);  // 64 KiB: the pipeline's slots fill it, the all-gather reuses them
    const Schedule tight = buildSchedule(call, small);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(readySignals(fits, r), n - 1) << "n " << n << " rank " << r << ": " << fits.algorithm;
      EXPECT_EQ(readySignals(tight, r), 2 * (n - 1)) << "n " << n << " rank " << r << ": " << tight.algorithm;
    }
    EXPECT_LE(tight.scratchBytes, small.scratchBudget);
    if (n == 2) continue;  // one shot (below): no all-gather
    // Out of place: the pipeline pushes from sendbuff (buffer 0), the all-gather from the reduced share in recvbuff.
    size_t pipelineEnd = 0, gatherStart = SIZE_MAX;
    for (const Op& op : fits.programs[0].ops) {
      const auto* c = std::get_if<Copy>(&op);
      if (c == nullptr || c->dst.buffer != kScratch || c->dst.rank == 0) continue;
      if (c->src.buffer == 0) pipelineEnd = std::max(pipelineEnd, c->dst.offset + c->bytes);
      if (c->src.buffer == 1) gatherStart = std::min(gatherStart, c->dst.offset);
    }
    EXPECT_GT(pipelineEnd, 0u);
    EXPECT_GE(gatherStart, pipelineEnd) << "n " << n << ": the all-gather's slots overlap the pipeline's";
  }
}

// One shot: each rank copies its whole input into every peer's scratch once and reduces the whole buffer itself (one
// handshake per pair, no all-gather, nothing copied out of scratch); in place too. Where the buffers do not fit in the
// scratch, the reduce-scatter + all-gather. Validity: SchedMatrix.PeerScratchOnly (every n, 4099 elements) and the
// expectValid calls here.
TEST(PeerScratchOnly, SmallAllReduceIsOneShotWhereItFits) {
  // Two ranks: any size the scratch holds. More ranks: up to 1 MiB (each rank pushes n - 1 whole buffers).
  for (int n : {2, 3, 4, 8}) {
    for (bool inPlace : {false, true}) {
      const size_t count = n == 2 ? (size_t{1} << 20) / 4 + 3 : (size_t{1} << 20) / 4 - 5;
      CollectiveCall call = makeCall(CollKind::kAllReduce, n, count, concclFloat32, concclSum, 0, inPlace);
      call.peerScratchOnly = true;
      const Schedule s = buildSchedule(call, BuildOptions{});
      EXPECT_EQ(s.algorithm, "staged one-shot") << "n=" << n;
      expectValid(call, BuildOptions{}, true);
      for (int r = 0; r < n; ++r) {
        int copies = 0, reduces = 0, waits = 0;
        std::vector<int> copiedTo;
        for (const Op& op : s.programs[static_cast<size_t>(r)].ops) {
          if (const auto* c = std::get_if<Copy>(&op)) {
            ++copies;
            EXPECT_EQ(c->bytes, count * 4);
            EXPECT_EQ(c->dst.buffer, kScratch);
            copiedTo.push_back(c->dst.rank);
          }
          if (const auto* red = std::get_if<Reduce>(&op)) {
            ++reduces;
            EXPECT_EQ(red->count, count);
            EXPECT_EQ(red->inputs.size(), static_cast<size_t>(n));
          }
          waits += std::holds_alternative<Wait>(op) ? 1 : 0;
        }
        EXPECT_EQ(copies, n - 1) << "n=" << n << " rank " << r << ": its input once into every peer's scratch";
        EXPECT_EQ(std::count(copiedTo.begin(), copiedTo.end(), r), 0);
        EXPECT_EQ(reduces, 1) << "n=" << n << " rank " << r;
        EXPECT_EQ(waits, 2 * (n - 1)) << "n=" << n << " rank " << r << ": each peer's ready and its data";
      }
      BuildOptions small;
      small.scratchBudget = 512u << 10;  // below the 1 MiB buffer
      const Schedule split = buildSchedule(call, small);
      EXPECT_NE(split.algorithm, "staged one-shot");
      EXPECT_LE(split.scratchBytes, small.scratchBudget);
      expectValid(call, small, true);
    }
  }
  // Above 1 MiB with more than two ranks: the reduce-scatter pipeline and the all-gather (fewer bytes cross).
  CollectiveCall big = makeCall(CollKind::kAllReduce, 3, (size_t{1} << 20) / 4 + 1, concclFloat32, concclSum, 0, false);
  big.peerScratchOnly = true;
  EXPECT_NE(buildSchedule(big, BuildOptions{}).algorithm, "staged one-shot");
  expectValid(big, BuildOptions{}, true);
}

TEST(PushInputs, OnlyForReduceScatter) {
  CollectiveCall call = makeCall(CollKind::kAllReduce, 2, 16, concclFloat32, concclSum, 0, false);
  call.pushInputs = true;
  EXPECT_THROW(buildSchedule(call, BuildOptions{}), conccl::Error);
}

// The small-message path checks every rank's fit from Schedule::activeOps / reduceInputs: hand-counted here.
TEST(ScheduleCopyBytes, ActiveOpsAndReduceInputsForEveryRank) {
  for (CollKind kind : {CollKind::kAllGather, CollKind::kAllReduce, CollKind::kReduceScatter}) {
    CollectiveCall call;
    call.kind = kind;
    call.nranks = 3;
    call.count = 4099;
    call.inPlace.assign(3, false);
    Schedule s = buildSchedule(call, BuildOptions{});
    ASSERT_EQ(s.activeOps.size(), s.programs.size());
    ASSERT_EQ(s.reduceInputs.size(), s.programs.size());
    for (size_t r = 0; r < s.programs.size(); ++r) {
      size_t ops = 0, inputs = 0;
      for (const Op& op : s.programs[r].ops) {
        if (const auto* copy = std::get_if<Copy>(&op); copy != nullptr && copy->bytes == 0) continue;
        if (std::holds_alternative<Ready>(op)) continue;  // marks move nothing
        if (const auto* reduce = std::get_if<Reduce>(&op)) {
          if (reduce->count == 0) continue;
          inputs += reduce->inputs.size();
        }
        ++ops;
      }
      EXPECT_EQ(s.activeOps[r], ops) << collKindName(kind) << " rank " << r;
      EXPECT_EQ(s.reduceInputs[r], inputs) << collKindName(kind) << " rank " << r;
      EXPECT_EQ(inputs > 0, kind != CollKind::kAllGather) << collKindName(kind) << " rank " << r;
    }
  }
}


// With ownBlockViaPeer no movement collective copies inside one rank's memory (what CUDA would run on SMs), for
// every rank count >= 2, both roots' layouts and in / out of place; AllGather and Broadcast pull the block back
// from a peer's output (no scratch), the others bounce it through a peer's scratch.
TEST(OwnBlockViaPeer, NoCopyStaysInsideARank) {
  for (CollKind kind : {CollKind::kAllGather, CollKind::kBroadcast, CollKind::kAllToAll, CollKind::kGather,
                        CollKind::kScatter}) {
    for (int n = 2; n <= 8; ++n) {
      for (bool inPlace : {false, true}) {
        if (inPlace && kind == CollKind::kAllToAll) continue;
        for (int root : {0, n - 1}) {
          CollectiveCall call = makeCall(kind, n, 100003, concclFloat32, concclSum, root, inPlace);
          BuildOptions o;
          o.ownBlockViaPeer = true;
          o.minChunkBytes = 64u << 10;
          const Schedule s = buildSchedule(call, o);
          SCOPED_TRACE(callStr(call, o));
          size_t pulls = 0;
          for (int r = 0; r < n; ++r) {
            for (const Op& op : s.programs[static_cast<size_t>(r)].ops) {
              const auto* copy = std::get_if<Copy>(&op);
              if (copy == nullptr || copy->bytes == 0) continue;
              EXPECT_FALSE(copy->src.rank == r && copy->dst.rank == r) << "rank " << r << " copies inside itself";
              if (copy->src.rank != r) ++pulls;
            }
          }
          const bool echoes = kind == CollKind::kAllGather || kind == CollKind::kBroadcast;
          if (echoes) {
            EXPECT_EQ(s.scratchBytes, 0u);
          }
          // Every out-of-place own block (all ranks' for AllGather / AllToAll, the root's for the rooted ones)
          // comes back with at least one pull.
          const bool rooted = kind != CollKind::kAllGather && kind != CollKind::kAllToAll;
          const size_t blocks = inPlace ? 0 : (rooted ? 1 : static_cast<size_t>(n));
          EXPECT_GE(pulls, blocks);
          if (inPlace) {
            EXPECT_EQ(pulls, 0u);
          }
          expectValid(call, o);
        }
      }
    }
  }
}

// Send/Recv self-sends stay local copies (the peers of a point-to-point group need not take part).
TEST(OwnBlockViaPeer, SelfSendsStayLocal) {
  CollectiveCall call = makeCall(CollKind::kSendRecv, 2, 0);
  call.p2p.resize(2);
  call.p2p[0] = {P2POp{true, 0, 1000, 0}, P2POp{false, 0, 1000, 1}};
  BuildOptions o;
  o.ownBlockViaPeer = true;
  const Schedule s = buildSchedule(call, o);
  bool local = false;
  for (const Op& op : s.programs[0].ops) {
    if (const auto* copy = std::get_if<Copy>(&op)) local = local || (copy->src.rank == 0 && copy->dst.rank == 0);
  }
  EXPECT_TRUE(local);
  EXPECT_TRUE(s.programs[1].ops.empty());
}

}  // namespace
}  // namespace conccl::sched::testing
