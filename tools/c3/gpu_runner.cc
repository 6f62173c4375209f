// Measuring half of conccl-c3: cuBLASLt GEMMs, NCCL / conccl / SM-copy collectives, CUDA events.
//
// Every measurement starts all streams together: a one-thread gate kernel on each device spins on a
// host-mapped flag, the start event is recorded behind it, every GEMM and collective stream waits for that
// event, and the host raises the flag only after everything is enqueued. So launch costs and host-side
// skew are not part of T_g, T_c or T_c3, and "from the common start" (FACTS.md) holds across devices up to
// the few microseconds the gates need to see the flag.
#include "gpu_runner.h"

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "c3/planner.h"
#include "core/error.h"
#include "kernels.h"

#ifdef CONCCL_HAVE_NCCL
#include <nccl.h>
#endif

namespace conccl::c3 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------------
// Errors: every failing call becomes a conccl::Error naming the call and file:line.
void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    throw Error(concclUnhandledCudaError,
                std::string(call) + ": " + cudaGetErrorString(e) + detail::formatLocation(file, line));
  }
}
void check(CUresult e, const char* call, const char* file, int line) {
  if (e != CUDA_SUCCESS) {
    throw Error(concclUnhandledCudaError,
                std::string(call) + ": CUresult " + std::to_string(int(e)) + detail::formatLocation(file, line));
  }
}
void check(cublasStatus_t e, const char* call, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    throw Error(concclUnhandledCudaError,
                std::string(call) + ": cuBLAS status " + std::to_string(int(e)) + detail::formatLocation(file, line));
  }
}
void check(concclResult_t e, const char* call, const char* file, int line) {
  if (e != concclSuccess) {
    throw Error(e, std::string(call) + ": " + concclGetErrorString(e) + ": " + concclGetLastError(nullptr) +
                       detail::formatLocation(file, line));
  }
}
#ifdef CONCCL_HAVE_NCCL
void check(ncclResult_t e, const char* call, const char* file, int line) {
  if (e != ncclSuccess) {
    throw Error(concclSystemError, std::string(call) + ": " + ncclGetErrorString(e) + ": " + ncclGetLastError(nullptr) +
                                       detail::formatLocation(file, line));
  }
}
#endif
#define C3_CHECK(call) ::conccl::c3::check((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------------
// RAII for the CUDA objects the tool creates.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    C3_CHECK(cudaGetDevice(&previous_));
    C3_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(int device, size_t bytes, bool ncclAlloc = false) : device_(device), ncclAlloc_(ncclAlloc) {
    DeviceGuard guard(device);
    bytes = std::max<size_t>(bytes, 256);
#ifdef CONCCL_HAVE_NCCL
    // NCCL's copy-engine collectives need symmetric-window buffers, which must come from ncclMemAlloc (VMM).
    if (ncclAlloc) {
      C3_CHECK(ncclMemAlloc(&ptr_, bytes));
      return;
    }
#endif
    C3_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(device_, o.device_);
      std::swap(ptr_, o.ptr_);
      std::swap(ncclAlloc_, o.ncclAlloc_);
    }
    return *this;
  }
  void* get() const { return ptr_; }

 private:
  void reset() {
    if (ptr_ == nullptr) return;
    cudaSetDevice(device_);
#ifdef CONCCL_HAVE_NCCL
    if (ncclAlloc_) {
      ncclMemFree(ptr_);
      ptr_ = nullptr;
      return;
    }
#endif
    cudaFree(ptr_);
    ptr_ = nullptr;
  }
  int device_ = -1;
  void* ptr_ = nullptr;
  bool ncclAlloc_ = false;
};

class Stream {
 public:
  Stream(int device, int priority) {
    DeviceGuard guard(device);
    C3_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  explicit Event(int device) {
    DeviceGuard guard(device);
    C3_CHECK(cudaEventCreate(&event_));
  }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

double elapsed(const Event& from, const Event& to) {
  float ms = 0;
  C3_CHECK(cudaEventElapsedTime(&ms, from.get(), to.get()));
  return double(ms) * 1e-3;
}

double median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Driver API entry points through the runtime (cudaGetDriverEntryPointByVersion) rather than linking
// libcuda.so, so that the tool starts, and says that it needs a GPU, on machines without a driver. Asked for
// with the ABI of the toolkit we compile against: green-context functions came in several releases (12.4,
// 12.5 for cuGreenCtxStreamCreate), and an older ABI version makes the newer ones "not found".
template <typename Fn>
Fn* driver(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  C3_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, CUDART_VERSION, cudaEnableDefault, &status));
  CONCCL_REQUIRE(fn != nullptr && status == cudaDriverEntryPointSuccess,
                 std::string("the CUDA driver has no ") + symbol + " (green contexts need a CUDA 12.5+ driver)");
  return reinterpret_cast<Fn*>(fn);
}
// decltype only: naming the function's address would make the linker want libcuda.so again.
#define C3_DRIVER(name) driver<decltype(name)>(#name)

// A green context holding `sms` SMs of `device` (rounded as the driver requires: multiples of 8 on
// compute capability 9.0, FACTS.md) and a stream in it.
class GreenContext {
 public:
  GreenContext(int device, int sms) {
    DeviceGuard guard(device);    // initialises the runtime and the device's primary context
    const CUdevice dev = device;  // a CUdevice is the device ordinal
    CUdevResource all;
    C3_CHECK(C3_DRIVER(cuDeviceGetDevResource)(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    CUdevResource part;
    CUdevResource rest;
    unsigned groups = 1;
    C3_CHECK(C3_DRIVER(cuDevSmResourceSplitByCount)(&part, &groups, &all, &rest, 0, unsigned(sms)));
    sms_ = int(part.sm.smCount);
    CUdevResourceDesc desc;
    C3_CHECK(C3_DRIVER(cuDevResourceGenerateDesc)(&desc, &part, 1));
    destroy_ = C3_DRIVER(cuGreenCtxDestroy);  // looked up now: the destructor must not throw
    C3_CHECK(C3_DRIVER(cuGreenCtxCreate)(&ctx_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    C3_CHECK(C3_DRIVER(cuGreenCtxStreamCreate)(&stream_, ctx_, CU_STREAM_NON_BLOCKING, 0));
  }
  ~GreenContext() {
    if (stream_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream_));
    if (ctx_) destroy_(ctx_);
  }
  GreenContext(const GreenContext&) = delete;
  GreenContext& operator=(const GreenContext&) = delete;
  cudaStream_t stream() const { return reinterpret_cast<cudaStream_t>(stream_); }
  int sms() const { return sms_; }

 private:
  decltype(cuGreenCtxDestroy)* destroy_ = nullptr;
  CUgreenCtx ctx_ = nullptr;
  CUstream stream_ = nullptr;
  int sms_ = 0;
};

// ---------------------------------------------------------------------------------------------------
// A cuBLASLt GEMM D[M,N] = A[M,K] B[K,N] with random inputs, optionally limited to `smTarget` SMs
// (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET). Layout "TN" (A stored K x M and transposed), because that is the
// layout cuBLASLt's fp8 kernels require; bf16/fp16 use it too so that the dtypes are comparable.
class Gemm {
 public:
  Gemm(int device, const GemmShape& shape, int smTarget) : device_(device) {
    DeviceGuard guard(device);
    const size_t in = dtypeSize(shape.dtype);
    a_ = DeviceMemory(device, size_t(shape.m) * size_t(shape.k) * in);
    b_ = DeviceMemory(device, size_t(shape.k) * size_t(shape.n) * in);
    d_ = DeviceMemory(device, size_t(shape.m) * size_t(shape.n) * gemmOutputSize(shape.dtype));
    workspace_ = DeviceMemory(device, kWorkspace);
    C3_CHECK(launchFillRandom(a_.get(), size_t(shape.m) * size_t(shape.k), kind(shape.dtype), 1, nullptr));
    C3_CHECK(launchFillRandom(b_.get(), size_t(shape.k) * size_t(shape.n), kind(shape.dtype), 2, nullptr));
    C3_CHECK(cudaDeviceSynchronize());

    const cudaDataType_t inType = cudaType(shape.dtype);
    const cudaDataType_t outType = shape.dtype == Dtype::kFp8E4M3 ? CUDA_R_16BF : inType;
    const cublasComputeType_t compute = shape.dtype == Dtype::kFp32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    C3_CHECK(cublasLtCreate(&handle_));
    C3_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    const cublasOperation_t transA = CUBLAS_OP_T;
    const cublasOperation_t transB = CUBLAS_OP_N;
    C3_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof(transA)));
    C3_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof(transB)));
    if (smTarget > 0) {
      const int32_t target = smTarget;
      C3_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
    }
    C3_CHECK(cublasLtMatrixLayoutCreate(&aLayout_, inType, uint64_t(shape.k), uint64_t(shape.m), shape.k));
    C3_CHECK(cublasLtMatrixLayoutCreate(&bLayout_, inType, uint64_t(shape.k), uint64_t(shape.n), shape.k));
    C3_CHECK(cublasLtMatrixLayoutCreate(&dLayout_, outType, uint64_t(shape.m), uint64_t(shape.n), shape.m));
    cublasLtMatmulPreference_t pref;
    C3_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspace;
    C3_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, aLayout_, bLayout_, dLayout_, dLayout_,
                                                             pref, 1, &heuristic_, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    C3_CHECK(st);
    CONCCL_REQUIRE(found > 0,
                   std::string("cuBLASLt has no kernel for this GEMM (") + dtypeName(shape.dtype) + " on this GPU?)");
  }
  ~Gemm() {
    if (dLayout_) cublasLtMatrixLayoutDestroy(dLayout_);
    if (bLayout_) cublasLtMatrixLayoutDestroy(bLayout_);
    if (aLayout_) cublasLtMatrixLayoutDestroy(aLayout_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
    if (handle_) cublasLtDestroy(handle_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  int device() const { return device_; }
  void enqueue(cudaStream_t stream) const {
    const float alpha = 1.0f;
    const float beta = 0.0f;
    C3_CHECK(cublasLtMatmul(handle_, desc_, &alpha, a_.get(), aLayout_, b_.get(), bLayout_, &beta, d_.get(), dLayout_,
                            d_.get(), dLayout_, &heuristic_.algo, workspace_.get(), kWorkspace, stream));
  }

  static int kind(Dtype d) { return d == Dtype::kBf16 ? 0 : d == Dtype::kFp16 ? 1 : d == Dtype::kFp8E4M3 ? 2 : 3; }
  static cudaDataType_t cudaType(Dtype d) {
    switch (d) {
      case Dtype::kBf16:
        return CUDA_R_16BF;
      case Dtype::kFp16:
        return CUDA_R_16F;
      case Dtype::kFp8E4M3:
        return CUDA_R_8F_E4M3;
      case Dtype::kFp32:
        return CUDA_R_32F;
    }
    return CUDA_R_16BF;
  }

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  int device_;
  DeviceMemory a_, b_, d_, workspace_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t aLayout_ = nullptr, bLayout_ = nullptr, dLayout_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

// ---------------------------------------------------------------------------------------------------
// Collectives: one call over all ranks, each rank on its own stream.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual void enqueue(const std::vector<cudaStream_t>& rankStreams) = 0;
};

// Per-rank buffer sizes of a collective sized the nccl-tests way.
std::pair<size_t, size_t> bufferBytes(const CollectiveSpec& c) {
  const size_t part = size_t(c.callCount()) * dtypeSize(c.dtype);
  const size_t whole = part * size_t(c.ranks);
  switch (c.kind) {
    case CollKind::kAllGather:
      return {part, whole};
    case CollKind::kReduceScatter:
      return {whole, part};
    case CollKind::kAllToAll:
      return {whole, whole};
    case CollKind::kAllReduce:
    case CollKind::kBroadcast:
      return {part, part};
  }
  return {part, part};
}

concclDataType_t concclType(Dtype d) {
  switch (d) {
    case Dtype::kBf16:
      return concclBfloat16;
    case Dtype::kFp16:
      return concclFloat16;
    case Dtype::kFp8E4M3:
      return concclFloat8e4m3;
    case Dtype::kFp32:
      return concclFloat32;
  }
  return concclBfloat16;
}

// conccl communicators over `devices`, created once per run (creation is not what is being measured).
class ConcclComms {
 public:
  explicit ConcclComms(const std::vector<int>& devices) : comms_(devices.size()) {
    concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
    config.backend = concclBackendCuda;
    C3_CHECK(concclCommInitAll(comms_.data(), int(devices.size()), devices.data(), &config));
  }
  ~ConcclComms() {
    for (concclComm_t c : comms_) concclCommDestroy(c);
  }
  ConcclComms(const ConcclComms&) = delete;
  ConcclComms& operator=(const ConcclComms&) = delete;
  const std::vector<concclComm_t>& comms() const { return comms_; }

 private:
  std::vector<concclComm_t> comms_;
};

class ConcclCollective : public Collective {
 public:
  ConcclCollective(const ConcclComms& comms, const std::vector<int>& devices, const CollectiveSpec& spec)
      : comms_(comms.comms()), spec_(spec) {
    const auto [sendBytes, recvBytes] = bufferBytes(spec);
    for (int dev : devices) {
      send_.emplace_back(dev, sendBytes);
      recv_.emplace_back(dev, recvBytes);
    }
  }
  void enqueue(const std::vector<cudaStream_t>& streams) override {
    const concclDataType_t type = concclType(spec_.dtype);
    const size_t count = spec_.callCount();
    C3_CHECK(concclGroupStart());
    for (size_t r = 0; r < comms_.size(); ++r) {
      const void* s = send_[r].get();
      void* d = recv_[r].get();
      switch (spec_.kind) {
        case CollKind::kAllGather:
          C3_CHECK(concclAllGather(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kReduceScatter:
          C3_CHECK(concclReduceScatter(s, d, count, type, concclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllReduce:
          C3_CHECK(concclAllReduce(s, d, count, type, concclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllToAll:
          C3_CHECK(concclAllToAll(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kBroadcast:
          C3_CHECK(concclBroadcast(s, d, count, type, 0, comms_[r], streams[r]));
          break;
      }
    }
    C3_CHECK(concclGroupEnd());
  }

 private:
  std::vector<concclComm_t> comms_;
  CollectiveSpec spec_;
  std::vector<DeviceMemory> send_, recv_;
};

#ifdef CONCCL_HAVE_NCCL
ncclDataType_t ncclType(Dtype d) {
  switch (d) {
    case Dtype::kBf16:
      return ncclBfloat16;
    case Dtype::kFp16:
      return ncclFloat16;
    case Dtype::kFp8E4M3:
      return ncclFloat8e4m3;
    case Dtype::kFp32:
      return ncclFloat32;
  }
  return ncclBfloat16;
}

enum class NcclVariant { kDefault, kReducedCtas, kCopyEngine };

// NCCL communicators over `devices` with a config per variant: default; maxCTAs limited (RP); CTAPolicy
// ZERO (NCCL 2.28 copy-engine collectives, which also need symmetric registered windows).
class NcclComms {
 public:
  NcclComms(const std::vector<int>& devices, NcclVariant variant, int maxCtas) : comms_(devices.size()) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (variant == NcclVariant::kReducedCtas) {
      config.maxCTAs = maxCtas;
      config.minCTAs = 1;
    }
    if (variant == NcclVariant::kCopyEngine) config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    ncclUniqueId id;
    C3_CHECK(ncclGetUniqueId(&id));
    C3_CHECK(ncclGroupStart());
    for (size_t r = 0; r < devices.size(); ++r) {
      C3_CHECK(cudaSetDevice(devices[r]));
      C3_CHECK(ncclCommInitRankConfig(&comms_[r], int(devices.size()), id, int(r), &config));
    }
    C3_CHECK(ncclGroupEnd());
  }
  ~NcclComms() {
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;
  const std::vector<ncclComm_t>& comms() const { return comms_; }

 private:
  std::vector<ncclComm_t> comms_;
};

class NcclCollective : public Collective {
 public:
  NcclCollective(const NcclComms& comms, const std::vector<int>& devices, const CollectiveSpec& spec, bool windows)
      : comms_(comms.comms()), spec_(spec) {
    const auto [sendBytes, recvBytes] = bufferBytes(spec);
    for (int dev : devices) {
      send_.emplace_back(dev, sendBytes, windows);
      recv_.emplace_back(dev, recvBytes, windows);
    }
    if (windows) {
      // Registration is collective: all ranks in one group.
      windows_.resize(2 * comms_.size());
      C3_CHECK(ncclGroupStart());
      for (size_t r = 0; r < comms_.size(); ++r) {
        C3_CHECK(
            ncclCommWindowRegister(comms_[r], send_[r].get(), sendBytes, &windows_[2 * r], NCCL_WIN_COLL_SYMMETRIC));
        C3_CHECK(ncclCommWindowRegister(comms_[r], recv_[r].get(), recvBytes, &windows_[2 * r + 1],
                                        NCCL_WIN_COLL_SYMMETRIC));
      }
      C3_CHECK(ncclGroupEnd());
    }
  }
  ~NcclCollective() override {
    if (windows_.empty()) return;
    ncclGroupStart();
    for (size_t r = 0; r < comms_.size(); ++r) {
      ncclCommWindowDeregister(comms_[r], windows_[2 * r]);
      ncclCommWindowDeregister(comms_[r], windows_[2 * r + 1]);
    }
    ncclGroupEnd();
  }
  void enqueue(const std::vector<cudaStream_t>& streams) override {
    const ncclDataType_t type = ncclType(spec_.dtype);
    const size_t count = spec_.callCount();
    C3_CHECK(ncclGroupStart());
    for (size_t r = 0; r < comms_.size(); ++r) {
      const void* s = send_[r].get();
      void* d = recv_[r].get();
      switch (spec_.kind) {
        case CollKind::kAllGather:
          C3_CHECK(ncclAllGather(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kReduceScatter:
          C3_CHECK(ncclReduceScatter(s, d, count, type, ncclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllReduce:
          C3_CHECK(ncclAllReduce(s, d, count, type, ncclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllToAll:
          C3_CHECK(ncclAlltoAll(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kBroadcast:
          C3_CHECK(ncclBroadcast(s, d, count, type, 0, comms_[r], streams[r]));
          break;
      }
    }
    C3_CHECK(ncclGroupEnd());
  }

 private:
  std::vector<ncclComm_t> comms_;
  CollectiveSpec spec_;
  std::vector<DeviceMemory> send_, recv_;
  std::vector<ncclWindow_t> windows_;
};
#endif  // CONCCL_HAVE_NCCL

// One-GPU proxy for an SM collective: a copy kernel with a fixed CTA count moving the collective's bytes.
class SmCopyCollective : public Collective {
 public:
  SmCopyCollective(int device, uint64_t bytes, int ctas)
      : bytes_(size_t(bytes) / 16 * 16), ctas_(ctas), src_(device, bytes_), dst_(device, bytes_) {}
  void enqueue(const std::vector<cudaStream_t>& streams) override {
    C3_CHECK(launchSmCopy(dst_.get(), src_.get(), bytes_, ctas_, streams[0]));
  }

 private:
  size_t bytes_;
  int ctas_;
  DeviceMemory src_, dst_;
};

// ---------------------------------------------------------------------------------------------------
// Streams, events and the start gate for ranks on `rankDevices` (devices may repeat).
class Harness {
 public:
  struct Sample {
    double gemm = kNaN;   // start -> last GEMM done
    double coll = kNaN;   // start -> last rank's collective done
    double total = kNaN;  // start -> both done
  };
  enum class Mode { kGemm, kColl, kBoth, kSerial };

  explicit Harness(const std::vector<int>& rankDevices) : rankDevices_(rankDevices) {
    for (int d : rankDevices) {
      if (std::find(devices_.begin(), devices_.end(), d) == devices_.end()) devices_.push_back(d);
    }
    void* flag = nullptr;
    C3_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    flag_ = static_cast<volatile int*>(flag);
    *flag_ = 0;
    int lowest = 0, highest = 0;
    C3_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    for (int d : devices_) {
      gate_.push_back(std::make_unique<Stream>(d, 0));
      gemm_.push_back(std::make_unique<Stream>(d, 0));
      start_.push_back(std::make_unique<Event>(d));
      gemmEnd_.push_back(std::make_unique<Event>(d));
    }
    for (int d : rankDevices) {
      coll_.push_back(std::make_unique<Stream>(d, 0));
      collHigh_.push_back(std::make_unique<Stream>(d, highest));  // greatest priority (numerically lowest)
      collEnd_.push_back(std::make_unique<Event>(d));
    }
  }
  ~Harness() { cudaFreeHost(const_cast<int*>(flag_)); }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  const std::vector<int>& devices() const { return devices_; }

  // `gemms`: one per distinct device (in devices() order), or empty. `highPriority`: the collective runs on
  // greatest-priority streams and is launched before the GEMMs (nccl+SP).
  Sample once(Mode mode, const std::vector<const Gemm*>& gemms, Collective* coll, bool highPriority) {
    const bool runGemm = mode != Mode::kColl;
    const bool runColl = mode != Mode::kGemm;
    std::vector<cudaStream_t> collStreams;
    for (size_t r = 0; r < rankDevices_.size(); ++r) {
      collStreams.push_back(highPriority ? collHigh_[r]->get() : coll_[r]->get());
    }
    *flag_ = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (size_t i = 0; i < devices_.size(); ++i) {
      DeviceGuard guard(devices_[i]);
      C3_CHECK(launchGate(flag_, gate_[i]->get()));
      C3_CHECK(cudaEventRecord(start_[i]->get(), gate_[i]->get()));
      C3_CHECK(cudaStreamWaitEvent(gemm_[i]->get(), start_[i]->get(), 0));
    }
    for (size_t r = 0; r < rankDevices_.size(); ++r) {
      C3_CHECK(cudaStreamWaitEvent(collStreams[r], start_[deviceIndex(rankDevices_[r])]->get(), 0));
    }
    auto enqueueGemms = [&] {
      for (size_t i = 0; i < devices_.size(); ++i) {
        DeviceGuard guard(devices_[i]);
        gemms[i]->enqueue(gemm_[i]->get());
        C3_CHECK(cudaEventRecord(gemmEnd_[i]->get(), gemm_[i]->get()));
      }
    };
    auto enqueueColl = [&] {
      if (mode == Mode::kSerial) {
        for (size_t r = 0; r < rankDevices_.size(); ++r) {
          for (auto& e : gemmEnd_) C3_CHECK(cudaStreamWaitEvent(collStreams[r], e->get(), 0));
        }
      }
      coll->enqueue(collStreams);
      for (size_t r = 0; r < rankDevices_.size(); ++r) {
        DeviceGuard guard(rankDevices_[r]);
        C3_CHECK(cudaEventRecord(collEnd_[r]->get(), collStreams[r]));
      }
    };
    if (runColl && highPriority) enqueueColl();
    if (runGemm) enqueueGemms();
    if (runColl && !highPriority) enqueueColl();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *flag_ = 1;  // release every gate: the common start
    for (size_t i = 0; i < devices_.size(); ++i) {
      C3_CHECK(cudaStreamSynchronize(gemm_[i]->get()));
      C3_CHECK(cudaStreamSynchronize(gate_[i]->get()));
    }
    for (cudaStream_t s : collStreams) C3_CHECK(cudaStreamSynchronize(s));

    Sample out;
    if (runGemm) {
      out.gemm = 0;
      for (size_t i = 0; i < devices_.size(); ++i) out.gemm = std::max(out.gemm, elapsed(*start_[i], *gemmEnd_[i]));
    }
    if (runColl) {
      out.coll = 0;
      for (size_t r = 0; r < rankDevices_.size(); ++r) {
        out.coll = std::max(out.coll, elapsed(*start_[deviceIndex(rankDevices_[r])], *collEnd_[r]));
      }
    }
    out.total = std::max(runGemm ? out.gemm : 0.0, runColl ? out.coll : 0.0);
    return out;
  }

  Sample median(Mode mode, const std::vector<const Gemm*>& gemms, Collective* coll, bool highPriority, int iters,
                int warmup) {
    for (int i = 0; i < warmup; ++i) once(mode, gemms, coll, highPriority);
    std::vector<double> g, c, t;
    for (int i = 0; i < iters; ++i) {
      const Sample s = once(mode, gemms, coll, highPriority);
      g.push_back(s.gemm);
      c.push_back(s.coll);
      t.push_back(s.total);
    }
    return {c3::median(g), c3::median(c), c3::median(t)};
  }

  // Runs the work once without the gate so that lazy initialisation (NCCL connections, cuBLASLt kernel
  // loading) does not happen while a gate kernel spins.
  void prime(const std::vector<const Gemm*>& gemms, Collective* coll) {
    if (!gemms.empty()) {
      for (size_t i = 0; i < devices_.size(); ++i) gemms[i]->enqueue(gemm_[i]->get());
    }
    if (coll != nullptr) {
      std::vector<cudaStream_t> s;
      for (auto& st : coll_) s.push_back(st->get());
      coll->enqueue(s);
      for (auto& st : collHigh_) s.push_back(st->get());
      for (cudaStream_t x : s) C3_CHECK(cudaStreamSynchronize(x));
    }
    for (auto& st : gemm_) C3_CHECK(cudaStreamSynchronize(st->get()));
  }

 private:
  size_t deviceIndex(int device) const {
    return size_t(std::find(devices_.begin(), devices_.end(), device) - devices_.begin());
  }

  std::vector<int> rankDevices_;
  std::vector<int> devices_;
  volatile int* flag_ = nullptr;
  std::vector<std::unique_ptr<Stream>> gate_, gemm_, coll_, collHigh_;
  std::vector<std::unique_ptr<Event>> start_, gemmEnd_, collEnd_;
};

// ---------------------------------------------------------------------------------------------------
const char* kOneGpuCaveat =
    "on one GPU every device-to-device copy runs on SMs (FACTS.md, probe 1), so conccl's copy-engine benefit "
    "cannot be shown here: same-GPU conccl rows are correctness/SM-budget data, not copy-engine results";

struct DeviceSetup {
  std::vector<int> rankDevices;
  int sms = 132;
  std::string name;
};

DeviceSetup resolveDevices(const C3Options& o, bool oneGpu) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    CONCCL_THROW(concclSystemError, std::string("conccl-c3 needs a CUDA GPU: ") +
                                        (e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device found"));
  }
  DeviceSetup s;
  if (!o.devices.empty()) {
    s.rankDevices = o.devices;
  } else if (oneGpu) {
    s.rankDevices.assign(size_t(o.ranks > 0 ? o.ranks : 4), 0);  // ranks share GPU 0
  } else {
    const int ranks = o.ranks > 0 ? o.ranks : std::min(count, 8);
    for (int r = 0; r < ranks; ++r) s.rankDevices.push_back(r);
  }
  if (oneGpu) s.rankDevices.assign(s.rankDevices.size(), s.rankDevices.front());
  for (int d : s.rankDevices) {
    CONCCL_REQUIRE(d < count, "device " + std::to_string(d) + " does not exist (" + std::to_string(count) +
                                  " CUDA devices; use --devices or --ranks)");
  }
  cudaDeviceProp prop;
  C3_CHECK(cudaGetDeviceProperties(&prop, s.rankDevices.front()));
  s.sms = prop.multiProcessorCount;
  s.name = prop.name;
  return s;
}

bool hasDuplicates(const std::vector<int>& v) { return std::set<int>(v.begin(), v.end()).size() != v.size(); }

}  // namespace

// ---------------------------------------------------------------------------------------------------
GpuRunOutput runC3(const C3Options& o, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                   const RowCallback& onRow) {
  const DeviceSetup setup = resolveDevices(o, false);
  const int ranks = int(setup.rankDevices.size());
  const bool sharedGpu = hasDuplicates(setup.rankDevices);
  const MachineProfile machine = MachineProfile::h200();
  const CommProfile comm;
  const Calibration calibration = Calibration::defaults();

  GpuRunOutput out;
  out.info.mode = "c3";
  out.info.device =
      std::to_string(std::set<int>(setup.rankDevices.begin(), setup.rankDevices.end()).size()) + "x " + setup.name;
  out.info.devices = setup.rankDevices;
  out.info.ranks = ranks;
  out.info.iters = o.iters;
  out.info.warmup = o.warmup;
  if (sharedGpu || ranks == 1) out.info.caveats.push_back(kOneGpuCaveat);
  out.info.caveats.push_back(
      "T_g is the GEMM alone on all SMs for every strategy, so RP rows' GEMM slowdown includes the cost of the "
      "SM budget; coll bound uses the alpha-beta model's half-peak size (docs/c3.md), not a measured curve");
  if (onInfo) onInfo(out.info);

  const std::vector<Strategy> strategies = selectedStrategies(o);
  const int rpNcclGemmSms = o.rpGemmSms > 0 ? o.rpGemmSms : std::max(8, setup.sms - o.rpCollCtas);
  const int rpConcclGemmSms = o.rpGemmSms > 0 ? o.rpGemmSms : std::max(8, setup.sms - 4);  // default reduceCtas

  // Communicators live for the whole run; a backend that cannot start is reported once per row.
  std::string concclError;
  std::unique_ptr<ConcclComms> conccl;
  if (std::any_of(strategies.begin(), strategies.end(), strategyUsesConccl) ||
      std::find(strategies.begin(), strategies.end(), Strategy::kSerial) != strategies.end()) {
    try {
      conccl = std::make_unique<ConcclComms>(setup.rankDevices);
    } catch (const Error& e) {
      concclError = e.what();
    }
  }
#ifdef CONCCL_HAVE_NCCL
  std::map<NcclVariant, std::unique_ptr<NcclComms>> nccl;
  std::map<NcclVariant, std::string> ncclError;
  auto ncclComms = [&](NcclVariant v) -> NcclComms* {
    if (ncclError.count(v)) return nullptr;
    if (!nccl.count(v)) {
      try {
        CONCCL_REQUIRE(!sharedGpu, "NCCL does not allow two ranks on one GPU");
        nccl[v] = std::make_unique<NcclComms>(setup.rankDevices, v, o.rpCollCtas);
      } catch (const Error& e) {
        ncclError[v] = e.what();
        return nullptr;
      }
    }
    return nccl[v].get();
  };
#endif

  Harness harness(setup.rankDevices);
  for (const Scenario& base : scenarios) {
    Scenario s = base;
    s.coll.ranks = ranks;  // bytes stay what nccl-tests counts per rank; the per-call count follows the ranks
    const double halfPeak = modelHalfPeakSize(s.coll.kind, ranks, comm);
    auto emit = [&](ResultRow row) {
      if (onRow) onRow(row);
      out.rows.push_back(std::move(row));
    };
    if (s.coll.callCount() == 0) {
      for (Strategy st : strategies) {
        emit(makeSkippedRow(s, strategyName(st), "skipped: too few bytes for the ranks", machine, halfPeak));
      }
      continue;
    }
    try {
      // One GEMM per distinct device, full GPU and SM-limited variants made on first use.
      std::map<int, std::vector<std::unique_ptr<Gemm>>> gemmSets;
      auto gemms = [&](int smTarget) {
        auto& set = gemmSets[smTarget];
        if (set.empty()) {
          for (int d : harness.devices()) set.push_back(std::make_unique<Gemm>(d, s.gemm, smTarget));
        }
        std::vector<const Gemm*> v;
        for (auto& g : set) v.push_back(g.get());
        return v;
      };
      harness.prime(gemms(0), nullptr);
      const double tG = harness.median(Harness::Mode::kGemm, gemms(0), nullptr, false, o.iters, o.warmup).gemm;

      for (Strategy st : strategies) {
        const std::string name = strategyName(st);
        if (!strategySupports(st, s.coll.kind)) {
          emit(makeSkippedRow(s, name, std::string("skipped: NCCL has no copy-engine ") + collKindName(s.coll.kind),
                              machine, halfPeak));
          continue;
        }
        try {
          std::unique_ptr<Collective> coll;
          int smTarget = 0;
          bool highPriority = false;
          std::string unavailable;
          const bool wantsNccl = strategyUsesNccl(st) || (st == Strategy::kSerial && !conccl);
#ifdef CONCCL_HAVE_NCCL
          if (wantsNccl) {
            const NcclVariant v = st == Strategy::kNcclRp   ? NcclVariant::kReducedCtas
                                  : st == Strategy::kNcclCe ? NcclVariant::kCopyEngine
                                                            : NcclVariant::kDefault;
            if (NcclComms* c = ncclComms(v)) {
              coll = std::make_unique<NcclCollective>(*c, setup.rankDevices, s.coll, v == NcclVariant::kCopyEngine);
            } else {
              unavailable = "skipped: NCCL: " + ncclError[v];
            }
          }
#else
          if (wantsNccl) unavailable = "skipped: built without NCCL";
#endif
          if (!wantsNccl) {
            if (conccl) {
              coll = std::make_unique<ConcclCollective>(*conccl, setup.rankDevices, s.coll);
            } else {
              unavailable = "skipped: conccl: " + concclError;
            }
          }
          if (!coll) {
            emit(makeSkippedRow(s, name, unavailable, machine, halfPeak));
            continue;
          }
          if (st == Strategy::kNcclRp) smTarget = rpNcclGemmSms;
          if (st == Strategy::kConcclRp) smTarget = rpConcclGemmSms;
          highPriority = st == Strategy::kNcclSp;

          harness.prime(gemms(smTarget), coll.get());
          const double tC = harness.median(Harness::Mode::kColl, {}, coll.get(), highPriority, o.iters, o.warmup).coll;
          const Harness::Mode mode = st == Strategy::kSerial ? Harness::Mode::kSerial : Harness::Mode::kBoth;
          const Harness::Sample both =
              harness.median(mode, gemms(smTarget), coll.get(), highPriority, o.iters, o.warmup);
          ResultRow row = makeRow(s, name, computeMetrics(tG, tC, both.total, both.gemm, both.coll), machine, halfPeak);
          const StrategyCost cost = calibration.cost(st, row.gemmBound, s.coll.kind);
          row.predictedTC3 = st == Strategy::kSerial ? tG + tC : predictOverlapTime(tG, tC, cost);
          emit(std::move(row));
        } catch (const Error& e) {
          emit(makeSkippedRow(s, name, std::string("error: ") + e.what(), machine, halfPeak));
        }
      }
    } catch (const Error& e) {  // the GEMM itself failed (e.g. no fp8 kernel): every strategy of the scenario
      for (Strategy st : strategies) {
        emit(makeSkippedRow(s, strategyName(st), std::string("error: ") + e.what(), machine, halfPeak));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
GpuRunOutput runSmSweep(const C3Options& o, const std::vector<Scenario>& scenarios, const InfoCallback& onInfo,
                        const SmRowCallback& onSmRow, const RowCallback& onRow) {
  const DeviceSetup setup = resolveDevices(o, true);
  const int device = setup.rankDevices.front();
  const MachineProfile machine = MachineProfile::h200();
  const CommProfile comm;

  GpuRunOutput out;
  out.info.mode = "sm-sweep";
  out.info.device = "1x " + setup.name;
  out.info.devices = {device};
  out.info.ranks = int(setup.rankDevices.size());
  out.info.iters = o.iters;
  out.info.warmup = o.warmup;
  out.info.caveats.push_back(kOneGpuCaveat);
  out.info.caveats.push_back(
      "sm-copy:<n>cta rows are an SM-collective proxy: a copy kernel with n CTAs moving the collective's bytes "
      "within the GPU");
  if (onInfo) onInfo(out.info);

  Harness single({device});
  DeviceGuard guard(device);
  Stream stream(device, 0);
  Event t0(device), t1(device);
  auto timeOn = [&](const Gemm& g, cudaStream_t st) {
    for (int i = 0; i < std::max(1, o.warmup); ++i) g.enqueue(st);
    std::vector<double> v;
    for (int i = 0; i < o.iters; ++i) {
      C3_CHECK(cudaEventRecord(t0.get(), st));
      g.enqueue(st);
      C3_CHECK(cudaEventRecord(t1.get(), st));
      C3_CHECK(cudaStreamSynchronize(st));
      v.push_back(elapsed(t0, t1));
    }
    return median(v);
  };

  // 1. GEMM time vs SM budget, once per distinct GEMM shape.
  std::vector<GemmShape> seen;
  for (const Scenario& s : scenarios) {
    if (std::find(seen.begin(), seen.end(), s.gemm) != seen.end()) continue;
    seen.push_back(s.gemm);
    auto emit = [&](SmBudgetRow r) {
      if (onSmRow) onSmRow(r);
      out.smRows.push_back(std::move(r));
    };
    double full = kNaN;
    try {
      const Gemm g(device, s.gemm, 0);
      full = timeOn(g, stream.get());
      emit({s.name, s.gemm, "full", setup.sms, full, 1.0, "ok"});
    } catch (const Error& e) {
      emit({s.name, s.gemm, "full", setup.sms, kNaN, kNaN, std::string("error: ") + e.what()});
      continue;
    }
    for (int sms : o.sweepSms) {
      if (sms >= setup.sms) continue;  // the full GPU is the baseline row
      try {
        const Gemm g(device, s.gemm, sms);
        const double t = timeOn(g, stream.get());
        emit({s.name, s.gemm, "sm-target", sms, t, t / full, "ok"});
      } catch (const Error& e) {
        emit({s.name, s.gemm, "sm-target", sms, kNaN, kNaN, std::string("error: ") + e.what()});
      }
      for (bool withTarget : {false, true}) {
        const char* method = withTarget ? "green-ctx+target" : "green-ctx";
        try {
          const GreenContext green(device, sms);
          const Gemm g(device, s.gemm, withTarget ? green.sms() : 0);
          const double t = timeOn(g, green.stream());
          emit({s.name, s.gemm, method, green.sms(), t, t / full, "ok"});
        } catch (const Error& e) {
          emit({s.name, s.gemm, method, sms, kNaN, kNaN, std::string("error: ") + e.what()});
        }
      }
    }
  }

  // 2. Each GEMM beside SM-collective proxies, and beside conccl with the ranks sharing this GPU.
  std::unique_ptr<ConcclComms> conccl;
  std::string concclError;
  try {
    conccl = std::make_unique<ConcclComms>(setup.rankDevices);
  } catch (const Error& e) {
    concclError = e.what();
  }
  Harness shared(setup.rankDevices);
  for (const Scenario& base : scenarios) {
    Scenario s = base;
    const double halfPeak = modelHalfPeakSize(s.coll.kind, s.coll.ranks, comm);
    auto emit = [&](ResultRow r) {
      if (onRow) onRow(r);
      out.rows.push_back(std::move(r));
    };
    std::unique_ptr<Gemm> gemm;
    double tG = kNaN;
    try {
      gemm = std::make_unique<Gemm>(device, s.gemm, 0);
      single.prime({gemm.get()}, nullptr);
      tG = single.median(Harness::Mode::kGemm, {gemm.get()}, nullptr, false, o.iters, o.warmup).gemm;
    } catch (const Error& e) {
      emit(makeSkippedRow(s, "gemm", std::string("error: ") + e.what(), machine, halfPeak));
      continue;
    }
    for (int ctas : o.sweepCopyCtas) {
      const std::string name = "sm-copy:" + std::to_string(ctas) + "cta";
      try {
        SmCopyCollective copy(device, s.coll.bytes, ctas);
        single.prime({}, &copy);
        const double tC = single.median(Harness::Mode::kColl, {}, &copy, false, o.iters, o.warmup).coll;
        const Harness::Sample both = single.median(Harness::Mode::kBoth, {gemm.get()}, &copy, false, o.iters, o.warmup);
        emit(makeRow(s, name, computeMetrics(tG, tC, both.total, both.gemm, both.coll), machine, halfPeak));
      } catch (const Error& e) {
        emit(makeSkippedRow(s, name, std::string("error: ") + e.what(), machine, halfPeak));
      }
    }
    const std::string name = "conccl:1gpu-" + std::to_string(setup.rankDevices.size()) + "r";
    if (!conccl) {
      emit(makeSkippedRow(s, name, "skipped: conccl: " + concclError, machine, halfPeak));
      continue;
    }
    try {
      s.coll.ranks = int(setup.rankDevices.size());
      CONCCL_REQUIRE(s.coll.callCount() > 0, "too few bytes for the ranks");
      ConcclCollective coll(*conccl, setup.rankDevices, s.coll);
      shared.prime({gemm.get()}, &coll);
      const double tC = shared.median(Harness::Mode::kColl, {}, &coll, false, o.iters, o.warmup).coll;
      const Harness::Sample both = shared.median(Harness::Mode::kBoth, {gemm.get()}, &coll, false, o.iters, o.warmup);
      emit(makeRow(s, name, computeMetrics(tG, tC, both.total, both.gemm, both.coll), machine, halfPeak));
    } catch (const Error& e) {
      emit(makeSkippedRow(s, name, std::string("error: ") + e.what(), machine, halfPeak));
    }
  }
  return out;
}

}  // namespace conccl::c3
