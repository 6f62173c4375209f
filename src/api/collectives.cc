// The collective and point-to-point entry points: local argument validation, in-place detection, then the
// call is handed to the group layer (recorded inside a group, run at once outside).
//
// Checks that need every rank's arguments (agreement of counts/types/ops/roots, NULL or too-small buffers,
// AllToAllv count symmetry) run when the last rank has posted (core/clique.cc), so that every rank of the call
// reports the same error instead of some ranks waiting for a rank that bailed out.
#include <cstdint>
#include <cstring>
#include <limits>

#include "api/api_guard.h"
#include "api/cross_node.h"
#include "core/group.h"
#include "base/types.h"
#include "sched/schedule.h"

namespace conccl::api {
namespace {

using sched::CollKind;

struct Local {
  concclComm* comm;
  int nranks;
  int rank;
  size_t elemSize;
};

Local begin(concclComm* comm, concclDataType_t dtype, cudaStream_t stream) {
  requireLiveComm(comm);
  CONCCL_REQUIRE(isValidType(dtype), "datatype " + std::to_string(static_cast<int>(dtype)) + " is not a conccl type");
  if (comm->crossNode != nullptr) return Local{comm, crossNodeRanks(comm), comm->rank, typeSize(dtype)};
  if (comm->clique->config().backend == concclBackendHost) {
    CONCCL_REQUIRE(stream == nullptr, "the host backend has no streams: pass stream = NULL");
  }
  return Local{comm, comm->clique->nranks(), comm->rank, typeSize(dtype)};
}

void requireOp(concclRedOp_t op, concclDataType_t dtype) {
  CONCCL_REQUIRE(isValidOp(op), "op " + std::to_string(static_cast<int>(op)) + " is not a conccl reduction op");
  CONCCL_REQUIRE(supportsReduction(dtype),
                 std::string("datatype ") + typeName(dtype) + " supports data movement only, not reductions");
}

void requireRoot(int root, int nranks) {
  CONCCL_REQUIRE(root >= 0 && root < nranks,
                 "root " + std::to_string(root) + " is not a rank of this communicator (size " +
                     std::to_string(nranks) + ")");
}

// count * elemSize * factor in bytes, or an error when it does not fit (a 32-bit caller's negative count cast to
// size_t lands here too).
size_t bytesFor(size_t count, size_t elemSize, size_t factor, const char* what) {
  const size_t limit = static_cast<size_t>(std::numeric_limits<int64_t>::max());
  CONCCL_REQUIRE(factor == 0 || count <= limit / elemSize / factor,
                 std::string(what) + " = " + std::to_string(count) + " elements overflows the addressable size");
  return count * elemSize * factor;
}

bool overlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (a == nullptr || b == nullptr || aBytes == 0 || bBytes == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bBytes && pb < pa + aBytes;
}

// `inPlace` when the input is exactly where the API's in-place rule puts it; any other overlap is an error
// because the result would depend on the order in which bytes move.
bool detectInPlace(const void* send, size_t sendBytes, const void* recv, size_t recvBytes, const void* inPlaceSend) {
  if (send != nullptr && send == inPlaceSend) return true;
  CONCCL_REQUIRE(!overlap(send, sendBytes, recv, recvBytes),
                 "sendbuff and recvbuff overlap but not as the in-place case of this collective");
  return false;
}

const void* offsetBy(const void* p, size_t bytes) {
  return p == nullptr ? nullptr : static_cast<const char*>(p) + bytes;
}

// p - bytes: where sendbuff starts when recvbuff = p is its block at `bytes` (ReduceScatter, Scatter in place).
const void* backBy(const void* p, size_t bytes) {
  return p == nullptr ? nullptr : static_cast<const char*>(p) - static_cast<ptrdiff_t>(bytes);
}

// The checked call: to the group layer (core/group.h), or to the communicator across hosts (api/cross_node.h).
void dispatch(concclComm* comm, RankArgs args) {
  if (comm->crossNode != nullptr) return crossNodeCall(comm, args);
  enqueueCall(comm, std::move(args));
}

RankArgs makeArgs(CollKind kind, const char* api, concclDataType_t dtype, size_t count, const void* send, void* recv,
                  cudaStream_t stream) {
  RankArgs a;
  a.kind = kind;
  a.apiName = api;
  a.dtype = dtype;
  a.count = count;
  a.sendbuff = send;
  a.recvbuff = recv;
  a.stream = stream;
  return a;
}

// An AllGather's arguments (plain or chunked), sizes checked and in place detected.
RankArgs allGatherArgs(const char* api, const Local& l, const void* sendbuff, void* recvbuff, size_t sendcount,
                       concclDataType_t datatype, cudaStream_t stream) {
  size_t sendBytes = bytesFor(sendcount, l.elemSize, 1, "sendcount");
  size_t recvBytes = bytesFor(sendcount, l.elemSize, l.nranks, "sendcount");
  RankArgs a = makeArgs(CollKind::kAllGather, api, datatype, sendcount, sendbuff, recvbuff, stream);
  a.inPlace = detectInPlace(sendbuff, sendBytes, recvbuff, recvBytes, offsetBy(recvbuff, l.rank * sendBytes));
  return a;
}

// A ReduceScatter's arguments (plain or chunked; the op already checked), sizes checked and in place detected:
// in place, recvbuff == sendbuff + rank*recvcount.
RankArgs reduceScatterArgs(const char* api, const Local& l, const void* sendbuff, void* recvbuff, size_t recvcount,
                           concclDataType_t datatype, concclRedOp_t op, cudaStream_t stream) {
  size_t recvBytes = bytesFor(recvcount, l.elemSize, 1, "recvcount");
  size_t sendBytes = bytesFor(recvcount, l.elemSize, l.nranks, "recvcount");
  RankArgs a = makeArgs(CollKind::kReduceScatter, api, datatype, recvcount, sendbuff, recvbuff, stream);
  a.op = op;
  a.inPlace = detectInPlace(sendbuff, sendBytes, recvbuff, recvBytes, backBy(recvbuff, l.rank * recvBytes));
  return a;
}

// The public collective enum as the schedule builders name it; false for a value outside the enum. Takes the raw
// value: a caller may pass any int, and loading an out-of-range value as the enum type is undefined (UBSan).
bool collKindOf(int coll, CollKind* kind) {
  switch (coll) {
    case concclCollAllGather: *kind = CollKind::kAllGather; return true;
    case concclCollReduceScatter: *kind = CollKind::kReduceScatter; return true;
    case concclCollAllReduce: *kind = CollKind::kAllReduce; return true;
    case concclCollBroadcast: *kind = CollKind::kBroadcast; return true;
    case concclCollReduce: *kind = CollKind::kReduce; return true;
    case concclCollAllToAll: *kind = CollKind::kAllToAll; return true;
    case concclCollGather: *kind = CollKind::kGather; return true;
    case concclCollScatter: *kind = CollKind::kScatter; return true;
    default: return false;
  }
}

// Elements of the largest buffer of `kind` for a call of `count` (count x nranks for the gathered / scattered side):
// what the call's own entry point checks for overflow.
size_t countFactor(CollKind kind, int nranks) {
  switch (kind) {
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
    case CollKind::kGather:
    case CollKind::kScatter:
      return static_cast<size_t>(nranks);
    default:
      return 1;
  }
}

}  // namespace
}  // namespace conccl::api

using namespace conccl;       // NOLINT: the C entry points below are thin
using namespace conccl::api;  // NOLINT

extern "C" {

concclResult_t concclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, concclDataType_t datatype,
                               concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclAllGather";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    dispatch(comm, allGatherArgs(kApi, l, sendbuff, recvbuff, sendcount, datatype, stream));
  });
}

concclResult_t concclAllGatherChunked(const void* sendbuff, void* recvbuff, size_t sendcount, concclDataType_t datatype,
                                      concclComm_t comm, cudaStream_t stream, cudaEvent_t* chunkReady) {
  constexpr const char* kApi = "concclAllGatherChunked";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    CONCCL_REQUIRE(chunkReady != nullptr, "chunkReady is NULL (pass an array of nranks events, entries may be NULL)");
    requireOneHost(comm, kApi);
    if (comm->clique->config().backend == concclBackendHost) {
      CONCCL_THROW(concclNotSupported, "the host backend has no CUDA events: use concclAllGather");
    }
    RankArgs a = allGatherArgs(kApi, l, sendbuff, recvbuff, sendcount, datatype, stream);
    a.chunkEvents.assign(chunkReady, chunkReady + l.nranks);
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, concclDataType_t datatype,
                                   concclRedOp_t op, concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclReduceScatter";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireOp(op, datatype);
    dispatch(comm, reduceScatterArgs(kApi, l, sendbuff, recvbuff, recvcount, datatype, op, stream));
  });
}

concclResult_t concclReduceScatterChunked(const void* sendbuff, void* recvbuff, size_t recvcount,
                                          concclDataType_t datatype, concclRedOp_t op, concclComm_t comm,
                                          cudaStream_t stream, int piecesPerBlock, const cudaEvent_t* pieceReady) {
  constexpr const char* kApi = "concclReduceScatterChunked";
  constexpr int kMaxPiecesPerBlock = 4096;
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireOp(op, datatype);
    CONCCL_REQUIRE(piecesPerBlock >= 1 && piecesPerBlock <= kMaxPiecesPerBlock,
                   "piecesPerBlock = " + std::to_string(piecesPerBlock) + " is outside 1.." +
                       std::to_string(kMaxPiecesPerBlock));
    CONCCL_REQUIRE(pieceReady != nullptr,
                   "pieceReady is NULL (pass an array of nranks * piecesPerBlock events, entries may be NULL)");
    requireOneHost(comm, kApi);
    if (comm->clique->config().backend == concclBackendHost) {
      CONCCL_THROW(concclNotSupported, "the host backend has no CUDA events: use concclReduceScatter");
    }
    RankArgs a = reduceScatterArgs(kApi, l, sendbuff, recvbuff, recvcount, datatype, op, stream);
    a.inputEvents.assign(pieceReady, pieceReady + static_cast<size_t>(l.nranks) * static_cast<size_t>(piecesPerBlock));
    a.piecesPerBlock = piecesPerBlock;
    a.pushInputs = true;
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclAllReduce(const void* sendbuff, void* recvbuff, size_t count, concclDataType_t datatype,
                               concclRedOp_t op, concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclAllReduce";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireOp(op, datatype);
    size_t bytes = bytesFor(count, l.elemSize, 1, "count");
    RankArgs a = makeArgs(CollKind::kAllReduce, kApi, datatype, count, sendbuff, recvbuff, stream);
    a.op = op;
    a.inPlace = detectInPlace(sendbuff, bytes, recvbuff, bytes, recvbuff);
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclBroadcast(const void* sendbuff, void* recvbuff, size_t count, concclDataType_t datatype, int root,
                               concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclBroadcast";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireRoot(root, l.nranks);
    size_t bytes = bytesFor(count, l.elemSize, 1, "count");
    RankArgs a = makeArgs(CollKind::kBroadcast, kApi, datatype, count, sendbuff, recvbuff, stream);
    a.root = root;
    // sendbuff is read on the root only.
    a.inPlace = l.rank == root ? detectInPlace(sendbuff, bytes, recvbuff, bytes, recvbuff) : false;
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclReduce(const void* sendbuff, void* recvbuff, size_t count, concclDataType_t datatype,
                            concclRedOp_t op, int root, concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclReduce";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireOp(op, datatype);
    requireRoot(root, l.nranks);
    size_t bytes = bytesFor(count, l.elemSize, 1, "count");
    RankArgs a = makeArgs(CollKind::kReduce, kApi, datatype, count, sendbuff, recvbuff, stream);
    a.op = op;
    a.root = root;
    a.inPlace = l.rank == root ? detectInPlace(sendbuff, bytes, recvbuff, bytes, recvbuff) : false;
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclAllToAll(const void* sendbuff, void* recvbuff, size_t count, concclDataType_t datatype,
                              concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclAllToAll";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    size_t bytes = bytesFor(count, l.elemSize, l.nranks, "count");
    CONCCL_REQUIRE(!overlap(sendbuff, bytes, recvbuff, bytes), "concclAllToAll cannot run in place: sendbuff and "
                                                               "recvbuff overlap");
    dispatch(comm, makeArgs(CollKind::kAllToAll, kApi, datatype, count, sendbuff, recvbuff, stream));
  });
}

concclResult_t concclAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                               void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                               concclDataType_t datatype, concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclAllToAllv";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    CONCCL_REQUIRE(sendcounts != nullptr && sdispls != nullptr && recvcounts != nullptr && rdispls != nullptr,
                   "sendcounts, sdispls, recvcounts and rdispls must not be NULL");
    RankArgs a = makeArgs(CollKind::kAllToAllv, kApi, datatype, 0, sendbuff, recvbuff, stream);
    size_t sendEnd = 0, recvEnd = 0;
    for (int p = 0; p < l.nranks; ++p) {
      // Extents in bytes, checked for overflow, to detect overlapping send and receive buffers.
      size_t s = bytesFor(sendcounts[p], l.elemSize, 1, "sendcounts[p]") + bytesFor(sdispls[p], l.elemSize, 1, "sdispls[p]");
      size_t r = bytesFor(recvcounts[p], l.elemSize, 1, "recvcounts[p]") + bytesFor(rdispls[p], l.elemSize, 1, "rdispls[p]");
      if (sendcounts[p] > 0) sendEnd = std::max(sendEnd, s);
      if (recvcounts[p] > 0) recvEnd = std::max(recvEnd, r);
    }
    CONCCL_REQUIRE(!overlap(sendbuff, sendEnd, recvbuff, recvEnd),
                   "concclAllToAllv cannot run in place: sendbuff and recvbuff overlap");
    a.sendCounts.assign(sendcounts, sendcounts + l.nranks);
    a.sendDispls.assign(sdispls, sdispls + l.nranks);
    a.recvCounts.assign(recvcounts, recvcounts + l.nranks);
    a.recvDispls.assign(rdispls, rdispls + l.nranks);
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclGather(const void* sendbuff, void* recvbuff, size_t sendcount, concclDataType_t datatype, int root,
                            concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclGather";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireRoot(root, l.nranks);
    size_t sendBytes = bytesFor(sendcount, l.elemSize, 1, "sendcount");
    size_t recvBytes = bytesFor(sendcount, l.elemSize, l.nranks, "sendcount");
    RankArgs a = makeArgs(CollKind::kGather, kApi, datatype, sendcount, sendbuff, recvbuff, stream);
    a.root = root;
    a.inPlace = l.rank == root
                    ? detectInPlace(sendbuff, sendBytes, recvbuff, recvBytes, offsetBy(recvbuff, root * sendBytes))
                    : false;
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclScatter(const void* sendbuff, void* recvbuff, size_t recvcount, concclDataType_t datatype,
                             int root, concclComm_t comm, cudaStream_t stream) {
  constexpr const char* kApi = "concclScatter";
  return apiCall(comm, kApi, [&] {
    Local l = begin(comm, datatype, stream);
    requireRoot(root, l.nranks);
    size_t recvBytes = bytesFor(recvcount, l.elemSize, 1, "recvcount");
    size_t sendBytes = bytesFor(recvcount, l.elemSize, l.nranks, "recvcount");
    RankArgs a = makeArgs(CollKind::kScatter, kApi, datatype, recvcount, sendbuff, recvbuff, stream);
    a.root = root;
    if (l.rank == root) {
      a.inPlace = detectInPlace(sendbuff, sendBytes, recvbuff, recvBytes, backBy(recvbuff, root * recvBytes));
    }
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclCallResources(concclComm_t comm, concclCollective_t coll, size_t count, concclDataType_t datatype,
                                   int root, concclCallResources_t* out) {
  return apiCall(comm, "concclCallResources", [&] {
    requireLiveComm(comm);
    CONCCL_REQUIRE(out != nullptr, "out is NULL");
    requireOneHost(comm, "concclCallResources");
    CollKind kind = CollKind::kAllGather;
    int rawColl = 0;
    static_assert(sizeof(rawColl) == sizeof(coll));
    std::memcpy(&rawColl, &coll, sizeof(rawColl));  // the bytes the caller passed, without an enum load
    CONCCL_REQUIRE(collKindOf(rawColl, &kind), "collective " + std::to_string(rawColl) + " is not a concclCollective_t");
    CONCCL_REQUIRE(isValidType(datatype), "datatype " + std::to_string(static_cast<int>(datatype)) + " is not a conccl type");
    const int nranks = comm->clique->nranks();
    if (sched::isReduction(kind)) requireOp(concclSum, datatype);
    const bool rooted = sched::isRooted(kind);
    if (rooted) requireRoot(root, nranks);
    bytesFor(count, typeSize(datatype), countFactor(kind, nranks), "count");
    if (auto failed = comm->clique->asyncError()) {
      CONCCL_THROW(concclInvalidUsage, "the communicator is out of service: " + failed->message());
    }
    // The schedule the call itself would get: same builder, same options as the clique's schedule cache.
    sched::CollectiveCall call;
    call.kind = kind;
    call.nranks = nranks;
    call.dtype = datatype;
    call.op = concclSum;
    call.root = rooted ? root : 0;
    call.count = count;
    call.inPlace.assign(static_cast<size_t>(nranks), false);
    exec::Executor& executor = comm->clique->executor();
    const sched::Schedule schedule = sched::buildSchedule(call, executor.buildOptions());
    *out = executor.callResources(schedule, comm->rank);
  });
}

// Point-to-point ops are matched by byte size (count x type size), so a Send of 4 float may meet a Recv of
// 16 uint8: like NCCL, the types are the caller's business.
static concclResult_t p2pCall(bool isSend, const char* api, void* buff, size_t count, concclDataType_t datatype,
                              int peer, concclComm_t comm, cudaStream_t stream) {
  return apiCall(comm, api, [&] {
    Local l = begin(comm, datatype, stream);
    CONCCL_REQUIRE(peer >= 0 && peer < l.nranks, "peer " + std::to_string(peer) +
                                                     " is not a rank of this communicator (size " +
                                                     std::to_string(l.nranks) + ")");
    size_t bytes = bytesFor(count, l.elemSize, 1, "count");
    CONCCL_REQUIRE(bytes == 0 || buff != nullptr, std::string(isSend ? "sendbuff" : "recvbuff") + " is NULL");
    RankArgs a = makeArgs(sched::CollKind::kSendRecv, api, concclUint8, 0, nullptr, nullptr, stream);
    a.p2p.push_back(sched::P2POp{isSend, peer, bytes, 0});
    a.p2pBuffers.push_back(buff);
    dispatch(comm, std::move(a));
  });
}

concclResult_t concclSend(const void* sendbuff, size_t count, concclDataType_t datatype, int peer, concclComm_t comm,
                          cudaStream_t stream) {
  return p2pCall(true, "concclSend", const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

concclResult_t concclRecv(void* recvbuff, size_t count, concclDataType_t datatype, int peer, concclComm_t comm,
                          cudaStream_t stream) {
  return p2pCall(false, "concclRecv", recvbuff, count, datatype, peer, comm, stream);
}

}  // extern "C"
