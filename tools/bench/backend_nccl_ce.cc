// nccl-ce: NCCL 2.28's copy-engine collectives. The communicators are created with
// config.CTAPolicy = NCCL_CTA_POLICY_ZERO (ncclCommInitRankConfig per rank inside a group), buffers come from
// ncclMemAlloc and are registered with ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC). NCCL 2.28 then
// runs AllGather, AlltoAll, Gather and Scatter on copy engines (single node, CUDA driver >= 12.5); everything
// else, and any case where the registration failed, runs its SM kernels. NCCL does not report which path it
// took, so the bench states the conditions it checked and flags the SM fallbacks.
#include <map>

#include "backend_factory.h"
#include "backend_nccl.h"
#include "coll.h"

namespace conccl::bench {
namespace {

bool NcclHasCePath(CollKind kind) {
  return kind == CollKind::kAllGather || kind == CollKind::kAllToAll || kind == CollKind::kGather ||
         kind == CollKind::kScatter;
}

class NcclCeBackend final : public NcclBackend {
 public:
  explicit NcclCeBackend(const BenchOptions& options) : NcclBackend(options, NoInit{}) {
    ncclUniqueId id;
    BENCH_NCCL_CHECK(ncclGetUniqueId(&id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    BENCH_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < NumRanks(); ++r) {
      DeviceGuard guard(Device(r));
      BENCH_NCCL_CHECK(ncclCommInitRankConfig(&comms_[r], NumRanks(), id, r, &config));
    }
    BENCH_NCCL_CHECK(ncclGroupEnd());
    int driver = 0;
    cudaDriverGetVersion(&driver);
    driver_ok_ = driver >= 12050;
  }

  std::string Name() const override { return "nccl-ce"; }
  std::vector<std::string> Describe() const override {
    return {
        "nccl-ce: NCCL, CTAPolicy ZERO, ncclMemAlloc buffers in NCCL_WIN_COLL_SYMMETRIC windows; copy "
        "engines for all_gather/all_to_all/gather/scatter" +
        std::string(driver_ok_ ? "" : " (NOT on this machine: CUDA driver < 12.5)")};
  }

  SmUsage Sms(CollKind kind, size_t /*bytes*/) const override {
    std::string reason;
    if (!NcclHasCePath(kind)) reason = "NCCL 2.28 has no copy-engine path for this collective";
    if (!driver_ok_) reason = "CUDA driver < 12.5";
    if (!registered_) reason = "symmetric window registration failed: " + register_error_;
    if (reason.empty()) {
      return {0, false, false,
              "copy-engine path expected (CTAPolicy ZERO, symmetric windows, single node); not reported by NCCL"};
    }
    return {NcclMaxCtas(), true, true, "did not take the copy-engine path: " + reason + "; SM kernels"};
  }

  void* Alloc(int rank, size_t bytes) override {
    DeviceGuard guard(Device(rank));
    const size_t rounded =
        (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
    void* p = nullptr;
    BENCH_NCCL_CHECK(ncclMemAlloc(&p, rounded));
    sizes_[p] = rounded;
    return p;
  }
  void Free(int rank, void* ptr) override {
    DeviceGuard guard(Device(rank));
    sizes_.erase(ptr);
    ncclMemFree(ptr);
  }

  // Window registration is collective: every rank registers its i-th buffer (same size on all ranks) inside
  // one group.
  void Prepare(const std::vector<std::vector<void*>>& buffers) override {
    registered_ = true;
    register_error_.clear();
    windows_.assign(NumRanks(), {});
    try {
      for (size_t i = 0; i < buffers[0].size(); ++i) {
        BENCH_NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < NumRanks(); ++r) {
          ncclWindow_t win = nullptr;
          DeviceGuard guard(Device(r));
          BENCH_NCCL_CHECK(ncclCommWindowRegister(comms_[r], buffers[r][i], sizes_.at(buffers[r][i]), &win,
                                                  NCCL_WIN_COLL_SYMMETRIC));
          windows_[r].push_back(win);
        }
        BENCH_NCCL_CHECK(ncclGroupEnd());
      }
    } catch (const std::exception& e) {
      // Run anyway (NCCL falls back to its kernels) and say so in the row.
      registered_ = false;
      register_error_ = e.what();
    }
  }
  void Release() override {
    ncclGroupStart();
    for (int r = 0; r < static_cast<int>(windows_.size()); ++r) {
      DeviceGuard guard(Device(r));
      for (ncclWindow_t w : windows_[r]) {
        if (w) ncclCommWindowDeregister(comms_[r], w);
      }
    }
    ncclGroupEnd();
    windows_.clear();
  }

 private:
  bool driver_ok_ = false;
  bool registered_ = true;
  std::string register_error_;
  std::map<void*, size_t> sizes_;
  std::vector<std::vector<ncclWindow_t>> windows_;
};

}  // namespace

std::unique_ptr<Backend> MakeNcclCeBackend(const BenchOptions& options) {
  return std::make_unique<NcclCeBackend>(options);
}

}  // namespace conccl::bench
