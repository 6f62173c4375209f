#include "nccl/hier_answer.h"

#include <cstring>

#include "core/bootstrap.h"

namespace conccl::nccl {
namespace {

constexpr size_t kIdBytes = sizeof(RailId);
static_assert(sizeof(concclUniqueId::internal) == kIdBytes, "conccl and NCCL ids have one size");
constexpr size_t kMaxAnswerBytes = 60000;  // below the rendezvous reply's 64 KiB, leaving room for the reason
constexpr size_t kHeadBytes = 1 + kIdBytes + 12;  // 'H', the flat id, nodes, perNode, chunks

void putU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), sizeof(v)); }
uint32_t getU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, s.data() + at, sizeof(v));
  return v;
}

bool railId(const RailApi& api, RailId* id, std::string* error) {
  const int r = api.getUniqueId != nullptr ? api.getUniqueId(id) : -1;
  if (r != 0) {
    *error = "the real ncclGetUniqueId failed (" + std::to_string(r) + ")";
    return false;
  }
  return true;
}

}  // namespace

bool localConcclId(concclUniqueId* id, std::string* error) {
  try {
    storeUniqueId(makeUniqueId(), id);
    return true;
  } catch (const std::exception& e) {
    *error = std::string("a conccl id: ") + e.what();
    return false;
  }
}

bool makeHierarchicalAnswer(const std::vector<uint64_t>& hosts, int chunks, const RailApi& api, std::string* answer,
                            std::string* why, std::string* error) {
  HierLayout l = hierLayout(hosts);
  if (!l.error.empty()) {
    *why = "not hierarchical: " + l.error;
    return false;
  }
  if (!hierarchicalLayout(l)) {
    *why = "not hierarchical: " + std::to_string(l.nodes) + " nodes x " + std::to_string(l.perNode) + " ranks";
    return false;
  }
  const size_t ids = 1 + static_cast<size_t>(l.nodes) + static_cast<size_t>(l.perNode);
  if (1 + ids * kIdBytes + 12 > kMaxAnswerBytes) {
    *why = "not hierarchical: " + std::to_string(ids) + " ids do not fit the rendezvous reply";
    return false;
  }
  std::string a(1, kAnswerHierarchical);
  RailId id{};
  if (!railId(api, &id, error)) return false;
  a.append(id.internal, kIdBytes);
  putU32(&a, static_cast<uint32_t>(l.nodes));
  putU32(&a, static_cast<uint32_t>(l.perNode));
  putU32(&a, static_cast<uint32_t>(chunks));  // the root's, so that every rank pipelines alike
  for (int k = 0; k < l.nodes; ++k) {
    concclUniqueId cid;
    if (!localConcclId(&cid, error)) return false;
    a.append(cid.internal, kIdBytes);
  }
  for (int g = 0; g < l.perNode; ++g) {
    if (!railId(api, &id, error)) return false;
    a.append(id.internal, kIdBytes);
  }
  a.append("hierarchical: " + std::to_string(l.nodes) + " nodes x " + std::to_string(l.perNode) +
           " ranks, intra on conccl, rails on NCCL" + (l.nodeMajor ? "" : " (ranks not node-major)"));
  *answer = std::move(a);
  return true;
}

HierAnswer parseHierarchicalAnswer(const std::string& answer, const std::vector<uint64_t>& hosts, int nranks,
                                   int rank) {
  HierAnswer out;
  if (answer.size() < kHeadBytes || answer[0] != kAnswerHierarchical) {
    out.error = "malformed answer";
    return out;
  }
  const int nodes = static_cast<int>(getU32(answer, 1 + kIdBytes));
  const int perNode = static_cast<int>(getU32(answer, 1 + kIdBytes + 4));
  const int chunks = static_cast<int>(getU32(answer, 1 + kIdBytes + 8));
  out.layout = hierLayout(hosts);
  const HierLayout& l = out.layout;
  if (!l.error.empty() || l.nodes != nodes || l.perNode != perNode || static_cast<int>(hosts.size()) != nranks ||
      rank < 0 || rank >= nranks) {
    out.error = "the root's layout differs from this rank's";
    return out;
  }
  const size_t idsEnd = kHeadBytes + (static_cast<size_t>(nodes) + static_cast<size_t>(perNode)) * kIdBytes;
  if (answer.size() < idsEnd) {
    out.error = "the answer is cut short";
    return out;
  }
  out.chunks = chunks < 1 ? 1 : chunks;
  std::memcpy(out.flatId.internal, answer.data() + 1, kIdBytes);
  out.nodeIds.resize(static_cast<size_t>(nodes));
  for (int k = 0; k < nodes; ++k) {
    std::memcpy(out.nodeIds[static_cast<size_t>(k)].internal,
                answer.data() + kHeadBytes + static_cast<size_t>(k) * kIdBytes, kIdBytes);
  }
  out.railIds.resize(static_cast<size_t>(perNode));
  for (int g = 0; g < perNode; ++g) {
    std::memcpy(out.railIds[static_cast<size_t>(g)].internal,
                answer.data() + kHeadBytes + (static_cast<size_t>(nodes) + g) * kIdBytes, kIdBytes);
  }
  out.reason = answer.substr(idsEnd);
  return out;
}

}  // namespace conccl::nccl
