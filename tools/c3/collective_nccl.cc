// NCCL's collectives (collectives.h): the SM-kernel baseline and its RP and copy-engine variants.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "c3_check.h"
#include "collectives.h"

namespace conccl::c3 {

#ifdef CONCCL_HAVE_NCCL
namespace {

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

// ncclMemAlloc'd memory (VMM), which NCCL's copy-engine collectives need for symmetric windows.
class NcclBuffer {
 public:
  NcclBuffer(int device, size_t bytes) : device_(device) {
    exec::DeviceGuard guard(device);
    C3_NCCL_CHECK(ncclMemAlloc(&ptr_, std::max<size_t>(bytes, 256)));
  }
  ~NcclBuffer() {
    if (ptr_ == nullptr) return;
    cudaSetDevice(device_);
    ncclMemFree(ptr_);
  }
  NcclBuffer(const NcclBuffer&) = delete;
  NcclBuffer& operator=(const NcclBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_ = nullptr;
};

// A rank's buffer: cudaMalloc'd, or ncclMemAlloc'd for the copy-engine variant.
class RankBuffer {
 public:
  RankBuffer(int device, size_t bytes, bool nccl) {
    if (nccl) {
      nccl_ = std::make_unique<NcclBuffer>(device, bytes);
    } else {
      exec::DeviceGuard guard(device);
      plain_ = exec::DeviceBuffer::allocate(std::max<size_t>(bytes, 256));
    }
  }
  void* get() const { return nccl_ ? nccl_->get() : plain_.get(); }

 private:
  std::unique_ptr<NcclBuffer> nccl_;
  exec::DeviceBuffer plain_;
};

}  // namespace

struct NcclComms::Impl {
  std::vector<ncclComm_t> comms;
};

NcclComms::NcclComms(const std::vector<int>& devices, NcclVariant variant, int maxCtas)
    : devices_(devices), variant_(variant), impl_(std::make_unique<Impl>()) {
  impl_->comms.resize(devices.size());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (variant == NcclVariant::kReducedCtas) {
    config.maxCTAs = maxCtas;
    config.minCTAs = 1;
  }
  if (variant == NcclVariant::kCopyEngine) config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  ncclUniqueId id;
  C3_NCCL_CHECK(ncclGetUniqueId(&id));
  C3_NCCL_CHECK(ncclGroupStart());
  for (size_t r = 0; r < devices.size(); ++r) {
    CUDA_CHECK(cudaSetDevice(devices[r]));
    C3_NCCL_CHECK(ncclCommInitRankConfig(&impl_->comms[r], int(devices.size()), id, int(r), &config));
  }
  C3_NCCL_CHECK(ncclGroupEnd());
}

NcclComms::~NcclComms() {
  for (ncclComm_t c : impl_->comms) ncclCommDestroy(c);
}

namespace {

class NcclCollective : public Collective {
 public:
  NcclCollective(const NcclComms& comms, const CollectiveSpec& spec)
      : comms_(comms.impl().comms), spec_(spec), windows_(comms.variant() == NcclVariant::kCopyEngine) {
    const auto [sendBytes, recvBytes] = bufferBytes(spec);
    for (int dev : comms.devices()) {
      send_.push_back(std::make_unique<RankBuffer>(dev, sendBytes, windows_));
      recv_.push_back(std::make_unique<RankBuffer>(dev, recvBytes, windows_));
    }
    if (windows_) {
      // Registration is collective: all ranks in one group.
      handles_.resize(2 * comms_.size());
      C3_NCCL_CHECK(ncclGroupStart());
      for (size_t r = 0; r < comms_.size(); ++r) {
        C3_NCCL_CHECK(ncclCommWindowRegister(comms_[r], send_[r]->get(), sendBytes, &handles_[2 * r],
                                             NCCL_WIN_COLL_SYMMETRIC));
        C3_NCCL_CHECK(ncclCommWindowRegister(comms_[r], recv_[r]->get(), recvBytes, &handles_[2 * r + 1],
                                             NCCL_WIN_COLL_SYMMETRIC));
      }
      C3_NCCL_CHECK(ncclGroupEnd());
    }
  }
  ~NcclCollective() override {
    if (handles_.empty()) return;
    ncclGroupStart();
    for (size_t r = 0; r < comms_.size(); ++r) {
      ncclCommWindowDeregister(comms_[r], handles_[2 * r]);
      ncclCommWindowDeregister(comms_[r], handles_[2 * r + 1]);
    }
    ncclGroupEnd();
  }
  void enqueue(const std::vector<cudaStream_t>& streams) override {
    const ncclDataType_t type = ncclType(spec_.dtype);
    const size_t count = spec_.callCount();
    C3_NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r < comms_.size(); ++r) {
      const void* s = send_[r]->get();
      void* d = recv_[r]->get();
      switch (spec_.kind) {
        case CollKind::kAllGather:
          C3_NCCL_CHECK(ncclAllGather(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kReduceScatter:
          C3_NCCL_CHECK(ncclReduceScatter(s, d, count, type, ncclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllReduce:
          C3_NCCL_CHECK(ncclAllReduce(s, d, count, type, ncclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllToAll:
          C3_NCCL_CHECK(ncclAlltoAll(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kBroadcast:
          C3_NCCL_CHECK(ncclBroadcast(s, d, count, type, 0, comms_[r], streams[r]));
          break;
        default:
          throw std::invalid_argument(std::string("conccl-c3 cannot run ") + sched::collKindName(spec_.kind));
      }
    }
    C3_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  std::vector<ncclComm_t> comms_;
  CollectiveSpec spec_;
  bool windows_;
  std::vector<std::unique_ptr<RankBuffer>> send_, recv_;
  std::vector<ncclWindow_t> handles_;
};

}  // namespace

std::unique_ptr<Collective> makeNcclCollective(const NcclComms& comms, const CollectiveSpec& spec) {
  return std::make_unique<NcclCollective>(comms, spec);
}

#else  // !CONCCL_HAVE_NCCL

struct NcclComms::Impl {};

NcclComms::NcclComms(const std::vector<int>& devices, NcclVariant variant, int)
    : devices_(devices), variant_(variant) {
  CONCCL_THROW(concclNotSupported, "built without NCCL");
}
NcclComms::~NcclComms() = default;

std::unique_ptr<Collective> makeNcclCollective(const NcclComms&, const CollectiveSpec&) {
  CONCCL_THROW(concclNotSupported, "built without NCCL");
}

#endif

}  // namespace conccl::c3
