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
};
