// The rendezvous root's answer for a communicator whose ranks span hosts on the hierarchical path (hier_exec.h), and
// its reading on each rank: every id the ranks need, made once at the root so that every rank receives the same
// ones. Shared by the C API (cross_node.cc) and the drop-in (shim_init.cc). The ids travel in the communicator's own
// rendezvous reply (rendezvous.h), which carries at most 64 KiB: (1 + nodes + perNode) ids of 128 bytes, about 460
// ids, e.g. 64 nodes x 8 GPUs takes 73; a larger job is not hierarchical (*why says so). No CUDA here.
#ifndef CONCCL_NCCL_HIER_ANSWER_H_
#define CONCCL_NCCL_HIER_ANSWER_H_

#include <conccl/conccl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "nccl/hier_steps.h"
#include "nccl/rail_api.h"

namespace conccl::nccl {

// The root's answer for ranks on several hosts when the hierarchical path applies: 'H', the flat NCCL id, nodes,
// perNode, chunks, one conccl id per node and one real-NCCL id per rail (all made at the root), then the reason.
// False (answer untouched) when it does not apply: *why says why (uneven, one rank per node, ids that do not fit the
// reply); false with *error set when an id could not be made.
inline constexpr char kAnswerHierarchical = 'H';
bool makeHierarchicalAnswer(const std::vector<uint64_t>& hosts, int chunks, const RailApi& api, std::string* answer,
                            std::string* why, std::string* error);

// A rank's reading of an 'H' answer, checked against its own view of the hosts.
struct HierAnswer {
  HierLayout layout;
  int chunks = 1;
  RailId flatId{};
  std::vector<concclUniqueId> nodeIds;
  std::vector<RailId> railIds;
  std::string reason;
  std::string error;  // non-empty: malformed, or a layout that differs from this rank's
};
// Whether an answer is hierarchical: the ranks then keep their connection to the root, which reports ranks that die
// (nccl/liveness_link.h; the rendezvous root's `watch`). Every rank decides alike from the same answer.
inline bool isHierarchicalAnswer(const std::string& answer) {
  return !answer.empty() && answer[0] == kAnswerHierarchical;
}

HierAnswer parseHierarchicalAnswer(const std::string& answer, const std::vector<uint64_t>& hosts, int nranks, int rank);

// A conccl id for one node's communicator: local to that host (never a rendezvous across hosts), whatever the
// environment says.
bool localConcclId(concclUniqueId* id, std::string* error);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_HIER_ANSWER_H_
