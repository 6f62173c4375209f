// Drives one collective on every rank of a host-backend clique and checks it against the reference.
#pragma once

#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "common/reference.h"

namespace conccl::test {

enum class Drive { kGroup, kThreads };

// Runs fn(rank) for every rank: from one thread inside a group, or from one thread per rank.
inline std::vector<concclResult_t> forEachRank(int n, Drive drive, const std::function<concclResult_t(int)>& fn) {
  std::vector<concclResult_t> results(n, concclSuccess);
  if (drive == Drive::kGroup) {
    concclGroupStart();
    for (int r = 0; r < n; ++r) results[r] = fn(r);
    concclResult_t end = concclGroupEnd();
    for (int r = 0; r < n; ++r) {
      if (results[r] == concclSuccess) results[r] = end;
    }
  } else {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
    for (auto& t : threads) t.join();
  }
  return results;
}

// Calls collective `c` on rank r with the given (host or device) pointers.
inline concclResult_t callCollective(Coll c, const void* send, void* recv, size_t count, concclDataType_t t,
                                     concclRedOp_t op, int root, concclComm_t comm, cudaStream_t stream) {
  switch (c) {
    case Coll::kAllGather: return concclAllGather(send, recv, count, t, comm, stream);
    case Coll::kReduceScatter: return concclReduceScatter(send, recv, count, t, op, comm, stream);
    case Coll::kAllReduce: return concclAllReduce(send, recv, count, t, op, comm, stream);
    case Coll::kBroadcast: return concclBroadcast(send, recv, count, t, root, comm, stream);
    case Coll::kReduce: return concclReduce(send, recv, count, t, op, root, comm, stream);
    case Coll::kAllToAll: return concclAllToAll(send, recv, count, t, comm, stream);
    case Coll::kGather: return concclGather(send, recv, count, t, root, comm, stream);
    case Coll::kScatter: return concclScatter(send, recv, count, t, root, comm, stream);
  }
  return concclInternalError;
}

// Where the input sits inside the in-place buffer, and where the output sits, in elements, for rank r.
struct InPlaceLayout {
  size_t bufferElems = 0;  // the one buffer the rank allocates
  size_t sendAt = 0;       // sendbuff = buffer + sendAt
  size_t recvAt = 0;       // recvbuff = buffer + recvAt
};

inline InPlaceLayout inPlaceLayout(Coll c, size_t count, int n, int r, int root) {
  size_t s = sendElems(c, count, n, r, root), v = recvElems(c, count, n, r, root);
  switch (c) {
    case Coll::kAllGather: return {v, r * count, 0};
    case Coll::kGather: return r == root ? InPlaceLayout{v, root * count, 0} : InPlaceLayout{s, 0, 0};
    case Coll::kReduceScatter: return {s, 0, r * count};
    case Coll::kScatter: return r == root ? InPlaceLayout{s, 0, root * count} : InPlaceLayout{v, 0, 0};
    default: return {std::max(s, v), 0, 0};
  }
}

}  // namespace conccl::test
