// conccl's collectives and the SM-copy proxy (collectives.h).
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "c3/call_resources.h"
#include "c3_check.h"
#include "collectives.h"
#include "kernels.h"

namespace conccl::c3 {
namespace {

concclCollective_t concclColl(CollKind k) {
  switch (k) {
    case CollKind::kAllGather:
      return concclCollAllGather;
    case CollKind::kReduceScatter:
      return concclCollReduceScatter;
    case CollKind::kAllReduce:
      return concclCollAllReduce;
    case CollKind::kAllToAll:
      return concclCollAllToAll;
    case CollKind::kBroadcast:
      return concclCollBroadcast;
    default:
      return concclNumColls;  // not a C3 collective (validateScenario refuses it)
  }
}

exec::DeviceBuffer allocateOn(int device, size_t bytes) {
  exec::DeviceGuard guard(device);
  return exec::DeviceBuffer::allocate(std::max<size_t>(bytes, 256));
}

class ConcclCollective : public Collective {
 public:
  ConcclCollective(const ConcclComms& comms, const CollectiveSpec& spec) : comms_(comms.comms()), spec_(spec) {
    const auto [sendBytes, recvBytes] = bufferBytes(spec);
    for (int dev : comms.devices()) {
      send_.push_back(allocateOn(dev, sendBytes));
      recv_.push_back(allocateOn(dev, recvBytes));
    }
  }
  void enqueue(const std::vector<cudaStream_t>& streams) override {
    const concclDataType_t type = concclTypeOf(spec_.dtype);
    const size_t count = spec_.callCount();
    C3_CONCCL_CHECK(concclGroupStart());
    for (size_t r = 0; r < comms_.size(); ++r) {
      const void* s = send_[r].get();
      void* d = recv_[r].get();
      switch (spec_.kind) {
        case CollKind::kAllGather:
          C3_CONCCL_CHECK(concclAllGather(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kReduceScatter:
          C3_CONCCL_CHECK(concclReduceScatter(s, d, count, type, concclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllReduce:
          C3_CONCCL_CHECK(concclAllReduce(s, d, count, type, concclSum, comms_[r], streams[r]));
          break;
        case CollKind::kAllToAll:
          C3_CONCCL_CHECK(concclAllToAll(s, d, count, type, comms_[r], streams[r]));
          break;
        case CollKind::kBroadcast:
          C3_CONCCL_CHECK(concclBroadcast(s, d, count, type, 0, comms_[r], streams[r]));
          break;
        default:
          throw std::invalid_argument(std::string("conccl-c3 cannot run ") + sched::collKindName(spec_.kind));
      }
    }
    C3_CONCCL_CHECK(concclGroupEnd());
  }

 private:
  std::vector<concclComm_t> comms_;
  CollectiveSpec spec_;
  std::vector<exec::DeviceBuffer> send_, recv_;
};

class SmCopyCollective : public Collective {
 public:
  SmCopyCollective(int device, uint64_t bytes, int ctas)
      : bytes_(size_t(bytes) / 16 * 16), ctas_(ctas), src_(allocateOn(device, bytes_)), dst_(allocateOn(device, bytes_)) {}
  void enqueue(const std::vector<cudaStream_t>& streams) override {
    CUDA_CHECK(launchSmCopy(dst_.get(), src_.get(), bytes_, ctas_, streams[0]));
  }

 private:
  size_t bytes_;
  int ctas_;
  exec::DeviceBuffer src_, dst_;
};

}  // namespace

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
    default:  // all-reduce, broadcast (validateScenario refuses the rest)
      return {part, part};
  }
}

ConcclComms::ConcclComms(const std::vector<int>& devices) : devices_(devices), comms_(devices.size()) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendCuda;
  // Beside a GEMM no SM may move data: engine = copy sends a rank's own block through a peer GPU on copy engines
  // (a copy inside one GPU would wait for the GEMM's SMs) and turns the small-message kernel off. Its cost alone is
  // part of this strategy's own T_c. CONCCL_ENGINE=auto in the environment does not override a field set here;
  // C3_CONCCL_ENGINE=auto does, to measure the difference.
  const char* engine = std::getenv("C3_CONCCL_ENGINE");
  config.engine = engine != nullptr && std::string(engine) == "auto" ? concclEngineAuto : concclEngineCopy;
  C3_CONCCL_CHECK(concclCommInitAll(comms_.data(), int(devices.size()), devices.data(), &config));
}

ConcclComms::~ConcclComms() {
  for (concclComm_t c : comms_) concclCommDestroy(c);
}

std::unique_ptr<Collective> makeConcclCollective(const ConcclComms& comms, const CollectiveSpec& spec) {
  return std::make_unique<ConcclCollective>(comms, spec);
}

int concclCallSms(const ConcclComms& comms, const CollectiveSpec& spec) {
  int most = 0;
  for (concclComm_t comm : comms.comms()) {
    concclCallResources_t res{};
    C3_CONCCL_CHECK(concclCallResources(comm, concclColl(spec.kind), spec.callCount(), concclTypeOf(spec.dtype), 0, &res));
    most = std::max(most, res.sms);
  }
  return most;
}

std::unique_ptr<Collective> makeSmCopyCollective(int device, uint64_t bytes, int ctas) {
  return std::make_unique<SmCopyCollective>(device, bytes, ctas);
}

}  // namespace conccl::c3
