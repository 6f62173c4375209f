#include "nccl/hier_steps.h"

#include <algorithm>
#include <map>

namespace conccl::nccl {

using sched::GroupKind;
using sched::GroupOp;
using sched::Region;
using sched::Where;

HierLayout hierLayout(const std::vector<uint64_t>& hosts) {
  HierLayout l;
  if (hosts.empty()) {
    l.error = "no ranks";
    return l;
  }
  std::map<uint64_t, int> nodeOf;  // host -> node index, in order of first appearance
  std::vector<int> sizes;
  const int n = static_cast<int>(hosts.size());
  l.node.resize(hosts.size());
  l.local.resize(hosts.size());
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = nodeOf.emplace(hosts[static_cast<size_t>(r)], static_cast<int>(sizes.size()));
    if (fresh) sizes.push_back(0);
    l.node[static_cast<size_t>(r)] = it->second;
    l.local[static_cast<size_t>(r)] = sizes[static_cast<size_t>(it->second)]++;
  }
  for (int s : sizes) {
    if (s != sizes[0]) {
      std::string list;
      for (int x : sizes) list += (list.empty() ? "" : ", ") + std::to_string(x);
      HierLayout bad;
      bad.error = "ranks per host differ (" + list + ")";
      return bad;
    }
  }
  l.nodes = static_cast<int>(sizes.size());
  l.perNode = sizes[0];
  l.planRank.resize(hosts.size());
  l.commRank.resize(hosts.size());
  l.nodeMajor = true;
  for (int r = 0; r < n; ++r) {
    const int p = l.node[static_cast<size_t>(r)] * l.perNode + l.local[static_cast<size_t>(r)];
    l.planRank[static_cast<size_t>(r)] = p;
    l.commRank[static_cast<size_t>(p)] = r;
    l.nodeMajor = l.nodeMajor && p == r;
  }
  return l;
}

const char* hierCommName(HierComm c) {
  switch (c) {
    case HierComm::kIntra:
      return "intra";
    case HierComm::kRail:
      return "rail";
    case HierComm::kLocal:
      return "local";
  }
  return "invalid";
}

bool needsNodeMajor(sched::HierCollective c) {
  return c == sched::HierCollective::kAllToAll || c == sched::HierCollective::kAllToAllv;
}

namespace {

bool allEqual(const std::vector<size_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](size_t x) { return x == v.front(); });
}

// One rank's call for a group operation it is a member of (index i in op.members); false with *error when NCCL's
// API cannot express it.
bool translate(const GroupOp& op, size_t i, int phase, HierComm comm, HierStep* s, std::string* error) {
  s->phase = phase;
  s->comm = comm;
  s->kind = op.kind;
  s->in = op.in[i];
  s->out = op.out[i];
  s->root = op.root;
  const std::string what = std::string(sched::groupKindName(op.kind)) + " in phase " + std::to_string(phase);
  switch (op.kind) {
    case GroupKind::kAllReduce:
    case GroupKind::kBroadcast:
    case GroupKind::kReduce: {
      // Every member moves the same count (the root's buffer for Broadcast, everyone's input for the reductions).
      s->count = op.kind == GroupKind::kBroadcast ? op.in[static_cast<size_t>(op.root)].count : op.in[i].count;
      for (const Region& r : op.in) {
        if (r.count != s->count) {
          *error = what + ": members contribute different counts";
          return false;
        }
      }
      return true;
    }
    case GroupKind::kReduceScatter:
    case GroupKind::kAllGather:
    case GroupKind::kScatter:
    case GroupKind::kGather:
    case GroupKind::kAllToAll:
      if (op.counts.empty() || !allEqual(op.counts)) {
        *error = what + ": uneven pieces (NCCL's call takes one count for every rank)";
        return false;
      }
      s->count = op.counts.front();
      return true;
    case GroupKind::kSendRecv:
      if (op.members.size() != 2) {
        *error = what + ": not a pair";
        return false;
      }
      s->send = i == 0;
      s->peer = i == 0 ? 1 : 0;
      s->count = op.in[0].count;
      return true;
    case GroupKind::kCopy:
      s->comm = HierComm::kLocal;
      s->count = op.in[0].count;
      s->rows = 1;
      return true;
  }
  *error = what + ": unknown operation";
  return false;
}

// Appends a copy, merged into the previous step when both are rows of one strided pattern (same count, same buffers,
// and the new block one pitch after the last row in both buffers).
void appendCopy(std::vector<HierStep>* steps, const HierStep& c) {
  if (!steps->empty()) {
    HierStep& p = steps->back();
    if (p.kind == GroupKind::kCopy && p.phase == c.phase && p.count == c.count && p.in.buffer == c.in.buffer &&
        p.out.buffer == c.out.buffer) {
      const size_t lastIn = p.in.offset + (p.rows - 1) * p.srcPitch;
      const size_t lastOut = p.out.offset + (p.rows - 1) * p.dstPitch;
      if (c.in.offset > lastIn && c.out.offset > lastOut) {
        const size_t srcPitch = c.in.offset - lastIn, dstPitch = c.out.offset - lastOut;
        // Rows must not overlap (cudaMemcpy2D needs pitch >= width) and must follow the pattern set so far.
        if ((p.rows == 1 && srcPitch >= c.count && dstPitch >= c.count) ||
            (p.rows > 1 && srcPitch == p.srcPitch && dstPitch == p.dstPitch)) {
          p.srcPitch = srcPitch;
          p.dstPitch = dstPitch;
          ++p.rows;
          return;
        }
      }
    }
  }
  HierStep s = c;
  s.srcPitch = s.dstPitch = s.count;
  steps->push_back(s);
}

}  // namespace

HierProgram hierProgram(const sched::HierarchicalPlan& plan, int planRank, int perNode) {
  HierProgram prog;
  if (!plan.error.empty()) {
    prog.error = plan.error;
    return prog;
  }
  prog.scratchCount = plan.scratchCount;
  prog.phases = static_cast<int>(plan.phases.size());
  for (size_t ph = 0; ph < plan.phases.size(); ++ph) {
    const sched::Phase& phase = plan.phases[ph];
    for (const GroupOp& op : phase.ops) {
      auto it = std::find(op.members.begin(), op.members.end(), planRank);
      if (it == op.members.end()) {
        // Not this rank's, but checked all the same: whether a call runs in phases must not depend on the rank
        // (a rank that goes flat while its peers run the phases waits for them forever).
        HierStep unused;
        if (!op.members.empty() && !translate(op, 0, static_cast<int>(ph), HierComm::kLocal, &unused, &prog.error)) {
          return prog;
        }
        continue;
      }
      const size_t i = static_cast<size_t>(it - op.members.begin());
      HierComm comm = phase.where == Where::kNode   ? HierComm::kIntra
                      : phase.where == Where::kRail ? HierComm::kRail
                                                    : HierComm::kLocal;
      // The group's rank of a member must be its rank in the communicator the shim made for that group: its local
      // index in a node, its node index on a rail (sched/hierarchical.cc lists members in that order).
      const int expected = comm == HierComm::kIntra ? planRank % perNode : planRank / perNode;
      if (comm != HierComm::kLocal && op.kind != GroupKind::kSendRecv && static_cast<int>(i) != expected) {
        prog.error = std::string("phase ") + std::to_string(ph) + ": members not in " + hierCommName(comm) + " order";
        return prog;
      }
      HierStep s;
      if (!translate(op, i, static_cast<int>(ph), comm, &s, &prog.error)) return prog;
      if (op.kind == GroupKind::kSendRecv && comm != HierComm::kLocal) {
        const int other = op.members[static_cast<size_t>(s.peer)];
        s.peer = comm == HierComm::kIntra ? other % perNode : other / perNode;
      }
      if (op.kind == GroupKind::kCopy) {
        if (s.count > 0) appendCopy(&prog.steps, s);
      } else {
        prog.steps.push_back(s);
      }
    }
  }
  return prog;
}

std::vector<size_t> hierChunkCounts(size_t count, int perNode, int chunks, size_t minChunk) {
  const size_t g = static_cast<size_t>(perNode < 1 ? 1 : perNode);
  if (chunks <= 1 || count % g != 0) return {count};
  const size_t units = count / g;  // chunks are whole multiples of g
  const size_t minUnits = std::max<size_t>(1, (minChunk + g - 1) / g);
  size_t k = std::min<size_t>(static_cast<size_t>(chunks), units / minUnits);
  if (k <= 1) return {count};
  std::vector<size_t> out(k, (units / k) * g);
  out.back() = count - (k - 1) * (units / k) * g;
  return out;
}

namespace {

// How a chunk's program addresses the caller's buffers. kFlat: the chunk's elements start at its offset (AllReduce,
// Broadcast, Reduce: the buffer is one array). kBlocked: the buffer holds one block of the full count per rank and the
// chunk takes piece [offset, offset + count) of every block (AllGather's output, ReduceScatter's input), so an element
// at block b, position e of the chunk's plan moves to b * full + offset + e.
enum class Layout { kFlat, kBlocked };

bool relocate(sched::Region* r, size_t* pitch, size_t rows, Layout layout, size_t chunk, size_t full, size_t offset) {
  if (layout == Layout::kFlat) {
    r->offset += offset;
    return true;
  }
  // Every row must stay inside one block of the chunk's plan, and the pitch must step whole blocks.
  const size_t e = r->offset % chunk;
  if (e + r->count > chunk || (rows > 1 && *pitch % chunk != 0)) return false;
  r->offset = (r->offset / chunk) * full + offset + e;
  if (rows > 1) *pitch = *pitch / chunk * full;
  return true;
}

}  // namespace

HierChunks hierChunkPrograms(const sched::HierarchicalCall& call, int planRank, int chunks, size_t minChunk) {
  HierChunks out;
  using C = sched::HierCollective;
  Layout send = Layout::kFlat, recv = Layout::kFlat;
  int multiple = call.perNode;  // the split of the buffer over a node's ranks must stay even in every chunk
  switch (call.collective) {
    case C::kAllReduce:
    case C::kBroadcast:
    case C::kReduce:
      break;
    case C::kAllGather:
      recv = Layout::kBlocked;
      multiple = 1;
      break;
    case C::kReduceScatter:
      send = Layout::kBlocked;
      multiple = 1;
      break;
    default:
      out.error = std::string(sched::hierCollectiveName(call.collective)) + " is not pipelined";
      return out;
  }
  out.counts = hierChunkCounts(call.count, multiple, chunks, minChunk);
  size_t offset = 0, slot = 0;
  for (size_t count : out.counts) {
    sched::HierarchicalCall c = call;
    c.count = count;
    HierProgram p = hierProgram(sched::planHierarchical(c), planRank, call.perNode);
    if (!p.error.empty()) {
      out.error = p.error;
      return out;
    }
    for (HierStep& s : p.steps) {
      for (auto [r, pitch] : {std::pair{&s.in, &s.srcPitch}, std::pair{&s.out, &s.dstPitch}}) {
        bool ok = true;
        if (r->buffer == sched::HierBuffer::kScratchBuffer) {
          r->offset += slot;  // each chunk its own scratch: chunks run at once
        } else if (r->count > 0 || s.kind == GroupKind::kCopy) {
          ok = relocate(r, pitch, s.kind == GroupKind::kCopy ? s.rows : 1,
                        r->buffer == sched::HierBuffer::kSend ? send : recv, count, call.count, offset);
        }
        if (!ok) {
          out.error = "a chunk's step spans blocks of the caller's buffer";
          return out;
        }
      }
    }
    out.offsets.push_back(offset);
    slot += p.scratchCount;
    out.scratchCount = slot;
    out.programs.push_back(std::move(p));
    offset += count;
  }
  return out;
}

}  // namespace conccl::nccl
