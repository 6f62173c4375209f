// conccl on any machine: four ranks on the host backend (threads + memcpy), all-reduce and all-gather driven from
// one thread with a group. The same calls with backend = concclBackendCuda and device pointers run on GPUs.
//
//   build/examples/host_allreduce
#include <conccl/conccl.h>

#include <cstdio>
#include <vector>

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    concclResult_t r_ = (call);                                                                          \
    if (r_ != concclSuccess) {                                                                           \
      std::fprintf(stderr, "%s failed: %s\n  %s\n", #call, concclGetErrorString(r_), concclGetLastError(nullptr)); \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)

int main() {
  const int nranks = 4;
  const size_t count = 1 << 20;

  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  std::vector<concclComm_t> comms(nranks);
  CHECK(concclCommInitAll(comms.data(), nranks, nullptr, &config));

  // Rank r contributes r + 1 everywhere, so every element of the sum is 1 + 2 + 3 + 4 = 10.
  std::vector<std::vector<float>> send(nranks), recv(nranks, std::vector<float>(count));
  for (int r = 0; r < nranks; ++r) send[r].assign(count, static_cast<float>(r + 1));

  CHECK(concclGroupStart());
  for (int r = 0; r < nranks; ++r) {
    CHECK(concclAllReduce(send[r].data(), recv[r].data(), count, concclFloat32, concclSum, comms[r], nullptr));
  }
  CHECK(concclGroupEnd());

  // All-gather one float per rank: every rank ends with {1, 2, 3, 4}.
  std::vector<std::vector<float>> gathered(nranks, std::vector<float>(nranks));
  CHECK(concclGroupStart());
  for (int r = 0; r < nranks; ++r) {
    CHECK(concclAllGather(send[r].data(), gathered[r].data(), 1, concclFloat32, comms[r], nullptr));
  }
  CHECK(concclGroupEnd());

  bool ok = true;
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < count; ++i) ok = ok && recv[r][i] == 10.0f;
    for (int p = 0; p < nranks; ++p) ok = ok && gathered[r][p] == static_cast<float>(p + 1);
  }
  for (auto comm : comms) CHECK(concclCommDestroy(comm));
  std::printf("all-reduce of %zu floats over %d host ranks: %s\n", count, nranks, ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
