// The collective table of conccl-bench, nccl-tests style: one file per collective (coll_<name>.cc) with its
// buffer sizes, bus-bandwidth factor, host reference and run function; the driver only sees this table.
#ifndef CONCCL_TOOLS_BENCH_COLL_H_
#define CONCCL_TOOLS_BENCH_COLL_H_

#include <conccl/conccl.h>

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "backend.h"
#include "reference.h"
#include "sched/schedule.h"

namespace conccl::bench {

// Per-rank element counts of one case, derived from the requested size.
struct CollCounts {
  size_t send = 0;   // elements of each rank's send buffer (on the root only for scatter)
  size_t recv = 0;   // elements of each rank's receive buffer (on the root only for gather)
  size_t param = 0;  // the count argument of the call
  size_t size = 0;   // elements the 'size'/'count' columns and algbw count (nccl-tests conventions)
};

// Everything a reference or a run function needs to know about a case.
struct CaseArgs {
  CollCounts counts;
  concclDataType_t type = concclFloat32;
  concclRedOp_t op = concclSum;
  int root = 0;
  int nranks = 1;
};

struct CollDesc {
  CollKind kind;
  const char* name;  // CLI / JSON name: "all_gather", ...
  bool reduces;      // takes a reduction op
  bool uses_root;    // the root column is meaningful
  bool in_place;     // has an in-place variant (conccl: not all-to-all, not send/recv)
  // Counts for a requested size of `count` elements (rounded down so that the per-rank parts are equal).
  CollCounts (*counts)(size_t count, int nranks);
  // busbw = algbw * factor (nccl-tests conventions; see each file).
  double (*bus_factor)(int nranks);
  // In place: element offsets of the send and the receive buffer of `rank` inside one allocation.
  size_t (*send_offset_in_place)(const CaseArgs& args, int rank);
  size_t (*recv_offset_in_place)(const CaseArgs& args, int rank);
  // Expected content of rank `rank`'s receive buffer (args.counts.recv elements) from all ranks' inputs
  // (args.counts.send elements each); std::nullopt when that rank's output is not defined (non-root).
  // `scale` receives the per-element tolerance scale of floating reductions.
  std::optional<Bytes> (*reference)(const CaseArgs& args, const std::vector<Bytes>& inputs, int rank,
                                    std::vector<double>* scale);
  // Issues the collective of rank `rank` on `backend` (inside the driver's group).
  void (*run)(Backend& backend, const CaseArgs& args, int rank, const void* send, void* recv);
};

const std::vector<const CollDesc*>& AllColls();
const CollDesc* FindColl(std::string_view name);

// The table entries, one per file.
extern const CollDesc kAllGatherColl;
extern const CollDesc kAllToAllColl;
extern const CollDesc kReduceScatterColl;
extern const CollDesc kAllReduceColl;
extern const CollDesc kBroadcastColl;
extern const CollDesc kReduceColl;
extern const CollDesc kGatherColl;
extern const CollDesc kScatterColl;
extern const CollDesc kSendRecvColl;

// Helpers shared by the collective files.
size_t ZeroOffset(const CaseArgs& args, int rank);
double FactorOne(int nranks);
double FactorNm1OverN(int nranks);  // (n-1)/n
size_t ElemSize(const CaseArgs& args);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_COLL_H_
