// BuildOptions::ownBlockViaPeer: a rank's own block leaves its GPU and comes back, on copy engines.
//
// Why: CUDA runs a copy inside one GPU's memory on SMs on our driver (FACTS.md: it waited ~20 ms behind a kernel
// holding every SM), so beside a GEMM that holds them, AllGather's or AllToAll's own block waited for the whole
// GEMM (11.6x the collective's time alone, 2026-11-30). Copies between GPUs run on copy engines whatever the SMs
// do; two hops through a peer were measured at peer-copy speed beside such a kernel (FACTS.md, 2 H200s).
//
// Two routes, the cheaper first:
//   * echo: the rank pushes the same bytes to a peer anyway (AllGather: its block goes into every peer's output;
//     Broadcast: the root's input goes to every peer). After each piece of that push lands, the rank pulls it back
//     from the peer into its own output, on the same lane (stream order makes the pull follow the push). One
//     extra NVLink crossing, no scratch.
//   * bounce: otherwise (AllToAll(v), Gather and Scatter roots) the block goes into a region of a peer's scratch
//     and is pulled back from there, piece by piece, the pieces spread over the peers and lanes. Region
//     (sender, lane) of a peer's scratch belongs to that sender's lane alone, so a piece reuses it only after the
//     previous piece on the lane was pulled back (stream order again); no flag is needed.
// Either route writes (echo: already did) into the peer's memory, so the ready / done handshakes of emitDirect
// keep the peer's program running while its memory is used.
#include <algorithm>
#include <functional>
#include <string>

#include "base/error.h"
#include "sched/builder_util.h"

namespace conccl::sched::detail {

namespace {

// The index in `mine` of a push to a peer of `via` that carries exactly `local`'s bytes, preferring the peer after
// `me` (each rank then pulls from a different neighbour, spreading the extra traffic over the links); -1 if none.
int findEcho(const std::vector<Transfer>& mine, const Transfer& local, int me, int n, const std::vector<int>& via) {
  int best = -1, bestDistance = n;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Transfer& u = mine[i];
    if (u.dst.rank == me || u.then || u.bytes != local.bytes || !(u.src == local.src)) continue;
    if (std::find(via.begin(), via.end(), u.dst.rank) == via.end()) continue;
    const int distance = (u.dst.rank - me + n) % n;
    if (distance < bestDistance) {
      best = static_cast<int>(i);
      bestDistance = distance;
    }
  }
  return best;
}

// The echo route for one local transfer of rank `me`: when `mine` holds a push of the same bytes to a peer of `via`
// (the nearest after `me`), that push gets `then = local.dst` and true is returned (the caller drops `local`).
bool echoOwnBlock(std::vector<Transfer>& mine, const Transfer& local, int me, int n, const std::vector<int>& via) {
  const int echo = findEcho(mine, local, me, n, via);
  if (echo < 0) return false;
  mine[static_cast<size_t>(echo)].then = local.dst;
  return true;
}

size_t bounceRegionBytes(const BuildOptions& options, int n) {
  const auto regions = static_cast<size_t>(n) * static_cast<size_t>(options.lanes);
  const size_t region = options.scratchBudget / regions / kAlign * kAlign;
  CONCCL_REQUIRE(region >= kAlign, "a scratch budget of " + std::to_string(options.scratchBudget) +
                                       " bytes is too small to route a rank's own block through a peer (" +
                                       std::to_string(n) + " ranks x " + std::to_string(options.lanes) + " lanes)");
  return region;
}

// The bounce route for one local transfer of rank `me`: pieces into region (me, lane) of the scratch of the ranks in
// `via` (taken in turn, then the lanes), each with `then = ` its part of local.dst and a fixed lane (a region is reused
// only behind the previous piece on its lane). Raises *scratchEnd to the end of the regions used.
void appendBounce(const Transfer& local, int me, const std::vector<int>& via, const BuildOptions& options, int n,
                  std::vector<Transfer>& out, size_t* scratchEnd) {
  CONCCL_ASSERT(!via.empty() && local.src.rank == me && local.dst.rank == me);
  const int lanes = options.lanes;
  const size_t region = bounceRegionBytes(options, n);
  const size_t minPiece = std::max(options.minChunkBytes, kAlign);
  // Enough pieces to use every peer and lane, none larger than a region, none below minPiece unless the block is
  // smaller.
  const size_t wanted = std::min(via.size() * static_cast<size_t>(lanes), std::max<size_t>(1, local.bytes / minPiece));
  const size_t pieceBytes = std::min(region, roundUp(ceilDiv(local.bytes, wanted), kAlign));
  size_t i = 0;
  for (size_t off = 0; off < local.bytes; off += pieceBytes, ++i) {
    const int peer = via[i % via.size()];
    const int lane = static_cast<int>((i / via.size()) % static_cast<size_t>(lanes));
    const size_t at = (static_cast<size_t>(me) * static_cast<size_t>(lanes) + static_cast<size_t>(lane)) * region;
    Transfer piece;
    piece.src = plus(local.src, off);
    piece.dst = Location{peer, kScratch, at};
    piece.bytes = std::min(pieceBytes, local.bytes - off);
    piece.then = plus(local.dst, off);
    piece.lane = lane;
    out.push_back(piece);
    *scratchEnd = std::max(*scratchEnd, at + region);
  }
}

}  // namespace

void routeOwnBlocks(std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options, Schedule& schedule,
                    const std::function<std::vector<int>(int me)>& bounceVia) {
  const int n = schedule.nranks;
  if (n < 2) return;
  size_t scratchEnd = schedule.scratchBytes;
  for (int me = 0; me < n; ++me) {
    std::vector<Transfer>& mine = transfers[static_cast<size_t>(me)];
    const std::vector<int> via = bounceVia(me);
    std::vector<bool> moved(mine.size(), false);
    std::vector<Transfer> bounces;
    for (size_t k = 0; k < mine.size(); ++k) {
      const Transfer local = mine[k];
      if (local.dst.rank != me || local.bytes == 0) continue;
      moved[k] = echoOwnBlock(mine, local, me, n, via);
      if (!moved[k]) {
        appendBounce(local, me, via, options, n, bounces, &scratchEnd);
        moved[k] = true;
      }
    }
    size_t kept = 0;
    for (size_t k = 0; k < mine.size(); ++k) {
      if (!moved[k]) mine[kept++] = mine[k];
    }
    mine.resize(kept);
    mine.insert(mine.end(), bounces.begin(), bounces.end());
  }
  schedule.scratchBytes = scratchEnd;
}

void routeOwnBlocksThroughPeers(std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options,
                                Schedule& schedule) {
  const int n = schedule.nranks;
  routeOwnBlocks(transfers, options, schedule, [n](int me) {
    std::vector<int> everyPeer;
    for (int k = 1; k < n; ++k) everyPeer.push_back((me + k) % n);
    return everyPeer;
  });
}

}  // namespace conccl::sched::detail
