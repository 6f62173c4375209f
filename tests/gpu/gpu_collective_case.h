// One collective call on n ranks, end to end through the public API: buffer layout (in place or not),
// fresh random inputs, the expected outputs computed on the host, and the check.
//
// Reductions use small integer values (+-1..8, or +-1..2 for prod) in every type: every partial sum is exact
// in fp16/bf16/fp32, so the result does not depend on the order the schedule reduces in and the comparison
// can be bit-exact against exec::reduceHost (the host reference). Data movement uses random bytes.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/reference.h"
#include "exec/host/host_reduce.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {

// The collective kinds are the schedule layer's; hasInPlace and the host reference live in common/reference.h.
using Coll = sched::CollKind;
using test::hasInPlace;

struct CaseSpec {
  Coll coll = Coll::kAllGather;
  size_t count = 0;
  concclDataType_t dtype = concclFloat32;
  concclRedOp_t op = concclSum;
  int root = 0;
  bool inPlace = false;

  std::string describe(int n) const {
    std::ostringstream os;
    os << collKindName(coll) << " n=" << n << " count=" << count << " dtype=" << dtype << " op=" << op << " root=" << root
       << (inPlace ? " in-place" : " out-of-place");
    return os.str();
  }
};

class CollCase {
 public:
  // devices[r]: where rank r's buffers live (default: device 0 for every rank).
  CollCase(const CaseSpec& spec, int n, const std::vector<int>& devices = {})
      : spec_(spec), n_(n), es_(concclTypeSize(spec.dtype)) {
    const size_t c = spec.count;
    ranks_.resize(static_cast<size_t>(n));
    if (spec.coll == Coll::kAllToAllv) setupV();
    for (int r = 0; r < n; ++r) {
      Rank& k = ranks_[static_cast<size_t>(r)];
      const int dev = devices.empty() ? 0 : devices[static_cast<size_t>(r)];
      const bool root = r == spec.root;
      size_t sendElems = 0, recvElems = 0, sendAt = 0, recvAt = 0;  // in elements; *At: in-place offsets
      bool needSend = true, needRecv = true;
      switch (spec.coll) {
        case Coll::kAllGather:
          sendElems = c;
          recvElems = n * c;
          sendAt = r * c;
          break;
        case Coll::kReduceScatter:
          sendElems = n * c;
          recvElems = c;
          recvAt = r * c;
          break;
        case Coll::kAllReduce:
        case Coll::kBroadcast:
          sendElems = c;
          recvElems = c;
          break;
        case Coll::kReduce:
          sendElems = c;
          recvElems = c;
          needRecv = root;
          break;
        case Coll::kAllToAll:
          sendElems = n * c;
          recvElems = n * c;
          break;
        case Coll::kAllToAllv:
          sendElems = vSendTotal_[r];
          recvElems = vRecvTotal_[r];
          break;
        case Coll::kGather:
          sendElems = c;
          recvElems = n * c;
          needRecv = root;
          sendAt = root ? r * c : 0;
          break;
        case Coll::kScatter:
          sendElems = n * c;
          recvElems = c;
          needSend = root;
          recvAt = root ? r * c : 0;
          break;
        case Coll::kSendRecv:
          sendElems = c;
          recvElems = c;
          break;
      }
      k.sendBytes = sendElems * es_;
      k.recvBytes = recvElems * es_;
      k.inPlace = spec.inPlace && hasInPlace(spec.coll) && needSend && needRecv;
      if (k.inPlace) {
        // One allocation; the smaller buffer lives inside the larger one at the in-place offset.
        const size_t total = std::max(k.sendBytes, k.recvBytes);
        k.mem = DeviceMem(total, dev);
        k.send = k.mem.get() + sendAt * es_;
        k.recv = k.mem.get() + recvAt * es_;
      } else {
        if (needSend) {
          k.sendMem = DeviceMem(k.sendBytes, dev);
          k.send = k.sendMem.get();
        }
        if (needRecv) {
          k.mem = DeviceMem(k.recvBytes, dev);
          k.recv = k.mem.get();
        }
      }
      if (!needSend) k.sendBytes = 0;
      if (!needRecv) k.recvBytes = 0;
    }
  }

  // New inputs (and poison in the output buffers) on the device, and the expected outputs on the host.
  void prepare(uint64_t seed) {
    for (int r = 0; r < n_; ++r) {
      Rank& k = ranks_[static_cast<size_t>(r)];
      k.in.assign(k.sendBytes, 0);
      fillInputs(k.in, seed * 1000003ull + static_cast<uint64_t>(r));
      // Poison: what the output buffer holds before the call; expected = poison where nothing is written.
      const size_t bufBytes = k.inPlace ? k.mem.bytes() : k.recvBytes;
      std::vector<unsigned char> init(bufBytes);
      fillRandomBytes(init.data(), init.size(), seed * 7919ull + static_cast<uint64_t>(r) + 17);
      if (k.inPlace) {
        std::memcpy(init.data() + (k.send - k.mem.get()), k.in.data(), k.sendBytes);
        k.expected.assign(init.begin() + (k.recv - k.mem.get()), init.begin() + (k.recv - k.mem.get()) + k.recvBytes);
      } else {
        k.expected = init;
        if (k.sendBytes > 0) cudaMemcpy(k.send, k.in.data(), k.sendBytes, cudaMemcpyHostToDevice);
      }
      if (!init.empty()) cudaMemcpy(k.mem.get(), init.data(), init.size(), cudaMemcpyHostToDevice);
    }
    syncAllDevices();  // the uploads have landed before any rank's stream reads them
    computeExpected();
  }

  concclResult_t call(int r, concclComm_t comm, cudaStream_t stream) const {
    const Rank& k = ranks_[static_cast<size_t>(r)];
    const size_t c = spec_.count;
    const auto dt = spec_.dtype;
    switch (spec_.coll) {
      case Coll::kAllGather:
        return concclAllGather(k.send, k.recv, c, dt, comm, stream);
      case Coll::kReduceScatter:
        return concclReduceScatter(k.send, k.recv, c, dt, spec_.op, comm, stream);
      case Coll::kAllReduce:
        return concclAllReduce(k.send, k.recv, c, dt, spec_.op, comm, stream);
      case Coll::kBroadcast:
        return concclBroadcast(k.send, k.recv, c, dt, spec_.root, comm, stream);
      case Coll::kReduce:
        return concclReduce(k.send, k.recv, c, dt, spec_.op, spec_.root, comm, stream);
      case Coll::kAllToAll:
        return concclAllToAll(k.send, k.recv, c, dt, comm, stream);
      case Coll::kAllToAllv:
        return concclAllToAllv(k.send, vSend_[r].data(), vSdispl_[r].data(), k.recv, vRecv_[r].data(),
                               vRdispl_[r].data(), dt, comm, stream);
      case Coll::kGather:
        return concclGather(k.send, k.recv, c, dt, spec_.root, comm, stream);
      case Coll::kScatter:
        return concclScatter(k.send, k.recv, c, dt, spec_.root, comm, stream);
      case Coll::kSendRecv: {
        concclResult_t res = concclSend(k.send, c, dt, (r + 1) % n_, comm, stream);
        if (res != concclSuccess) return res;
        return concclRecv(k.recv, c, dt, (r + n_ - 1) % n_, comm, stream);
      }
    }
    return concclInternalError;
  }

  // Every rank's call from this thread inside one group.
  concclResult_t enqueueAll(const Clique& clique) const {
    concclResult_t first = concclGroupStart();
    for (int r = 0; r < n_ && first == concclSuccess; ++r) {
      first = call(r, clique.comms[static_cast<size_t>(r)], clique.streams[static_cast<size_t>(r)]);
    }
    concclResult_t end = concclGroupEnd();
    return first != concclSuccess ? first : end;
  }

  // Compares every rank's output (and, out of place, that its input is unchanged). Returns false on the first
  // rank with a mismatch, after recording a gtest failure that names the case.
  bool check(const std::string& context) const {
    for (int r = 0; r < n_; ++r) {
      const Rank& k = ranks_[static_cast<size_t>(r)];
      std::vector<unsigned char> got(k.recvBytes);
      if (k.recvBytes > 0) cudaMemcpy(got.data(), k.recv, k.recvBytes, cudaMemcpyDeviceToHost);
      if (got != k.expected) {
        size_t i = 0;
        while (i < got.size() && got[i] == k.expected[i]) ++i;
        ADD_FAILURE() << spec_.describe(n_) << " " << context << ": rank " << r << " output differs at byte " << i
                      << " of " << got.size() << " (element " << i / es_ << "): got " << int(got[i]) << " expected "
                      << int(k.expected[i]);
        return false;
      }
      if (!k.inPlace && k.sendBytes > 0) {
        std::vector<unsigned char> in(k.sendBytes);
        cudaMemcpy(in.data(), k.send, k.sendBytes, cudaMemcpyDeviceToHost);
        if (in != k.in) {
          ADD_FAILURE() << spec_.describe(n_) << " " << context << ": rank " << r << " sendbuff was modified";
          return false;
        }
      }
    }
    return true;
  }

  // Runs the case eagerly on `clique` and checks it; false on failure.
  bool runEager(Clique& clique, uint64_t seed) {
    if (verbose()) std::fprintf(stderr, "case: %s\n", spec_.describe(n_).c_str());
    prepare(seed);
    concclResult_t res = enqueueAll(clique);
    if (res != concclSuccess) {
      ADD_FAILURE() << spec_.describe(n_) << ": " << concclGetErrorString(res) << ": "
                    << concclGetLastError(clique.comms[0]);
      return false;
    }
    if (!clique.sync()) {
      ADD_FAILURE() << spec_.describe(n_) << ": did not complete";
      return false;
    }
    return check("eager");
  }

 private:
  struct Rank {
    DeviceMem mem;      // recvbuff (or the one in-place buffer)
    DeviceMem sendMem;  // out of place only
    char* send = nullptr;
    char* recv = nullptr;
    size_t sendBytes = 0, recvBytes = 0;
    bool inPlace = false;
    std::vector<unsigned char> in, expected;
  };

  void setupV() {
    // Uneven counts, zeros included, with one element of gap between blocks so misplaced writes show.
    const size_t c = spec_.count;
    auto cnt = [&](int from, int to) -> size_t { return c == 0 ? 0 : (c + 3 * from + 5 * to) % (c + 2); };
    vSend_.assign(n_, {}), vSdispl_.assign(n_, {}), vRecv_.assign(n_, {}), vRdispl_.assign(n_, {});
    vSendTotal_.assign(n_, 0), vRecvTotal_.assign(n_, 0);
    for (int r = 0; r < n_; ++r) {
      for (int p = 0; p < n_; ++p) {
        vSend_[r].push_back(cnt(r, p));
        vSdispl_[r].push_back(vSendTotal_[r]);
        vSendTotal_[r] += cnt(r, p) + 1;
        vRecv_[r].push_back(cnt(p, r));
        vRdispl_[r].push_back(vRecvTotal_[r]);
        vRecvTotal_[r] += cnt(p, r) + 1;
      }
    }
  }

  void fillInputs(std::vector<unsigned char>& bytes, uint64_t seed) const {
    if (!isReduction(spec_.coll)) {
      fillRandomBytes(bytes.data(), bytes.size(), seed);
      return;
    }
    std::vector<unsigned char> rnd(bytes.size() / es_ + 1);
    fillRandomBytes(rnd.data(), rnd.size(), seed);
    const bool prod = spec_.op == concclProd;
    for (size_t i = 0; i < bytes.size() / es_; ++i) {
      const int mag = prod ? 1 + (rnd[i] & 1) : 1 + (rnd[i] & 7);
      const bool neg = (rnd[i] & 0x10) != 0;
      storeSmallInt(bytes.data() + i * es_, mag, neg);
    }
  }

  void storeSmallInt(unsigned char* p, int mag, bool neg) const {
    const bool isUnsigned = spec_.dtype == concclUint8 || spec_.dtype == concclUint32 || spec_.dtype == concclUint64;
    const long long v = (neg && !isUnsigned) ? -mag : mag;
    auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (spec_.dtype) {
      case concclInt8:
        put(static_cast<int8_t>(v));
        break;
      case concclUint8:
        put(static_cast<uint8_t>(v));
        break;
      case concclInt32:
        put(static_cast<int32_t>(v));
        break;
      case concclUint32:
        put(static_cast<uint32_t>(v));
        break;
      case concclInt64:
        put(static_cast<int64_t>(v));
        break;
      case concclUint64:
        put(static_cast<uint64_t>(v));
        break;
      case concclFloat16:
        put(exec::floatToHalf(static_cast<float>(v)));
        break;
      case concclBfloat16:
        put(exec::floatToBf16(static_cast<float>(v)));
        break;
      case concclFloat32:
        put(static_cast<float>(v));
        break;
      case concclFloat64:
        put(static_cast<double>(v));
        break;
      default:
        ADD_FAILURE() << "no reductions for dtype " << spec_.dtype;
    }
  }

  // out (bytes) = op over ranks of in[p] + offset, count elements, in rank order.
  void reduceInto(unsigned char* out, size_t offsetBytes, size_t count) const {
    if (count == 0) return;
    std::vector<const void*> inputs;
    for (int p = 0; p < n_; ++p) inputs.push_back(ranks_[static_cast<size_t>(p)].in.data() + offsetBytes);
    exec::reduceHost(inputs, out, count, spec_.dtype, spec_.op);
  }

  void computeExpected() {
    const size_t c = spec_.count, cb = c * es_;
    const int root = spec_.root;
    auto in = [&](int p) { return ranks_[static_cast<size_t>(p)].in.data(); };
    for (int r = 0; r < n_; ++r) {
      Rank& k = ranks_[static_cast<size_t>(r)];
      unsigned char* out = k.expected.data();
      switch (spec_.coll) {
        case Coll::kAllGather:
          for (int p = 0; p < n_; ++p) std::memcpy(out + p * cb, in(p), cb);
          break;
        case Coll::kReduceScatter:
          reduceInto(out, r * cb, c);
          break;
        case Coll::kAllReduce:
          reduceInto(out, 0, c);
          break;
        case Coll::kBroadcast:
          std::memcpy(out, in(root), cb);
          break;
        case Coll::kReduce:
          if (r == root) reduceInto(out, 0, c);
          break;
        case Coll::kAllToAll:
          for (int p = 0; p < n_; ++p) std::memcpy(out + p * cb, in(p) + r * cb, cb);
          break;
        case Coll::kAllToAllv:
          for (int p = 0; p < n_; ++p) {
            std::memcpy(out + vRdispl_[r][p] * es_, in(p) + vSdispl_[p][r] * es_, vSend_[p][r] * es_);
          }
          break;
        case Coll::kGather:
          if (r == root) {
            for (int p = 0; p < n_; ++p) std::memcpy(out + p * cb, in(p), cb);
          }
          break;
        case Coll::kScatter:
          std::memcpy(out, in(root) + r * cb, cb);
          break;
        case Coll::kSendRecv:
          std::memcpy(out, in((r + n_ - 1) % n_), cb);
          break;
      }
    }
  }

  CaseSpec spec_;
  int n_;
  size_t es_;
  std::vector<Rank> ranks_;
  std::vector<std::vector<size_t>> vSend_, vSdispl_, vRecv_, vRdispl_;
  std::vector<size_t> vSendTotal_, vRecvTotal_;
};

}  // namespace conccl::gputest
