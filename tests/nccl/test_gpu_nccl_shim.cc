// The shim's own device paths on a GPU, driven through NCCL's API as an application would (the shim dlopen'ed, no
// conccl call made by the test): PreMulSum on device memory (the pre-multiply kernel, host and device scalars,
// fp32 / bf16 / fp16, bit-exact for two ranks against NCCL's definition sum_r round(s * x_r) with conccl's one
// rounding of the sum), PreMulSum captured in CUDA graphs and replayed, and ncclCommSplit of CUDA communicators made
// by ncclCommInitAll and by ncclCommInitRank from threads (the path PyTorch's processes take). Ranks share GPU 0 when
// there is one GPU. Label "gpu": skips without a GPU, fails when a GPU is present but CUDA errors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kRanks = 2;

// Several ranks on one GPU need more hardware queues than CUDA's default 8 (conccl.h); set before CUDA starts.
const bool kEnvSet = [] {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  setenv("CONCCL_TIMEOUT_MS", "60000", 0);  // a hang becomes a failure within a minute
  return true;
}();

int gpuCount(std::string* why) {
  (void)kEnvSet;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  return access("/dev/nvidia0", F_OK) == 0 ? -1 : 0;  // -1: a GPU is there but CUDA fails (issue 13: fail)
}

#define SKIP_WITHOUT_GPU()                    \
  do {                                        \
    std::string why_;                         \
    int n_ = gpuCount(&why_);                 \
    if (n_ < 0) FAIL() << why_;               \
    if (n_ == 0) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_);              \
  } while (0)

// The shim: $CONCCL_NCCL_SHIM_PATH, else ../lib/libconccl_nccl.so beside this executable (gpu-stage/ layout), else
// the build tree's.
void* shimHandle() {
  static void* h = [] {
    std::vector<std::string> paths;
    if (const char* p = std::getenv("CONCCL_NCCL_SHIM_PATH")) paths.push_back(p);
    char exe[4096] = {0};
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
      std::string dir(exe, static_cast<size_t>(len));
      dir = dir.substr(0, dir.rfind('/'));
      paths.push_back(dir + "/../lib/libconccl_nccl.so");
    }
    paths.push_back(CONCCL_NCCL_SHIM_PATH);
    for (const auto& p : paths) {
      if (access(p.c_str(), R_OK) != 0) continue;
      if (void* handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    }
    return static_cast<void*>(nullptr);
  }();
  return h;
}
#define SHIM(name) reinterpret_cast<decltype(&::name)>(dlsym(shimHandle(), #name))

int deviceOf(int rank) {
  int n = 1;
  cudaGetDeviceCount(&n);
  return rank % n;
}

// Host values of the three float types, and NCCL's definition of one PreMulSum element for two ranks.
template <class T>
T fromFloat(float f);
template <>
float fromFloat<float>(float f) { return f; }
template <>
__half fromFloat<__half>(float f) { return __float2half_rn(f); }
template <>
__nv_bfloat16 fromFloat<__nv_bfloat16>(float f) { return __float2bfloat16_rn(f); }
float toFloat(float v) { return v; }
float toFloat(__half v) { return __half2float(v); }
float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
ncclDataType_t ncclTypeOf();
template <>
ncclDataType_t ncclTypeOf<float>() { return ncclFloat32; }
template <>
ncclDataType_t ncclTypeOf<__half>() { return ncclFloat16; }
template <>
ncclDataType_t ncclTypeOf<__nv_bfloat16>() { return ncclBfloat16; }

// round(s * x) per rank (the product of two fp16/bf16 values is exact in fp32, so this is __hmul's result), then
// conccl's sum: fp32 accumulation rounded once to T (for two ranks the order cannot matter).
template <class T>
T expectedPreMulSum(T x0, T x1, T s) {
  T p0 = fromFloat<T>(toFloat(x0) * toFloat(s));
  T p1 = fromFloat<T>(toFloat(x1) * toFloat(s));
  return fromFloat<T>(toFloat(p0) + toFloat(p1));
}

template <class T>
std::vector<T> randomValues(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = fromFloat<T>(dist(gen));
  return v;
}

template <class T>
bool sameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

struct Ranks {
  ncclComm_t comms[kRanks] = {};
  cudaStream_t streams[kRanks] = {};
  ~Ranks() {
    for (int r = 0; r < kRanks; ++r) {
      if (comms[r] != nullptr) SHIM(ncclCommDestroy)(comms[r]);
      if (streams[r] != nullptr) cudaStreamDestroy(streams[r]);
    }
  }
};

template <class T>
void preMulSumCase(bool deviceScalar, bool capture) {
  ASSERT_NE(shimHandle(), nullptr) << dlerror();
  Ranks ranks;
  int devs[kRanks];
  for (int r = 0; r < kRanks; ++r) devs[r] = deviceOf(r);
  ASSERT_EQ(SHIM(ncclCommInitAll)(ranks.comms, kRanks, devs), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  const size_t n = 100002;  // odd half for the reduce-scatter: 50001 per rank
  const T scalar = fromFloat<T>(1.0f / 3.0f);
  std::vector<T*> x(kRanks), out(kRanks), rs(kRanks), dscalar(kRanks, nullptr);
  std::vector<ncclRedOp_t> ops(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaStreamCreateWithFlags(&ranks.streams[r], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&x[r], n * sizeof(T)));
    CUDA_OK(cudaMalloc(&out[r], n * sizeof(T)));
    CUDA_OK(cudaMalloc(&rs[r], n / kRanks * sizeof(T)));
    if (deviceScalar) {
      // A wrong value at creation: a device scalar must be read when the collective runs, not before.
      const T wrong = fromFloat<T>(7.0f);
      CUDA_OK(cudaMalloc(&dscalar[r], sizeof(T)));
      CUDA_OK(cudaMemcpy(dscalar[r], &wrong, sizeof(T), cudaMemcpyHostToDevice));
      ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&ops[r], dscalar[r], ncclTypeOf<T>(), ncclScalarDevice, ranks.comms[r]),
                ncclSuccess);
    } else {
      T s = scalar;
      ASSERT_EQ(SHIM(ncclRedOpCreatePreMulSum)(&ops[r], &s, ncclTypeOf<T>(), ncclScalarHostImmediate, ranks.comms[r]),
                ncclSuccess);
      s = fromFloat<T>(100.0f);  // read at creation: must not matter
    }
  }
  auto enqueue = [&]() -> ncclResult_t {
    ncclResult_t res = SHIM(ncclGroupStart)();
    for (int r = 0; r < kRanks && res == ncclSuccess; ++r) {
      res = SHIM(ncclAllReduce)(x[r], out[r], n, ncclTypeOf<T>(), ops[r], ranks.comms[r], ranks.streams[r]);
      if (res == ncclSuccess) {
        res = SHIM(ncclReduceScatter)(x[r], rs[r], n / kRanks, ncclTypeOf<T>(), ops[r], ranks.comms[r],
                                      ranks.streams[r]);
      }
    }
    ncclResult_t end = SHIM(ncclGroupEnd)();
    return res != ncclSuccess ? res : end;
  };
  std::vector<cudaGraphExec_t> execs(kRanks, nullptr);
  if (capture) {
    std::vector<cudaGraph_t> graphs(kRanks, nullptr);
    for (int r = 0; r < kRanks; ++r) {
      CUDA_OK(cudaSetDevice(devs[r]));
      // Global mode, PyTorch's default (torch.cuda.graph): any unsafe CUDA call the shim makes meanwhile (an event
      // query, a device allocation outside relaxed mode) invalidates the capture.
      CUDA_OK(cudaStreamBeginCapture(ranks.streams[r], cudaStreamCaptureModeGlobal));
    }
    ncclResult_t res = enqueue();
    for (int r = 0; r < kRanks; ++r) {
      CUDA_OK(cudaSetDevice(devs[r]));
      CUDA_OK(cudaStreamEndCapture(ranks.streams[r], &graphs[r]));
    }
    ASSERT_EQ(res, ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
    for (int r = 0; r < kRanks; ++r) {
      CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
      cudaGraphDestroy(graphs[r]);
    }
  }
  // The ops may be destroyed once the calls are enqueued (PyTorch does so at once); the graph keeps working.
  if (capture) {
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(SHIM(ncclRedOpDestroy)(ops[r], ranks.comms[r]), ncclSuccess);
  }
  const int rounds = capture ? 4 : 2;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<T>> hx(kRanks);
    for (int r = 0; r < kRanks; ++r) {
      hx[r] = randomValues<T>(n, static_cast<unsigned>(100 * round + r + 1));
      CUDA_OK(cudaSetDevice(devs[r]));
      CUDA_OK(cudaMemcpy(x[r], hx[r].data(), n * sizeof(T), cudaMemcpyHostToDevice));
      // A pageable upload may still be in flight when cudaMemcpy returns; the collectives run on other streams.
      CUDA_OK(cudaDeviceSynchronize());
      if (deviceScalar) {
        CUDA_OK(cudaMemcpyAsync(dscalar[r], &scalar, sizeof(T), cudaMemcpyHostToDevice, ranks.streams[r]));
      }
    }
    if (capture) {
      for (int r = 0; r < kRanks; ++r) CUDA_OK(cudaGraphLaunch(execs[r], ranks.streams[r]));
    } else {
      ASSERT_EQ(enqueue(), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
    }
    for (int r = 0; r < kRanks; ++r) {
      CUDA_OK(cudaSetDevice(devs[r]));
      CUDA_OK(cudaStreamSynchronize(ranks.streams[r]));
    }
    for (int r = 0; r < kRanks; ++r) {
      std::vector<T> got(n), gotRs(n / kRanks);
      CUDA_OK(cudaMemcpy(got.data(), out[r], n * sizeof(T), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(gotRs.data(), rs[r], n / kRanks * sizeof(T), cudaMemcpyDeviceToHost));
      size_t bad = 0, first = n;
      for (size_t i = 0; i < n; ++i) {
        if (!sameBits(got[i], expectedPreMulSum(hx[0][i], hx[1][i], scalar))) {
          ++bad;
          if (first == n) first = i;
        }
      }
      EXPECT_EQ(bad, 0u) << "all-reduce rank " << r << " round " << round << ": first at " << first << " got "
                         << (first < n ? toFloat(got[first]) : 0.0f) << " want "
                         << (first < n ? toFloat(expectedPreMulSum(hx[0][first], hx[1][first], scalar)) : 0.0f);
      bad = 0;
      for (size_t i = 0; i < n / kRanks; ++i) {
        const size_t j = static_cast<size_t>(r) * (n / kRanks) + i;
        if (!sameBits(gotRs[i], expectedPreMulSum(hx[0][j], hx[1][j], scalar))) ++bad;
      }
      EXPECT_EQ(bad, 0u) << "reduce-scatter rank " << r << " round " << round;
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    if (execs[r] != nullptr) cudaGraphExecDestroy(execs[r]);
    if (!capture) {
      EXPECT_EQ(SHIM(ncclRedOpDestroy)(ops[r], ranks.comms[r]), ncclSuccess);
    }
    cudaFree(x[r]);
    cudaFree(out[r]);
    cudaFree(rs[r]);
    if (dscalar[r] != nullptr) cudaFree(dscalar[r]);
  }
}

TEST(NcclShimGpu, PreMulSumFloat32HostScalar) {
  SKIP_WITHOUT_GPU();
  preMulSumCase<float>(false, false);
}
TEST(NcclShimGpu, PreMulSumBfloat16DeviceScalarReadWhenTheCollectiveRuns) {
  SKIP_WITHOUT_GPU();
  preMulSumCase<__nv_bfloat16>(true, false);
}
TEST(NcclShimGpu, PreMulSumFloat16HostScalar) {
  SKIP_WITHOUT_GPU();
  preMulSumCase<__half>(false, false);
}
TEST(NcclShimGpu, PreMulSumCapturedInGraphsReplaysWithNewData) {
  SKIP_WITHOUT_GPU();
  preMulSumCase<float>(false, true);
}
TEST(NcclShimGpu, PreMulSumDeviceScalarCapturedInGraphs) {
  SKIP_WITHOUT_GPU();
  preMulSumCase<__nv_bfloat16>(true, true);
}

// ---- The drop-in's PreMulSum against the real NCCL's, on the same data ----
//
// The real NCCL: $CONCCL_NCCL_REAL_LIB (what scripts/gpu.sh sets for this test), else libnccl.so.2 on the library
// path; never the shim itself (it may sit on the path under that name). Loaded RTLD_LOCAL beside the shim.
void* realNcclHandle(std::string* why) {
  static std::string error;
  static void* h = [] {
    const char* env = std::getenv("CONCCL_NCCL_REAL_LIB");
    const char* path = env != nullptr ? env : "libnccl.so.2";
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      error = std::string("no real NCCL (") + path + "): " + dlerror();
      return static_cast<void*>(nullptr);
    }
    if (shimHandle() != nullptr && dlsym(handle, "ncclGetVersion") == dlsym(shimHandle(), "ncclGetVersion")) {
      error = std::string(path) + " is the shim itself";
      return static_cast<void*>(nullptr);
    }
    return handle;
  }();
  *why = error;
  return h;
}
#define REAL(name) reinterpret_cast<decltype(&::name)>(dlsym(realNcclHandle(&why_), #name))

// Inputs that exercise the rounding: normal values of every magnitude the type has, subnormals and their products
// (fp16 / bf16 products that land in the subnormal range, and ones that overflow), both signs, zeros.
template <class T>
std::vector<T> roundingInputs(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  if constexpr (sizeof(T) == 2) {
    std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
    for (auto& x : v) {
      uint16_t b = static_cast<uint16_t>(bits(gen));
      // No NaN or infinity inputs: NaN payloads are not part of NCCL's contract, and inf + -inf would make one.
      const bool special = std::is_same_v<T, __half> ? (b & 0x7c00) == 0x7c00 : (b & 0x7f80) == 0x7f80;
      if (special) b &= 0x8000;
      std::memcpy(static_cast<void*>(&x), &b, 2);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> mant(-2.0, 2.0);
    std::uniform_int_distribution<int> ex(std::numeric_limits<T>::min_exponent - 20,
                                          std::numeric_limits<T>::max_exponent - 2);
    for (auto& x : v) x = static_cast<T>(std::ldexp(mant(gen), ex(gen)));
  } else if constexpr (std::is_unsigned_v<T>) {
    std::uniform_int_distribution<uint64_t> d(0, std::numeric_limits<T>::max());
    for (auto& x : v) x = static_cast<T>(d(gen));
  } else {
    std::uniform_int_distribution<int64_t> d(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    for (auto& x : v) x = static_cast<T>(d(gen));
  }
  return v;
}

template <class T>
ncclDataType_t ncclTypeOfAny() {
  if constexpr (std::is_same_v<T, __half>) return ncclFloat16;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return ncclBfloat16;
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  if constexpr (std::is_same_v<T, int8_t>) return ncclInt8;
  if constexpr (std::is_same_v<T, uint8_t>) return ncclUint8;
  if constexpr (std::is_same_v<T, int32_t>) return ncclInt32;
  if constexpr (std::is_same_v<T, int64_t>) return ncclInt64;
  return ncclUint64;
}

// One library's PreMulSum all-reduce of `inputs` (one vector per rank) with `scalars` (the scalar's bytes as the
// caller passes them; for a device scalar they are uploaded and written again after the op was made), ranks on
// devices 0..nranks-1, one thread driving them in a group. Returns the outputs of every rank.
struct Lib {
  decltype(&::ncclCommInitAll) initAll;
  decltype(&::ncclCommDestroy) destroy;
  decltype(&::ncclRedOpCreatePreMulSum) create;
  decltype(&::ncclRedOpDestroy) destroyOp;
  decltype(&::ncclAllReduce) allReduce;
  decltype(&::ncclGroupStart) groupStart;
  decltype(&::ncclGroupEnd) groupEnd;
  decltype(&::ncclGetLastError) lastError;
};

Lib libOf(void* h) {
  auto f = [h](const char* n) { return dlsym(h, n); };
  return Lib{reinterpret_cast<decltype(&::ncclCommInitAll)>(f("ncclCommInitAll")),
             reinterpret_cast<decltype(&::ncclCommDestroy)>(f("ncclCommDestroy")),
             reinterpret_cast<decltype(&::ncclRedOpCreatePreMulSum)>(f("ncclRedOpCreatePreMulSum")),
             reinterpret_cast<decltype(&::ncclRedOpDestroy)>(f("ncclRedOpDestroy")),
             reinterpret_cast<decltype(&::ncclAllReduce)>(f("ncclAllReduce")),
             reinterpret_cast<decltype(&::ncclGroupStart)>(f("ncclGroupStart")),
             reinterpret_cast<decltype(&::ncclGroupEnd)>(f("ncclGroupEnd")),
             reinterpret_cast<decltype(&::ncclGetLastError)>(f("ncclGetLastError"))};
}

template <class T>
void runPreMulAllReduce(const Lib& lib, int nranks, ncclDataType_t type, const std::vector<std::vector<T>>& inputs,
                        const std::vector<uint8_t>& scalarBytes, bool deviceScalar, std::vector<std::vector<T>>* out) {
  const size_t n = inputs[0].size();
  std::vector<ncclComm_t> comms(static_cast<size_t>(nranks), nullptr);
  std::vector<int> devs(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) devs[static_cast<size_t>(r)] = r;
  ASSERT_EQ(lib.initAll(comms.data(), nranks, devs.data()), ncclSuccess) << lib.lastError(nullptr);
  std::vector<T*> x(static_cast<size_t>(nranks)), y(static_cast<size_t>(nranks));
  std::vector<void*> dscalar(static_cast<size_t>(nranks), nullptr);
  std::vector<cudaStream_t> streams(static_cast<size_t>(nranks));
  std::vector<ncclRedOp_t> ops(static_cast<size_t>(nranks));
  std::vector<uint8_t> scalarCopy = scalarBytes;
  scalarCopy.resize(8, 0);
  for (int r = 0; r < nranks; ++r) {
    const auto i = static_cast<size_t>(r);
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&x[i], n * sizeof(T)));
    CUDA_OK(cudaMalloc(&y[i], n * sizeof(T)));
    CUDA_OK(cudaMemcpy(x[i], inputs[i].data(), n * sizeof(T), cudaMemcpyHostToDevice));
    if (deviceScalar) {
      CUDA_OK(cudaMalloc(&dscalar[i], 8));
      CUDA_OK(cudaMemset(dscalar[i], 0x55, 8));  // wrong at creation: it must be read when the collective runs
      ASSERT_EQ(lib.create(&ops[i], dscalar[i], type, ncclScalarDevice, comms[i]), ncclSuccess);
      CUDA_OK(cudaMemcpy(dscalar[i], scalarCopy.data(), 8, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint8_t> s = scalarCopy;
      ASSERT_EQ(lib.create(&ops[i], s.data(), type, ncclScalarHostImmediate, comms[i]), ncclSuccess);
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(lib.groupStart(), ncclSuccess);
  for (int r = 0; r < nranks; ++r) {
    const auto i = static_cast<size_t>(r);
    ASSERT_EQ(lib.allReduce(x[i], y[i], n, type, ops[i], comms[i], streams[i]), ncclSuccess) << lib.lastError(comms[i]);
  }
  ASSERT_EQ(lib.groupEnd(), ncclSuccess) << lib.lastError(nullptr);
  out->assign(static_cast<size_t>(nranks), std::vector<T>(n));
  for (int r = 0; r < nranks; ++r) {
    const auto i = static_cast<size_t>(r);
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamSynchronize(streams[i]));
    CUDA_OK(cudaMemcpy((*out)[i].data(), y[i], n * sizeof(T), cudaMemcpyDeviceToHost));
    EXPECT_EQ(lib.destroyOp(ops[i], comms[i]), ncclSuccess);
    EXPECT_EQ(lib.destroy(comms[i]), ncclSuccess);
    cudaFree(x[i]);
    cudaFree(y[i]);
    if (dscalar[i] != nullptr) cudaFree(dscalar[i]);
    cudaStreamDestroy(streams[i]);
  }
}

// The drop-in and the real NCCL on the same inputs and scalar bytes; every element's bits must agree. With one rank
// NCCL's all-reduce is its pre-multiply alone (onerank.cu), so this compares the multiplication (and the scalar's
// reading) for every type. scalarBytes is what the caller passes, read as NCCL reads it.
template <class T>
void compareWithRealNccl(int nranks, const std::vector<uint8_t>& scalarBytes, bool deviceScalar) {
  std::string why_;
  ASSERT_NE(shimHandle(), nullptr) << dlerror();
  if (realNcclHandle(&why_) == nullptr) GTEST_SKIP() << why_;
  int gpus = 0;
  CUDA_OK(cudaGetDeviceCount(&gpus));
  if (gpus < nranks) GTEST_SKIP() << nranks << " ranks need " << nranks << " GPUs (NCCL refuses two ranks on one GPU)";
  const size_t n = 300007;
  std::vector<std::vector<T>> inputs;
  for (int r = 0; r < nranks; ++r) inputs.push_back(roundingInputs<T>(n, 1000u + static_cast<unsigned>(r)));
  std::vector<std::vector<T>> mine, theirs;
  runPreMulAllReduce<T>(libOf(shimHandle()), nranks, ncclTypeOfAny<T>(), inputs, scalarBytes, deviceScalar, &mine);
  if (::testing::Test::HasFatalFailure()) return;
  runPreMulAllReduce<T>(libOf(realNcclHandle(&why_)), nranks, ncclTypeOfAny<T>(), inputs, scalarBytes, deviceScalar,
                        &theirs);
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < nranks; ++r) {
    const auto i = static_cast<size_t>(r);
    size_t bad = 0, first = n;
    for (size_t k = 0; k < n; ++k) {
      if (std::memcmp(&mine[i][k], &theirs[i][k], sizeof(T)) != 0) {
        if (first == n) first = k;
        ++bad;
      }
    }
    uint64_t a = 0, b = 0, in = 0;
    if (first < n) {
      std::memcpy(&a, &mine[i][first], sizeof(T));
      std::memcpy(&b, &theirs[i][first], sizeof(T));
      std::memcpy(&in, &inputs[0][first], sizeof(T));
    }
    EXPECT_EQ(bad, 0u) << "rank " << r << ": first difference at " << first << ": input 0x" << std::hex << in
                       << ", drop-in 0x" << a << ", NCCL 0x" << b;
  }
}

template <class T>
std::vector<uint8_t> bytesOf(T v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

TEST(NcclShimGpuVsNccl, PreMulSumOneRankEveryTypeHostScalar) {
  SKIP_WITHOUT_GPU();
  compareWithRealNccl<__nv_bfloat16>(1, bytesOf(__float2bfloat16_rn(1.0f / 3.0f)), false);
  compareWithRealNccl<__half>(1, bytesOf(__float2half_rn(1.0f / 3.0f)), false);
  compareWithRealNccl<float>(1, bytesOf(1.0f / 3.0f), false);
  compareWithRealNccl<double>(1, bytesOf(1.0 / 3.0), false);
  compareWithRealNccl<int8_t>(1, bytesOf(int8_t{-3}), false);
  compareWithRealNccl<uint8_t>(1, bytesOf(uint8_t{7}), false);
  compareWithRealNccl<int32_t>(1, bytesOf(int32_t{-123457}), false);
  compareWithRealNccl<int64_t>(1, bytesOf(int64_t{0x123456789}), false);
  compareWithRealNccl<uint64_t>(1, bytesOf(uint64_t{0xfedcba987}), false);
}

// Scalars whose products overflow and underflow (fp16 / bf16 subnormal results), device-resident.
TEST(NcclShimGpuVsNccl, PreMulSumOneRankHalfAndBfloat16DeviceScalarExtremes) {
  SKIP_WITHOUT_GPU();
  for (float s : {1.0f / 3.0f, 1e-3f, 3e-5f, 1000.0f, -0.7f}) {
    compareWithRealNccl<__half>(1, bytesOf(__float2half_rn(s)), true);
    compareWithRealNccl<__nv_bfloat16>(1, bytesOf(__float2bfloat16_rn(s)), true);
  }
  compareWithRealNccl<__nv_bfloat16>(1, bytesOf(__float2bfloat16_rn(1e-30f)), true);
  compareWithRealNccl<float>(1, bytesOf(-1e-30f), true);
}

// What PyTorch passes for bf16 (ProcessGroupNCCL's unpackPreMulSum<float, ncclBfloat16>): a float's four bytes,
// of which NCCL reads two. The drop-in must multiply by the same bf16 (the float's low bytes), not by the float.
TEST(NcclShimGpuVsNccl, PreMulSumBfloat16ScalarGivenAsFloatReadsTwoBytesLikeNccl) {
  SKIP_WITHOUT_GPU();
  compareWithRealNccl<__nv_bfloat16>(1, bytesOf(1.0f / 3.0f), false);
  compareWithRealNccl<__nv_bfloat16>(1, bytesOf(0.125f), false);
}

// Two ranks (two GPUs): the whole collective. For fp16 / bf16 with two ranks both libraries' sums are the correctly
// rounded sum of the two products (NCCL adds in the type, conccl in fp32 and rounds once; for two addends these
// agree), so the results must be bit-identical. fp32 is not compared: NCCL's compiled kernels may fuse one rank's
// multiplication with the addition (fma, nvcc's default contraction), depending on its algorithm and chunking.
TEST(NcclShimGpuVsNccl, PreMulSumTwoRanksHalfAndBfloat16) {
  SKIP_WITHOUT_GPU();
  compareWithRealNccl<__nv_bfloat16>(2, bytesOf(__float2bfloat16_rn(1.0f / 3.0f)), false);
  compareWithRealNccl<__half>(2, bytesOf(__float2half_rn(0.1f)), true);
}

// Split, one thread per parent rank (as NCCL requires for a blocking split): colors/keys per rank, then an
// all-reduce (sum, fp32) on each child, checked on the host. initRank: parents made by ncclCommInitRank from threads
// (conccl's process communicators, PyTorch's path) instead of ncclCommInitAll.
void splitCase(bool initRank, const int colors[kRanks], const int keys[kRanks], const int wantRank[kRanks],
               const int wantSize[kRanks]) {
  ASSERT_NE(shimHandle(), nullptr) << dlerror();
  ncclComm_t parents[kRanks] = {};
  int devs[kRanks];
  for (int r = 0; r < kRanks; ++r) devs[r] = deviceOf(r);
  ncclUniqueId id;
  if (initRank) {
    ASSERT_EQ(SHIM(ncclGetUniqueId)(&id), ncclSuccess);
  } else {
    ASSERT_EQ(SHIM(ncclCommInitAll)(parents, kRanks, devs), ncclSuccess) << SHIM(ncclGetLastError)(nullptr);
  }
  const size_t n = 65536;
  std::string errors[kRanks];
  int ranks[kRanks] = {-1, -1}, sizes[kRanks] = {0, 0};
  bool isNull[kRanks] = {false, false};
  std::vector<float> results[kRanks];
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(devs[r]);
      if (initRank && SHIM(ncclCommInitRank)(&parents[r], kRanks, id, r) != ncclSuccess) {
        errors[r] = std::string("init: ") + SHIM(ncclGetLastError)(nullptr);
        return;
      }
      ncclComm_t child = nullptr;
      if (SHIM(ncclCommSplit)(parents[r], colors[r], keys[r], &child, nullptr) != ncclSuccess) {
        errors[r] = std::string("split: ") + SHIM(ncclGetLastError)(parents[r]);
        return;
      }
      isNull[r] = child == nullptr;
      if (child == nullptr) return;
      SHIM(ncclCommUserRank)(child, &ranks[r]);
      SHIM(ncclCommCount)(child, &sizes[r]);
      std::vector<float> h(n, static_cast<float>(r + 1));
      float* buf = nullptr;
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      cudaMalloc(&buf, n * sizeof(float));
      // Stream-ordered upload, no device-wide synchronisation: the other rank's thread may already have launched
      // its all-reduce (a staged call launches without waiting for its peer), which waits on the GPU for this rank;
      // a cudaDeviceSynchronize here would wait for it in turn (NCCL's rule: no device synchronisation while a
      // collective of the same device is in flight).
      cudaMemcpyAsync(buf, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream);
      if (SHIM(ncclAllReduce)(buf, buf, n, ncclFloat32, ncclSum, child, stream) != ncclSuccess) {
        errors[r] = std::string("all-reduce: ") + SHIM(ncclGetLastError)(child);
      } else if (cudaStreamSynchronize(stream) != cudaSuccess) {
        errors[r] = "cudaStreamSynchronize failed";
      } else {
        results[r].resize(n);
        cudaMemcpy(results[r].data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost);
      }
      cudaFree(buf);
      cudaStreamDestroy(stream);
      if (SHIM(ncclCommDestroy)(child) != ncclSuccess) errors[r] += " child destroy failed";
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(isNull[r], wantSize[r] == 0) << r;
    if (wantSize[r] == 0) continue;
    EXPECT_EQ(ranks[r], wantRank[r]) << r;
    EXPECT_EQ(sizes[r], wantSize[r]) << r;
    float want = 0;
    for (int p = 0; p < kRanks; ++p) {
      if (colors[p] == colors[r]) want += static_cast<float>(p + 1);
    }
    ASSERT_EQ(results[r].size(), n) << r;
    EXPECT_EQ(results[r][0], want) << r;
    EXPECT_EQ(results[r][n - 1], want) << r;
  }
  for (int r = 0; r < kRanks; ++r) {
    if (parents[r] != nullptr) {
      EXPECT_EQ(SHIM(ncclCommDestroy)(parents[r]), ncclSuccess);
    }
  }
}

TEST(NcclShimGpu, SplitOfInitAllCommunicatorReversedByKey) {
  SKIP_WITHOUT_GPU();
  const int colors[kRanks] = {3, 3}, keys[kRanks] = {1, 0}, wantRank[kRanks] = {1, 0}, wantSize[kRanks] = {2, 2};
  splitCase(false, colors, keys, wantRank, wantSize);
}
TEST(NcclShimGpu, SplitOfInitRankCommunicatorFromThreads) {
  SKIP_WITHOUT_GPU();
  const int colors[kRanks] = {0, 0}, keys[kRanks] = {0, 0}, wantRank[kRanks] = {0, 1}, wantSize[kRanks] = {2, 2};
  splitCase(true, colors, keys, wantRank, wantSize);
}
TEST(NcclShimGpu, SplitWithNoColorGivesNull) {
  SKIP_WITHOUT_GPU();
  const int colors[kRanks] = {0, NCCL_SPLIT_NOCOLOR}, keys[kRanks] = {0, 0}, wantRank[kRanks] = {0, -1},
            wantSize[kRanks] = {1, 0};
  splitCase(true, colors, keys, wantRank, wantSize);
}

}  // namespace
