// conccl with one process per GPU, launched torchrun-style: every process reads RANK, WORLD_SIZE, LOCAL_RANK and
// the communicator's unique id from its environment, creates its rank with concclCommInitRank, and all-reduces a
// device buffer in place on a CUDA stream. The buffer is a symmetric window (concclMemAlloc, then the collective
// concclCommWindowRegister), so the all-reduce returns without waiting for the other processes to call it.
//
//   build/examples/multiprocess_allreduce [nprocs=2]
//
// Without RANK in the environment the program is its own launcher: it makes the unique id (concclGetUniqueId),
// hex-encodes it into CONCCL_UNIQUE_ID and starts itself nprocs times with RANK, WORLD_SIZE and LOCAL_RANK set,
// then waits for them (killing them after 120 s) and fails if any of them failed. Rank r uses GPU
// LOCAL_RANK % deviceCount, so more processes than GPUs share GPUs (correct, but slower).
// See docs/multiprocess.md.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr int kMaxProcs = 64;
constexpr auto kLauncherDeadline = std::chrono::seconds(120);
constexpr size_t kCount = size_t{1} << 22;  // floats per rank (16 MiB)

// ------------------------------------------------------------------------------------------------------------
// Checks: print what failed and why, and make the caller return 1.

#define CHECK_CONCCL(call, comm)                                                                                 \
  do {                                                                                                           \
    const concclResult_t r_ = (call);                                                                            \
    if (r_ != concclSuccess) {                                                                                   \
      std::fprintf(stderr, "%s: %s failed: %s\n  %s\n", who().c_str(), #call, concclGetErrorString(r_),          \
                   concclGetLastError(comm));                                                                    \
      return 1;                                                                                                  \
    }                                                                                                            \
  } while (0)

#define CHECK_CUDA(call)                                                                                          \
  do {                                                                                                            \
    const cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess) {                                                                                      \
      std::fprintf(stderr, "%s: %s failed: %s (%s)\n", who().c_str(), #call, cudaGetErrorName(e_),                \
                   cudaGetErrorString(e_));                                                                       \
      return 1;                                                                                                   \
    }                                                                                                             \
  } while (0)

int gRank = -1;  // -1 in the launcher
std::string who() { return gRank < 0 ? std::string("launcher") : "rank " + std::to_string(gRank); }

// ------------------------------------------------------------------------------------------------------------
// The unique id as text: 256 lowercase hex digits.

std::string hexEncode(const concclUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(id.internal));
  for (char c : id.internal) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool hexDecode(const char* text, concclUniqueId* id) {
  if (std::strlen(text) != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    const int hi = hexDigit(text[2 * i]), lo = hexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    id->internal[i] = static_cast<char>((hi << 4) | lo);
  }
  return true;
}

// A whole decimal integer in [lo, hi], else false.
bool parseInt(const char* text, int lo, int hi, int* value) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *value = static_cast<int>(v);
  return true;
}

// ------------------------------------------------------------------------------------------------------------
// Worker: one rank.

int runWorker() {
  int rank = -1, nranks = 0, localRank = -1;
  if (!parseInt(std::getenv("RANK"), 0, kMaxProcs - 1, &rank) ||
      !parseInt(std::getenv("WORLD_SIZE"), 1, kMaxProcs, &nranks) || rank >= nranks) {
    std::fprintf(stderr, "worker: RANK and WORLD_SIZE must be integers with 0 <= RANK < WORLD_SIZE <= %d\n", kMaxProcs);
    return 1;
  }
  gRank = rank;
  const char* local = std::getenv("LOCAL_RANK");
  if (local == nullptr) {
    localRank = rank;  // one node: the global rank is the local rank
  } else if (!parseInt(local, 0, kMaxProcs - 1, &localRank)) {
    std::fprintf(stderr, "rank %d: LOCAL_RANK=%s is not a rank\n", rank, local);
    return 1;
  }
  const char* idText = std::getenv("CONCCL_UNIQUE_ID");
  concclUniqueId id;
  if (idText == nullptr || !hexDecode(idText, &id)) {
    std::fprintf(stderr, "rank %d: CONCCL_UNIQUE_ID must hold %zu hex digits (the id from concclGetUniqueId)\n", rank,
                 2 * sizeof(id.internal));
    return 1;
  }

  int deviceCount = 0;
  CHECK_CUDA(cudaGetDeviceCount(&deviceCount));
  if (deviceCount == 0) {
    std::fprintf(stderr, "rank %d: no CUDA device\n", rank);
    return 1;
  }
  CHECK_CUDA(cudaSetDevice(localRank % deviceCount));  // before InitRank: the rank uses the current device

  // Freed on every return, after the communicator (declared first, so destroyed last).
  struct FreeOnExit {
    float* p = nullptr;
    cudaStream_t s = nullptr;
    ~FreeOnExit() {
      if (s != nullptr) cudaStreamDestroy(s);
      if (p != nullptr) concclMemFree(p);
    }
  } resources;

  // Blocks until all WORLD_SIZE ranks have called it (bounded by CONCCL_TIMEOUT_MS, default 300 s).
  concclComm_t comm = nullptr;
  CHECK_CONCCL(concclCommInitRank(&comm, nranks, id, rank), nullptr);
  // An early return below aborts the communicator: the peers' waiting calls then fail at once instead of timing out.
  struct AbortOnError {
    concclComm_t* comm;
    ~AbortOnError() {
      if (*comm != nullptr) concclCommAbort(*comm);
    }
  } abortGuard{&comm};

  // Rank r contributes r + 1 + i % 7 at element i, so every rank must end with
  // sum over r of (r + 1 + i % 7) = n (n + 1) / 2 + n (i % 7): small integers, exact in float.
  std::vector<float> host(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 7);

  void* raw = nullptr;
  CHECK_CONCCL(concclMemAlloc(&raw, kCount * sizeof(float)), nullptr);
  resources.p = static_cast<float*>(raw);
  CHECK_CUDA(cudaStreamCreateWithFlags(&resources.s, cudaStreamNonBlocking));
  float* buf = resources.p;
  cudaStream_t stream = resources.s;
  // Collective, like InitRank: every rank registers its buffer (same size), and the peers map it once here.
  concclWindow_t window = nullptr;
  CHECK_CONCCL(concclCommWindowRegister(comm, buf, kCount * sizeof(float), &window), comm);
  CHECK_CUDA(cudaMemcpyAsync(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, stream));
  // Enqueued behind the upload. The buffer is at the same offset of the window on every rank (a symmetric call):
  // the call returns at once, without waiting for the other processes or for the GPU. Their arguments are
  // checked when they arrive (a mismatch is reported by the next call or concclCommGetAsyncError).
  CHECK_CONCCL(concclAllReduce(buf, buf, kCount, concclFloat32, concclSum, comm, stream), comm);
  CHECK_CUDA(cudaMemcpyAsync(host.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  concclResult_t async = concclSuccess;
  CHECK_CONCCL(concclCommGetAsyncError(comm, &async), comm);
  CHECK_CONCCL(async, comm);
  // Collective too; after it returns the memory may be freed (FreeOnExit does, after the communicator).
  CHECK_CONCCL(concclCommWindowDeregister(comm, window), comm);

  size_t wrong = 0, firstWrong = 0;
  for (size_t i = 0; i < kCount; ++i) {
    const float expected = static_cast<float>(nranks * (nranks + 1) / 2) + static_cast<float>(nranks) *
                                                                                static_cast<float>(i % 7);
    if (host[i] != expected) {
      if (wrong++ == 0) firstWrong = i;
    }
  }

  const concclComm_t done = comm;
  comm = nullptr;  // destroyed below, whatever the result: not aborted by the guard
  CHECK_CONCCL(concclCommDestroy(done), nullptr);
  if (wrong != 0) {
    std::fprintf(stderr, "rank %d/%d: allreduce of %zu floats WRONG: %zu elements differ, first at %zu (%g)\n", rank,
                 nranks, kCount, wrong, firstWrong, static_cast<double>(host[firstWrong]));
    return 1;
  }
  std::printf("rank %d/%d: allreduce of %zu floats OK\n", rank, nranks, kCount);
  return 0;
}

// ------------------------------------------------------------------------------------------------------------
// Launcher: the id, nprocs children, a bounded wait.

int runLauncher(const char* argv0, int nprocs) {
  concclUniqueId id;
  CHECK_CONCCL(concclGetUniqueId(&id), nullptr);
  const std::string idHex = hexEncode(id);

  // The children inherit this environment minus the launcher's variables, plus their own.
  std::vector<std::string> base;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" || name == "CONCCL_UNIQUE_ID") continue;
    base.push_back(entry);
  }
  base.push_back("WORLD_SIZE=" + std::to_string(nprocs));
  base.push_back("CONCCL_UNIQUE_ID=" + idHex);
  // Let the library report a missing or hung peer (concclTimeout) well before the launcher kills everyone.
  if (std::getenv("CONCCL_TIMEOUT_MS") == nullptr) base.push_back("CONCCL_TIMEOUT_MS=60000");

  const std::string nprocsText = std::to_string(nprocs);
  std::vector<pid_t> pids;
  bool spawnFailed = false;
  for (int r = 0; r < nprocs; ++r) {
    std::vector<std::string> env = base;
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = argv0;
    std::string arg1 = nprocsText;
    char* args[] = {arg0.data(), arg1.data(), nullptr};
    pid_t pid = 0;
    // /proc/self/exe: this very program, wherever it was started from.
    const int err = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args, envp.data());
    if (err != 0) {
      std::fprintf(stderr, "launcher: posix_spawn of rank %d failed: %s\n", r, std::strerror(err));
      spawnFailed = true;  // the ranks already started time out waiting for this one (or are killed below)
      break;
    }
    pids.push_back(pid);
  }

  // Wait for every child, at most kLauncherDeadline; then kill the ones still running.
  std::vector<int> status(pids.size(), -1);
  std::vector<bool> reaped(pids.size(), false);
  size_t left = pids.size();
  const auto deadline = std::chrono::steady_clock::now() + (spawnFailed ? std::chrono::seconds(0) : kLauncherDeadline);
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (reaped[r]) continue;
      int st = 0;
      const pid_t got = waitpid(pids[r], &st, WNOHANG);
      if (got == pids[r] || (got < 0 && errno != EINTR)) {
        reaped[r] = true;
        status[r] = got == pids[r] ? st : -1;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool ok = !spawnFailed;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (!reaped[r]) {
      std::fprintf(stderr, "launcher: rank %zu (pid %d) still running after %lld s: killed\n", r,
                   static_cast<int>(pids[r]), static_cast<long long>(kLauncherDeadline.count()));
      kill(pids[r], SIGKILL);
      int st = 0;
      while (waitpid(pids[r], &st, 0) < 0 && errno == EINTR) {
      }
      ok = false;
      continue;
    }
    const int st = status[r];
    if (st == -1) {
      std::fprintf(stderr, "launcher: could not wait for rank %zu\n", r);
      ok = false;
    } else if (WIFSIGNALED(st)) {
      std::fprintf(stderr, "launcher: rank %zu killed by signal %d\n", r, WTERMSIG(st));
      ok = false;
    } else if (WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "launcher: rank %zu exited with status %d\n", r, WEXITSTATUS(st));
      ok = false;
    }
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RANK") != nullptr) return runWorker();

  int nprocs = 2;
  if (argc > 2 || (argc == 2 && !parseInt(argv[1], 1, kMaxProcs, &nprocs))) {
    std::fprintf(stderr, "usage: %s [nprocs=2]   (1 <= nprocs <= %d; RANK unset: launches nprocs workers)\n",
                 argv[0], kMaxProcs);
    return 2;
  }
  return runLauncher(argv[0], nprocs);
}
