// NCCL's collectives and point-to-point calls. Each one asks routeCall() where it goes: the real NCCL (the
// communicator was forwarded at init), conccl (arguments mapped exactly), or nowhere (failure with a message:
// a type, op or collective a conccl communicator cannot run exactly).
#include <string>

#include "nccl/call_time.h"
#include "nccl/premul_ops.h"
#include "nccl/shim_comm.h"
#include "nccl/shim_hierarchical.h"
#include "nccl/type_map.h"

using namespace conccl::nccl;
using conccl::sched::HierCollective;

namespace {


// The route of one call; on kFail the failure is already recorded and `*result` holds its code.
Path route(ncclComm_t comm, Coll coll, ncclDataType_t type, int op, const char* call, ncclResult_t* result) {
  if (comm == nullptr) {
    *result = fail(nullptr, ncclInvalidArgument, std::string(call) + ": comm is NULL");
    return Path::kFail;
  }
  if (isShimComm(comm) && comm->path == Path::kConccl && comm->conccl == nullptr) {
    *result =
        fail(comm, ncclInvalidUsage, std::string(call) + ": the communicator's init failed or waits for ncclGroupEnd");
    return Path::kFail;
  }
  Decision d = routeCall(shim().env, isShimComm(comm) ? comm->path : Path::kNccl, coll, static_cast<int>(type), op);
  if (d.path == Path::kFail) *result = fail(comm, ncclInvalidArgument, std::string(call) + ": " + d.reason);
  return d.path;
}

// An op made by ncclRedOpCreatePreMulSum, on a conccl communicator: runPreMulSum (shim_premul.cc) runs it.
bool preMulOnConccl(ncclComm_t comm, ncclRedOp_t op) {
  return comm != nullptr && isShimComm(comm) && comm->path == Path::kConccl && comm->conccl != nullptr &&
         static_cast<int>(op) >= static_cast<int>(ncclNumOps);
}

concclDataType_t ty(ncclDataType_t t) { return *toConcclType(static_cast<int>(t)); }

// The arguments of a Send or Recv on a communicator across hosts (hierarchicalCall).
HierArgs p2pArgs(bool send, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int peer,
                 cudaStream_t stream, const char* call) {
  HierArgs a;
  a.coll = HierCollective::kSendRecv;
  a.sendbuff = sendbuff;
  a.recvbuff = recvbuff;
  a.count = count;
  a.type = type;
  a.stream = stream;
  a.call = call;
  a.peer = peer;
  a.send = send;
  return a;
}
concclRedOp_t op(ncclRedOp_t o) { return *toConcclOp(static_cast<int>(o)); }

}  // namespace

CONCCL_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclRedOp_t redOp, ncclComm_t comm,
                                              cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  if (preMulOnConccl(comm, redOp)) {
    return runPreMulSum(comm, Coll::kAllReduce, sendbuff, recvbuff, count, count, datatype, redOp, 0, stream,
                        "ncclAllReduce");
  }
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kAllReduce, datatype, redOp, "ncclAllReduce", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kAllReduce, sendbuff, recvbuff, count, datatype, redOp, 0, stream,
                          "ncclAllReduce"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclAllReduce, sendbuff, recvbuff, count, datatype, redOp, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclAllReduce(sendbuff, recvbuff, count, ty(datatype), op(redOp), comm->conccl, stream),
                    "ncclAllReduce");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           ncclRedOp_t redOp, int root, ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  if (preMulOnConccl(comm, redOp)) {
    return runPreMulSum(comm, Coll::kReduce, sendbuff, recvbuff, count, count, datatype, redOp, root, stream,
                        "ncclReduce");
  }
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kReduce, datatype, redOp, "ncclReduce", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kReduce, sendbuff, recvbuff, count, datatype, redOp, root, stream,
                          "ncclReduce"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclReduce, sendbuff, recvbuff, count, datatype, redOp, root, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclReduce(sendbuff, recvbuff, count, ty(datatype), op(redOp), root, comm->conccl, stream),
                    "ncclReduce");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                  ncclDataType_t datatype, ncclRedOp_t redOp, ncclComm_t comm,
                                                  cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  if (preMulOnConccl(comm, redOp)) {
    int nranks = 0;
    if (concclCommCount(comm->conccl, &nranks) != concclSuccess) {
      return fromConccl(comm, concclInvalidUsage, "ncclReduceScatter");
    }
    return runPreMulSum(comm, Coll::kReduceScatter, sendbuff, recvbuff, recvcount,
                        recvcount * static_cast<size_t>(nranks), datatype, redOp, 0, stream, "ncclReduceScatter");
  }
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kReduceScatter, datatype, redOp, "ncclReduceScatter", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, redOp, 0, stream,
                          "ncclReduceScatter"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, redOp, realComm(comm),
                          stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm,
                    concclReduceScatter(sendbuff, recvbuff, recvcount, ty(datatype), op(redOp), comm->conccl, stream),
                    "ncclReduceScatter");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kBroadcast, datatype, -1, "ncclBroadcast", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kBroadcast, sendbuff, recvbuff, count, datatype, -1, root, stream,
                          "ncclBroadcast"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclBroadcast, sendbuff, recvbuff, count, datatype, root, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclBroadcast(sendbuff, recvbuff, count, ty(datatype), root, comm->conccl, stream),
                    "ncclBroadcast");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kBroadcast, datatype, -1, "ncclBcast", &r)) {
    // The real ncclBcast calls ncclBroadcast through the PLT, which would land in the shim: go there directly.
    case Path::kNccl: {
      const HierArgs args{HierCollective::kBroadcast, buff, buff, count, datatype, -1, root, stream, "ncclBcast"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclBroadcast, buff, buff, count, datatype, root, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclBroadcast(buff, buff, count, ty(datatype), root, comm->conccl, stream), "ncclBcast");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kAllGather, datatype, -1, "ncclAllGather", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kAllGather, sendbuff, recvbuff, sendcount, datatype, -1, 0, stream,
                          "ncclAllGather"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclAllGather, sendbuff, recvbuff, sendcount, datatype, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclAllGather(sendbuff, recvbuff, sendcount, ty(datatype), comm->conccl, stream),
                    "ncclAllGather");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kAllToAll, datatype, -1, "ncclAlltoAll", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kAllToAll, sendbuff, recvbuff, count, datatype, -1, 0, stream,
                          "ncclAlltoAll"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclAlltoAll, sendbuff, recvbuff, count, datatype, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  // NCCL runs AllToAll in place (nccl-tests checks it); conccl's copy-engine schedule would overwrite blocks it has
  // not sent yet, so an overlapping input is staged into scratch first (one same-device copy).
  int nranks = 0;
  if (concclCommCount(comm->conccl, &nranks) != concclSuccess) {
    return fromConccl(comm, concclInvalidArgument, "ncclAlltoAll");
  }
  const size_t bytes = count * static_cast<size_t>(nranks) * ncclTypeBytes(static_cast<int>(datatype));
  const auto* s = static_cast<const char*>(sendbuff);
  const auto* d = static_cast<const char*>(recvbuff);
  if (bytes > 0 && sendbuff != nullptr && recvbuff != nullptr && s < d + bytes && d < s + bytes) {
    return runWithStagedInput(comm, sendbuff, bytes, stream, "ncclAlltoAll", [&](const void* staged) {
      return fromConccl(comm, concclAllToAll(staged, recvbuff, count, ty(datatype), comm->conccl, stream),
                        "ncclAlltoAll");
    });
  }
  return fromConccl(comm, concclAllToAll(sendbuff, recvbuff, count, ty(datatype), comm->conccl, stream),
                    "ncclAlltoAll");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           int root, ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kGather, datatype, -1, "ncclGather", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kGather, sendbuff, recvbuff, count, datatype, -1, root, stream, "ncclGather"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclGather, sendbuff, recvbuff, count, datatype, root, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclGather(sendbuff, recvbuff, count, ty(datatype), root, comm->conccl, stream),
                    "ncclGather");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                            int root, ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kScatter, datatype, -1, "ncclScatter", &r)) {
    case Path::kNccl: {
      const HierArgs args{HierCollective::kScatter, sendbuff, recvbuff, count, datatype, -1, root, stream,
                          "ncclScatter"};
      if (hierarchicalCall(comm, args, &r)) return r;  // across hosts, in phases
      CONCCL_NCCL_FORWARD(comm, ncclScatter, sendbuff, recvbuff, count, datatype, root, realComm(comm), stream);
    }
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclScatter(sendbuff, recvbuff, count, ty(datatype), root, comm->conccl, stream),
                    "ncclScatter");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                         ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kSendRecv, datatype, -1, "ncclSend", &r)) {
    case Path::kNccl:
      // Across hosts: a peer of this node on conccl (hierRun), the others on the flat communicator.
      if (hierarchicalCall(comm, p2pArgs(true, sendbuff, nullptr, count, datatype, peer, stream, "ncclSend"), &r)) return r;
      CONCCL_NCCL_FORWARD(comm, ncclSend, sendbuff, count, datatype, peer, realComm(comm), stream);
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclSend(sendbuff, count, ty(datatype), peer, comm->conccl, stream), "ncclSend");
}

CONCCL_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                         ncclComm_t comm, cudaStream_t stream) {
  const ShimCallTimer timer;  // conccl's own host time per call (call_time.h)
  ncclResult_t r = ncclSuccess;
  switch (route(comm, Coll::kSendRecv, datatype, -1, "ncclRecv", &r)) {
    case Path::kNccl:
      // Across hosts: a peer of this node on conccl (hierRun), the others on the flat communicator.
      if (hierarchicalCall(comm, p2pArgs(false, nullptr, recvbuff, count, datatype, peer, stream, "ncclRecv"), &r)) return r;
      CONCCL_NCCL_FORWARD(comm, ncclRecv, recvbuff, count, datatype, peer, realComm(comm), stream);
    case Path::kFail:
      return r;
    case Path::kConccl:
      break;
  }
  return fromConccl(comm, concclRecv(recvbuff, count, ty(datatype), peer, comm->conccl, stream), "ncclRecv");
}
