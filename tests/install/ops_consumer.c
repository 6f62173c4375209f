/* Links against an installed libconccl_ops (the fused ops' C interface: a plain C header) and checks that an
 * argument error comes back as a result code with its message. Needs no GPU. */
#include <conccl/ops/conccl_ops.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (concclOpsReleaseComm(NULL) != concclInvalidArgument || strstr(concclOpsGetLastError(), "comm is NULL") == NULL) {
    fprintf(stderr, "unexpected: %s\n", concclOpsGetLastError());
    return 1;
  }
  printf("installed conccl_ops: NULL comm refused (%s)\n", concclOpsGetLastError());
  return 0;
}
