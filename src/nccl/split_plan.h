// ncclCommSplit on conccl communicators, its pure part: where each rank of the parent lands, computed by every
// rank from the same all-gathered table, so that every rank reaches the same answer without another exchange.
#ifndef CONCCL_NCCL_SPLIT_PLAN_H_
#define CONCCL_NCCL_SPLIT_PLAN_H_

#include <string>
#include <vector>

namespace conccl::nccl {

inline constexpr int kSplitNoColor = -1;  // NCCL_SPLIT_NOCOLOR

// What one parent rank passed to ncclCommSplit.
struct SplitRequest {
  int color;
  int key;
};

struct SplitPlacement {
  std::string error;        // non-empty: the split is invalid, identically on every rank (nothing is created)
  bool member = false;      // false for NCCL_SPLIT_NOCOLOR: the rank gets a NULL communicator
  int newRank = -1;         // rank in the child communicator
  std::vector<int> parents; // parent ranks of the child, in child-rank order (parents[newRank] == myParentRank)
};

// NCCL's rule (nccl.h): ranks of the same color form one communicator, ordered by key; equal keys keep the parent
// order. A color below NCCL_SPLIT_NOCOLOR on any rank makes the whole split invalid (every rank sees the same
// table, so every rank fails the same way instead of some waiting for the others).
SplitPlacement placeInSplit(const std::vector<SplitRequest>& all, int myParentRank);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_SPLIT_PLAN_H_
