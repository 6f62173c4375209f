// Drives one collective on every rank of a host-backend clique and checks it against the reference.
#pragma once

#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
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
    case Coll::kAllToAllv: case Coll::kSendRecv: break;  // their arguments do not fit this signature
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

// Host-backend communicators with a given timeout (ms), and optionally a small scratch budget.
inline std::vector<concclComm_t> makeHostComms(int n, int timeoutMs, size_t scratchBytes = CONCCL_CONFIG_UNDEF_SIZE) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  config.timeoutMs = timeoutMs;
  config.scratchBytes = scratchBytes;
  std::vector<concclComm_t> comms(n, nullptr);
  EXPECT_EQ(concclCommInitAll(comms.data(), n, nullptr, &config), concclSuccess) << concclGetLastError(nullptr);
  return comms;
}

// Runs collective `c` on every rank of `comms` with fresh random data; rank r calls in place when inPlace[r]
// (collectives without an in-place form ignore it). Returns the number of wrong output elements over all ranks,
// or SIZE_MAX when a call failed.
inline size_t runAndCheck(Coll c, const std::vector<concclComm_t>& comms, size_t count, concclDataType_t t,
                          concclRedOp_t op, int root, const std::vector<bool>& inPlace, Drive drive, uint64_t seed) {
  const int n = static_cast<int>(comms.size());
  const size_t es = esize(t);
  std::mt19937_64 rng(seed);
  std::vector<Bytes> inputs(n), buffers(n), sendBufs(n);
  std::vector<const void*> sendPtr(n);
  std::vector<void*> recvPtr(n);
  for (int r = 0; r < n; ++r) {
    size_t s = sendElems(c, count, n, r, root), v = recvElems(c, count, n, r, root);
    inputs[r] = randomData(s, t, rng);
    if (inPlace[r] && hasInPlace(c)) {
      InPlaceLayout l = inPlaceLayout(c, count, n, r, root);
      buffers[r] = randomData(l.bufferElems, t, rng);
      if (s > 0) std::memcpy(buffers[r].data() + l.sendAt * es, inputs[r].data(), s * es);
      sendPtr[r] = s > 0 ? buffers[r].data() + l.sendAt * es : nullptr;
      recvPtr[r] = v > 0 ? buffers[r].data() + l.recvAt * es : nullptr;
    } else {
      sendBufs[r] = inputs[r];
      buffers[r] = randomData(v, t, rng);
      sendPtr[r] = s > 0 ? sendBufs[r].data() : nullptr;
      recvPtr[r] = v > 0 ? buffers[r].data() : nullptr;
    }
  }
  auto results = forEachRank(n, drive, [&](int r) {
    return callCollective(c, sendPtr[r], recvPtr[r], count, t, op, root, comms[r], nullptr);
  });
  for (int r = 0; r < n; ++r) {
    if (results[r] != concclSuccess) {
      ADD_FAILURE() << collKindName(c) << " rank " << r << ": " << concclGetLastError(comms[r]);
      return SIZE_MAX;
    }
  }
  std::vector<Bytes> want = reference(c, inputs, count, t, op, root);
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    size_t v = recvElems(c, count, n, r, root);
    Bytes got(v * es);
    if (v > 0) std::memcpy(got.data(), recvPtr[r], v * es);
    wrong += countWrong(got, want[r], t, isReduction(c), n);
  }
  return wrong;
}

}  // namespace conccl::test
