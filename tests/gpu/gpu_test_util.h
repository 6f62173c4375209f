// Shared helpers of the GPU tests: skipping without a device, owning device/pinned buffers, random data,
// bounded stream synchronisation, and a cache of communicators per rank count (all on device 0 repeated,
// so the tests run on a one-GPU machine; ranks on distinct GPUs are exercised where more exist).
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace conccl::gputest {

// When several ranks share one GPU, a rank's Wait blocks the hardware queue of its stream; with more streams
// than queues (CUDA_DEVICE_MAX_CONNECTIONS, default 8) a Wait can sit in front of the Signal it waits for.
// Ask for the maximum before CUDA initialises (the variable is read once, at context creation).
inline const bool kConnectionsSet = [] {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  return true;
}();

// CONCCL_TEST_VERBOSE=1 prints every case before it runs (stderr, unbuffered): locates a hang.
inline bool verbose() {
  static const bool v = std::getenv("CONCCL_TEST_VERBOSE") != nullptr;
  return v;
}

// What this machine has, as the GPU tests must see it. A test skips only when there is no GPU to test (no device,
// no driver, or devices hidden on purpose with CUDA_VISIBLE_DEVICES); when the operating system shows an NVIDIA GPU
// but CUDA reports an error, the test fails: a broken driver or runtime must not read as "skipped" (issue 13).
struct GpuStatus {
  int count = 0;
  bool error = false;    // a GPU is present but CUDA cannot use it: fail
  std::string message;   // why there is nothing to test, or the error
};

inline bool osShowsNvidiaGpu() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    // Devices hidden on purpose ("", "-1", "none"): nothing to test.
    if (visible[0] == '\0' || visible[0] == '-' || std::strcmp(visible, "none") == 0 ||
        std::strcmp(visible, "NoDevFiles") == 0) {
      return false;
    }
  }
  return access("/dev/nvidia0", F_OK) == 0 || access("/proc/driver/nvidia/gpus", F_OK) == 0;
}

inline const GpuStatus& gpuStatus() {
  (void)kConnectionsSet;  // odr-use: the setenv must run before the first CUDA call
  static const GpuStatus status = [] {
    GpuStatus st;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) {
      st.count = n;
      return st;
    }
    (void)cudaGetLastError();
    const bool present = osShowsNvidiaGpu();
    const std::string what = e == cudaSuccess ? std::string("CUDA sees no device")
                                              : std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
                                                    cudaGetErrorString(e) + ")";
    if (present) {
      st.error = true;
      st.message = what + ", but the operating system shows an NVIDIA GPU (/dev/nvidia0): failing, not skipping";
    } else {
      st.message = "no CUDA device (" + what + ")";
    }
    return st;
  }();
  return status;
}

inline int deviceCount() { return gpuStatus().count; }

// Every test starts with this: the GPU tests skip on machines without a GPU, and fail where a GPU is present but
// CUDA reports an error.
#define SKIP_WITHOUT_GPU()                                                                      \
  do {                                                                                          \
    const ::conccl::gputest::GpuStatus& st_ = ::conccl::gputest::gpuStatus();                  \
    if (st_.error) FAIL() << st_.message;                                                       \
    if (st_.count == 0) GTEST_SKIP() << st_.message;                                            \
  } while (0)

// Tests that need `n` GPUs skip only when fewer are present (and fail like SKIP_WITHOUT_GPU on a CUDA error).
#define SKIP_WITHOUT_GPUS(n)                                                                            \
  do {                                                                                                  \
    SKIP_WITHOUT_GPU();                                                                                 \
    if (::conccl::gputest::deviceCount() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs";            \
  } while (0)

// cudaMemcpy from pageable host memory may return before its DMA into device memory has completed (CUDA runtime
// docs, "API synchronization behavior"), and the non-blocking streams the tests launch collectives on are not
// ordered after it. Tests wait for every device after uploading inputs: without it Executor.GraphReplayOf...
// read the previous replay's input in 5-25 of 25 repeated runs on one H200 (2026-12-01).
inline void syncAllDevices() {
  int n = 0, current = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || cudaGetDevice(&current) != cudaSuccess) return;
  for (int d = 0; d < n; ++d) {
    cudaSetDevice(d);
    cudaDeviceSynchronize();
  }
  cudaSetDevice(current);
}

#define CUDA_OK(call)                                                                                     \
  do {                                                                                                    \
    cudaError_t e_ = (call);                                                                              \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorName(e_) << " " << cudaGetErrorString(e_); \
  } while (0)

#define CONCCL_OK(call)                                                                                               \
  do {                                                                                                                \
    concclResult_t r_ = (call);                                                                                       \
    ASSERT_EQ(r_, concclSuccess) << #call << ": " << concclGetErrorString(r_) << ": " << concclGetLastError(nullptr); \
  } while (0)

// cudaMalloc'ed memory (device 0 unless told), freed on scope exit.
class DeviceMem {
 public:
  DeviceMem() = default;
  explicit DeviceMem(size_t bytes, int device = 0) : bytes_(bytes) {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device);
    // Allocate at least 16 bytes so that count-0 calls still get a valid, distinct pointer.
    if (cudaMalloc(&ptr_, bytes < 16 ? 16 : bytes) != cudaSuccess) ptr_ = nullptr;
    cudaSetDevice(prev);
  }
  ~DeviceMem() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceMem(DeviceMem&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Fast deterministic random bytes (xorshift64*), never all zeros.
inline void fillRandomBytes(void* dst, size_t bytes, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  auto* p = static_cast<unsigned char*>(dst);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    uint64_t v = x * 0x2545F4914F6CDD1Dull;
    std::memcpy(p + i, &v, 8);
  }
  for (; i < bytes; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    p[i] = static_cast<unsigned char>((x * 0x2545F4914F6CDD1Dull) >> 56) | 1u;
  }
}

// Waits for `streams` with a bound: a hang becomes a test failure (and an abort of `comms`, which re-opens
// every flag so that the GPU drains), not a stuck test binary.
// The bound is CONCCL_TEST_SYNC_S seconds (default 20).
inline bool syncStreams(const std::vector<cudaStream_t>& streams, const std::vector<concclComm_t>& comms) {
  const char* env = std::getenv("CONCCL_TEST_SYNC_S");
  const std::chrono::seconds limit(env != nullptr ? std::atoi(env) : 20);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (cudaStream_t s : streams) {
    for (;;) {
      cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        ADD_FAILURE() << "stream error: " << cudaGetErrorName(e) << " " << cudaGetErrorString(e);
        return false;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "GPU work did not finish within " << limit.count() << " s (deadlock?)"
                      << (comms.empty() ? "" : "; aborting the comms");
        for (concclComm_t c : comms) concclCommAbort(c);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

// The two paths of a collective (docs/cuda-executor.md): the default config (the small-message kernel up to
// smallMessageBytes, copy engines above) and copy engines only (smallMessageBytes = 0). Every collective test runs
// both, at every count (issue 13).
// kDefault: the library's defaults (small calls on the 1-CTA kernel); kCopyEngines: copy engines at every size (a
// rank's own block a same-device copy); kNoSm: engine = copy (own blocks routed through a peer, no SM moves data).
enum class Path { kDefault, kCopyEngines, kNoSm };
inline const char* pathName(Path p) {
  return p == Path::kDefault ? "default" : p == Path::kCopyEngines ? "copy" : "nosm";
}
inline size_t smallBytesFor(Path p) { return p == Path::kDefault ? CONCCL_CONFIG_UNDEF_SIZE : 0; }
inline int engineFor(Path p) { return p == Path::kNoSm ? concclEngineCopy : CONCCL_CONFIG_UNDEF_INT; }

inline concclConfig_t cudaConfig(int lanes = CONCCL_CONFIG_UNDEF_INT, size_t smallMessageBytes = CONCCL_CONFIG_UNDEF_SIZE,
                                 int engine = CONCCL_CONFIG_UNDEF_INT) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendCuda;
  config.engine = engine;
  config.timeoutMs = 20000;  // a hang becomes a failure that names the case
  config.lanes = lanes;
  config.smallMessageBytes = smallMessageBytes;
  return config;
}

// n ranks on device 0 (repeated), each with its own non-blocking stream.
struct Clique {
  std::vector<concclComm_t> comms;
  std::vector<cudaStream_t> streams;
  bool broken = false;

  static std::unique_ptr<Clique> create(int n, int lanes = CONCCL_CONFIG_UNDEF_INT, std::vector<int> devices = {},
                                        size_t smallMessageBytes = CONCCL_CONFIG_UNDEF_SIZE,
                                        int engine = CONCCL_CONFIG_UNDEF_INT) {
    auto c = std::make_unique<Clique>();
    if (devices.empty()) devices.assign(static_cast<size_t>(n), 0);
    concclConfig_t config = cudaConfig(lanes, smallMessageBytes, engine);
    c->comms.resize(static_cast<size_t>(n));
    if (concclCommInitAll(c->comms.data(), n, devices.data(), &config) != concclSuccess) {
      ADD_FAILURE() << "concclCommInitAll(" << n << "): " << concclGetLastError(nullptr);
      return nullptr;
    }
    for (int r = 0; r < n; ++r) {
      cudaSetDevice(devices[static_cast<size_t>(r)]);
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      c->streams.push_back(s);
    }
    cudaSetDevice(0);
    return c;
  }
  int size() const { return static_cast<int>(comms.size()); }
  bool sync() {
    if (broken) return false;
    broken = !syncStreams(streams, comms);
    return !broken;
  }
  ~Clique() {
    for (concclComm_t comm : comms) {
      if (comm == nullptr) continue;
      if (broken) {
        concclCommAbort(comm);
      } else {
        concclCommDestroy(comm);
      }
    }
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
  }
};

inline std::map<std::pair<int, Path>, std::unique_ptr<Clique>>& cliqueCache() {
  static std::map<std::pair<int, Path>, std::unique_ptr<Clique>> cache;
  return cache;
}

// Destroys the cached cliques while CUDA is still up (static destructors run after the runtime's own).
class CliqueCacheCleaner : public ::testing::Environment {
 public:
  void TearDown() override { cliqueCache().clear(); }
};
inline ::testing::Environment* const kCliqueCacheCleaner = ::testing::AddGlobalTestEnvironment(new CliqueCacheCleaner);

// One clique per rank count for a whole test binary (creating flags and scratch per test would dominate).
inline Clique* sharedClique(int n, Path path = Path::kDefault) {
  auto& cache = cliqueCache();
  const auto key = std::make_pair(n, path);
  auto it = cache.find(key);
  if (it != cache.end() && it->second && !it->second->broken) return it->second.get();
  // Keep one clique alive at a time: fewer streams on the GPU, so the active clique's streams get hardware
  // queues of their own (see kConnectionsSet).
  cache.clear();
  cache[key] = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, {}, smallBytesFor(path), engineFor(path));
  return cache[key].get();
}

}  // namespace conccl::gputest
