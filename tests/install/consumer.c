/* Links against an installed conccl and runs a two-rank broadcast on the host backend. */
#include <conccl/conccl.h>
#include <stdio.h>

int main(void) {
  concclComm_t comms[2];
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  int version = 0;
  if (concclGetVersion(&version) != concclSuccess || version != CONCCL_VERSION_CODE) return 1;
  if (concclCommInitAll(comms, 2, NULL, &config) != concclSuccess) {
    fprintf(stderr, "init: %s\n", concclGetLastError(NULL));
    return 1;
  }
  double a[3] = {1.5, 2.5, 3.5}, b[3] = {0, 0, 0};
  concclGroupStart();
  concclBroadcast(a, a, 3, concclFloat64, 0, comms[0], NULL);
  concclBroadcast(NULL, b, 3, concclFloat64, 0, comms[1], NULL);
  if (concclGroupEnd() != concclSuccess) {
    fprintf(stderr, "broadcast: %s\n", concclGetLastError(NULL));
    return 1;
  }
  concclCommDestroy(comms[0]);
  concclCommDestroy(comms[1]);
  int ok = b[0] == 1.5 && b[1] == 2.5 && b[2] == 3.5;
  printf("installed conccl %d: broadcast %s\n", version, ok ? "correct" : "WRONG");
  return ok ? 0 : 1;
}
