// Times sched::buildSchedule per route (one-off measurement; built against the library objects, see commands.sh).
#include "sched/schedule.h"
#include <chrono>
#include <cstdio>
using namespace conccl::sched;
template <class F> double us(F f, int it = 200) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < it; ++i) f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / it;
}
int main() {
  BuildOptions o; o.peerReads = true; o.ownBlockViaPeer = true;
  for (int n : {2, 4, 8}) {
    for (size_t bytes : {size_t(1) << 20, size_t(64) << 20, size_t(1) << 30}) {
      CollectiveCall c; c.kind = CollKind::kAllReduce; c.nranks = n; c.count = bytes / 4; c.inPlace.assign(n, false);
      double direct = us([&] { auto s = buildSchedule(c, o); });
      CollectiveCall st = c; st.peerScratchOnly = true;
      double staged = us([&] { auto s = buildSchedule(st, o); });
      CollectiveCall ow = c; ow.callOwner = n - 1;
      double owner = us([&] { auto s = buildSchedule(ow, o); });
      CollectiveCall ag = c; ag.kind = CollKind::kAllToAll; ag.count = bytes / 4 / n;
      double a2a = us([&] { auto s = buildSchedule(ag, o); });
      CollectiveCall po = ag; po.pairOwner.assign(n * n, n - 1);
      for (int i = 0; i < n; ++i) for (int j = 0; j < n; ++j) po.pairOwner[i * n + j] = std::max(i, j);
      double pown = us([&] { auto s = buildSchedule(po, o); });
      std::printf("n=%d %5zu MiB: AR direct %.1f staged %.1f owner %.1f | A2A %.1f pair-owned %.1f us\n", n, bytes >> 20, direct, staged, owner, a2a, pown);
    }
  }
}
