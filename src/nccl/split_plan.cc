#include "nccl/split_plan.h"

#include <algorithm>

namespace conccl::nccl {

SplitPlacement placeInSplit(const std::vector<SplitRequest>& all, int myParentRank) {
  SplitPlacement p;
  const int n = static_cast<int>(all.size());
  if (myParentRank < 0 || myParentRank >= n) {
    p.error = "rank " + std::to_string(myParentRank) + " is not in the parent's " + std::to_string(n) + " ranks";
    return p;
  }
  for (int r = 0; r < n; ++r) {
    if (all[r].color < kSplitNoColor) {
      p.error = "parent rank " + std::to_string(r) + " passed color " + std::to_string(all[r].color) +
                " (a color must be >= 0, or NCCL_SPLIT_NOCOLOR)";
      return p;
    }
  }
  const int color = all[myParentRank].color;
  if (color == kSplitNoColor) return p;
  for (int r = 0; r < n; ++r) {
    if (all[r].color == color) p.parents.push_back(r);
  }
  // Stable: equal keys keep the parent order, as NCCL's split does.
  std::stable_sort(p.parents.begin(), p.parents.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  p.member = true;
  p.newRank = static_cast<int>(std::find(p.parents.begin(), p.parents.end(), myParentRank) - p.parents.begin());
  return p;
}

}  // namespace conccl::nccl
