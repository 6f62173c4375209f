#include "tp_workload.h"

#include <algorithm>

#include "compare.h"
#include "kernels.h"
#include "tp_stats.h"

namespace conccl::tp {

Workload::Workload(TpWorld& world, const TpShape& shape, bool check)
    : world_(world), shape_(shape), outputs_(size_t(world.size()), nullptr) {
  if (!check) return;
  for (int r = 0; r < world.size(); ++r) {
    exec::DeviceGuard guard(world.rank(r).device);
    refs_.push_back(exec::DeviceBuffer::allocate(shape.outputElems() * 2));
    stats_.push_back(exec::DeviceBuffer::allocate(2 * sizeof(unsigned)));
  }
}

std::function<void()> Workload::strategy(Strategy s) {
  switch (s) {
    case Strategy::kGemm:
      return [this] { gemm(); };
    case Strategy::kColl:
      return [this] { collective(); };
    case Strategy::kSerialNccl:
      return [this] {
        if (collectiveFirst()) collective();
        gemm();
        if (!collectiveFirst()) collective();
      };
    case Strategy::kNcclSplit:
      return [this] { split(); };
    case Strategy::kConcclFused:
      prepareFused();
      return [this] { fused(); };
  }
  return {};
}

void Workload::fillRandom(int r, void* data, size_t elems, unsigned seed) {
  exec::DeviceGuard guard(world_.rank(r).device);
  // launchFillRandom (conccl-c3's kernels.cu): kind 0 = bf16, values from a hash of the index and the seed.
  CUDA_CHECK(c3::launchFillRandom(data, elems, 0, seed * 131u + unsigned(r), world_.rank(r).main.get()));
}

void Workload::saveReference() {
  CONCCL_REQUIRE(!refs_.empty(), "saveReference needs --check");
  for (int r = 0; r < world_.size(); ++r) {
    exec::DeviceGuard guard(world_.rank(r).device);
    CUDA_CHECK(cudaMemcpyAsync(refs_[size_t(r)].get(), outputs_[size_t(r)], shape_.outputElems() * 2,
                               cudaMemcpyDeviceToDevice, world_.rank(r).main.get()));
  }
}

double Workload::compareWithReference() {
  CONCCL_REQUIRE(!refs_.empty(), "compareWithReference needs --check");
  for (int r = 0; r < world_.size(); ++r) {
    RankResources& rr = world_.rank(r);
    exec::DeviceGuard guard(rr.device);
    CUDA_CHECK(cudaMemsetAsync(stats_[size_t(r)].get(), 0, 2 * sizeof(unsigned), rr.main.get()));
    CUDA_CHECK(launchBf16MaxDiff(outputs_[size_t(r)], refs_[size_t(r)].get(), shape_.outputElems(),
                                 stats_[size_t(r)].as<unsigned>(), rr.main.get()));
  }
  world_.synchronize();
  double worst = 0;
  for (int r = 0; r < world_.size(); ++r) {
    exec::DeviceGuard guard(world_.rank(r).device);
    float v[2] = {0, 0};
    CUDA_CHECK(cudaMemcpy(v, stats_[size_t(r)].get(), sizeof(v), cudaMemcpyDeviceToHost));
    const double e = relativeError(v[0], v[1]);
    if (!(e <= worst)) worst = e;  // NaN sticks
  }
  return worst;
}

std::unique_ptr<Workload> makeWorkload(TpWorld& world, const TpShape& shape, bool check) {
  return shape.op == TpOp::kAllGatherGemm ? makeAllGatherGemm(world, shape, check)
                                          : makeGemmReduceScatter(world, shape, check);
}

void ncclGroup(const std::function<void()>& body) {
  C3_NCCL_CHECK(ncclGroupStart());
  try {
    body();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  C3_NCCL_CHECK(ncclGroupEnd());
}

void concclGroup(const std::function<void()>& body) {
  C3_CONCCL_CHECK(concclGroupStart());
  try {
    body();
  } catch (...) {
    concclGroupEnd();
    throw;
  }
  C3_CONCCL_CHECK(concclGroupEnd());
}

void throwOpError(concclResult_t result, const char* what, const std::string& message) {
  CONCCL_THROW(result, std::string(what) + ": " + concclGetErrorString(result) + ": " + message);
}

}  // namespace conccl::tp
