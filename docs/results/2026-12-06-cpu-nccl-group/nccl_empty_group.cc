// The real NCCL's empty ncclGroupStart + ncclGroupEnd pair, timed on the CPU (no GPU, no communicator): what the
// drop-in adds to every group by calling them around it. Build: g++ -O2 nccl_empty_group.cc -o ng -ldl
#include <dlfcn.h>
#include <chrono>
#include <cstdio>
typedef int (*fn_t)();
int main() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW);
  if (!h) { std::printf("no nccl: %s\n", dlerror()); return 1; }
  auto gs = (fn_t)dlsym(h, "ncclGroupStart");
  auto ge = (fn_t)dlsym(h, "ncclGroupEnd");
  for (int i = 0; i < 1000; ++i) { gs(); ge(); }
  const int n = 200000;
  auto t0 = std::chrono::steady_clock::now();
  int bad = 0;
  for (int i = 0; i < n; ++i) { bad += gs() != 0; bad += ge() != 0; }
  auto t1 = std::chrono::steady_clock::now();
  std::printf("start+end: %.3f us per pair, %d errors\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n, bad);
}
