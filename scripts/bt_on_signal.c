// Diagnostic only (never shipped): LD_PRELOAD this; SIGUSR2 sent to a thread prints that thread's native backtrace.
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <sys/syscall.h>
static void handler(int sig) {
  (void)sig;
  void* frames[64];
  int n = backtrace(frames, 64);
  char head[64];
  int len = snprintf(head, sizeof head, "=== native backtrace of tid %ld\n", (long)syscall(SYS_gettid));
  write(2, head, (size_t)len);
  backtrace_symbols_fd(frames, n, 2);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
}
