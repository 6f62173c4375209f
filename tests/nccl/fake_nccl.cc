// A fake "real NCCL" for the shim's CPU tests: exports a few nccl* functions with NCCL 2.28's C ABI (plain
// types here, so it builds without nccl.h) that record their arguments; the tests read the record through
// fakeNcclRecord(). Loaded with dlopen (CONCCL_NCCL_REAL_LIB or RealNccl's candidate list).
#include <cstddef>
#include <cstring>
#include <mutex>

#include "nccl/fake_nccl.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// NCCL's own communicator starts with this magic (src/include/comm.h, startMagic): never the shim's.
struct FakeComm {
  unsigned long long startMagic = 0x0280028002800280ull;
  int nranks = 0;
  int rank = 0;
};

struct UniqueId {
  char internal[128];
};

}  // namespace

static FakeNcclRecord gRecord;
static FakeComm gComms[8];  // one per init (the last one reused beyond 8)

static void note(const char* name) {
  std::strncpy(gRecord.lastCall, name, sizeof(gRecord.lastCall) - 1);
  gRecord.calls++;
}

FAKE_EXPORT FakeNcclRecord* fakeNcclRecord() { return &gRecord; }

FAKE_EXPORT int ncclGetVersion(int* version) {
  note("ncclGetVersion");
  *version = 99999;
  return 0;
}

FAKE_EXPORT int ncclGetUniqueId(UniqueId* id) {
  note("ncclGetUniqueId");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memset(id->internal, 0xAB, 16);
  static unsigned char made = 0;
  id->internal[16] = static_cast<char>(++made);
  return 0;
}

static std::mutex gInitMutex;  // ranks of one communicator may init on threads of one process

FAKE_EXPORT int ncclCommInitRankConfig(FakeComm** comm, int nranks, UniqueId id, int rank, void* config) {
  std::lock_guard<std::mutex> lock(gInitMutex);
  note("ncclCommInitRankConfig");
  gRecord.nranks = nranks;
  gRecord.rank = rank;
  gRecord.idByte0 = static_cast<unsigned char>(id.internal[0]);
  gRecord.idByte127 = static_cast<unsigned char>(id.internal[127]);
  gRecord.configPassed = config != nullptr;
  if (gRecord.inits < 8) {
    gRecord.initNranks[gRecord.inits] = nranks;
    gRecord.initRank[gRecord.inits] = rank;
    gRecord.initIdByte16[gRecord.inits] = static_cast<unsigned char>(id.internal[16]);
  }
  FakeComm& made = gComms[gRecord.inits < 8 ? gRecord.inits : 7];
  gRecord.inits++;
  made.nranks = nranks;
  made.rank = rank;
  *comm = &made;
  return 0;
}

FAKE_EXPORT int ncclCommInitRank(FakeComm** comm, int nranks, UniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

FAKE_EXPORT int ncclCommCount(FakeComm* comm, int* count) {
  note("ncclCommCount");
  *count = comm->nranks;
  return 0;
}

FAKE_EXPORT int ncclCommUserRank(FakeComm* comm, int* rank) {
  note("ncclCommUserRank");
  *rank = comm->rank;
  return 0;
}

FAKE_EXPORT int ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op, void* comm,
                              void* stream) {
  note("ncclAllReduce");
  gRecord.sendbuff = sendbuff;
  gRecord.recvbuff = recvbuff;
  gRecord.count = count;
  gRecord.datatype = datatype;
  gRecord.op = op;
  gRecord.comm = comm;
  gRecord.stream = stream;
  return 0;
}

FAKE_EXPORT int ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, int datatype, int root, void* comm,
                              void* stream) {
  note("ncclBroadcast");
  gRecord.sendbuff = sendbuff;
  gRecord.recvbuff = recvbuff;
  gRecord.count = count;
  gRecord.datatype = datatype;
  gRecord.root = root;
  gRecord.comm = comm;
  gRecord.stream = stream;
  return 0;
}

FAKE_EXPORT int ncclRedOpCreatePreMulSum(int* op, void* /*scalar*/, int datatype, int /*residence*/, void* comm) {
  note("ncclRedOpCreatePreMulSum");
  gRecord.datatype = datatype;
  gRecord.comm = comm;
  *op = 5;
  return 0;
}

FAKE_EXPORT int ncclGroupStart() {
  note("ncclGroupStart");
  gRecord.groupStarts++;
  return 0;
}

FAKE_EXPORT int ncclGroupEnd() {
  note("ncclGroupEnd");
  gRecord.groupEnds++;
  return 0;
}

// ncclSimInfo_t of NCCL 2.28: size, magic, version, estimatedTime. The fake "estimates" 42.5 (a value the shim
// cannot invent) when the magic is NCCL's, and fails like NCCL otherwise.
struct FakeSimInfo {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
};

FAKE_EXPORT int ncclGroupSimulateEnd(FakeSimInfo* simInfo) {
  note("ncclGroupSimulateEnd");
  gRecord.groupSimulateEnds++;
  if (simInfo == nullptr) return 0;
  if (simInfo->magic != 0x74685283) return 4;  // ncclInvalidArgument
  simInfo->estimatedTime = 42.5f;
  return 0;
}

FAKE_EXPORT int ncclCommDestroy(void* comm) {
  note("ncclCommDestroy");
  gRecord.comm = comm;
  gRecord.destroys++;
  return 0;
}

FAKE_EXPORT int ncclCommAbort(void* comm) {
  note("ncclCommAbort");
  gRecord.comm = comm;
  gRecord.aborts++;
  return 0;
}

FAKE_EXPORT int ncclCommGetAsyncError(void* /*comm*/, int* asyncError) {
  *asyncError = 0;
  return 0;
}

FAKE_EXPORT int ncclSend(const void* sendbuff, size_t count, int datatype, int peer, void* comm, void* /*stream*/) {
  note("ncclSend");
  gRecord.sendbuff = sendbuff;
  gRecord.count = count;
  gRecord.datatype = datatype;
  gRecord.peer = peer;
  gRecord.comm = comm;
  gRecord.sends++;
  return 0;
}

FAKE_EXPORT int ncclRecv(void* recvbuff, size_t count, int datatype, int peer, void* comm, void* /*stream*/) {
  note("ncclRecv");
  gRecord.recvbuff = recvbuff;
  gRecord.count = count;
  gRecord.datatype = datatype;
  gRecord.peer = peer;
  gRecord.comm = comm;
  gRecord.recvs++;
  return 0;
}

FAKE_EXPORT const char* ncclGetLastError(void* /*comm*/) { return "fake NCCL's last error"; }
