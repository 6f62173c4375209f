// The record the fake libnccl (fake_nccl.cc, loaded by the shim as its "real" NCCL in the tests) keeps of the
// calls it received; test_nccl_shim_forward.cc reads it through the fake's exported accessor.
#pragma once

#include <cstddef>

struct FakeNcclRecord {
  char lastCall[64];
  int calls;
  int groupStarts;
  int groupEnds;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  int datatype;
  int op;
  int root;
  void* comm;
  void* stream;
  int nranks;
  int rank;
  unsigned char idByte0;
  unsigned char idByte127;
  int configPassed;
  int groupSimulateEnds;
  // Every ncclCommInitRankConfig in order (the hierarchical path makes a flat and a rail communicator), the id's byte
  // 16 (a counter the fake's ncclGetUniqueId writes, so that tests tell the ids apart), and the destroys.
  int inits;
  int initNranks[8];
  int initRank[8];
  unsigned char initIdByte16[8];
  int destroys;
  // The C API across hosts (tests/nccl/test_api_cross_node.cc): aborts, sends and receives, and the peer of the last.
  int aborts;
  int sends;
  int recvs;
  int peer;
};
