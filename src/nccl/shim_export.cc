// The shim's own exports beside NCCL's API (include/conccl/nccl_shim.h): the NCCL version it was built against and
// the conccl communicator behind a shim communicator, for the Python package (`conccl run`'s ABI check, conccl.torch);
// the host time of its calls and the registrations it accepted, for tests/torch.
#include <conccl/nccl_shim.h>

#include "nccl/call_time.h"
#include "nccl/registration_counts.h"
#include "nccl/shim_comm.h"

using namespace conccl::nccl;

// The header's functions carry CONCCL_API (default visibility), so they are exported like NCCL's.
extern "C" int concclNcclShimAbiVersion(void) { return NCCL_VERSION_CODE; }

extern "C" int concclNcclShimGetComm(struct ncclComm* comm, concclComm_t* out) {
  if (out == nullptr) return fail(comm, ncclInvalidArgument, "concclNcclShimGetComm: out is NULL");
  *out = nullptr;
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "concclNcclShimGetComm: comm is NULL");
  // Read only the magic first: a real NCCL communicator starts with NCCL's own start magic, never the shim's.
  if (!isShimComm(comm)) {
    return fail(nullptr, ncclInvalidArgument,
                "concclNcclShimGetComm: not a communicator of this shim (a real NCCL communicator?)");
  }
  if (comm->path != Path::kConccl || comm->conccl == nullptr) {
    return fail(comm, ncclInvalidUsage,
                "concclNcclShimGetComm: this communicator runs on the real NCCL (the job spans nodes, or "
                "CONCCL_NCCL_SHIM=0), not on conccl");
  }
  *out = comm->conccl;
  return ncclSuccess;
}

extern "C" uint64_t concclNcclShimTakeCallNs(uint64_t* calls) {
  const ShimCallTime t = takeShimCallTime();
  if (calls != nullptr) *calls = t.calls;
  return t.ns;
}

extern "C" void concclNcclShimRegistrationCounts(uint64_t* registered, uint64_t* deregistered,
                                                 uint64_t* windowsRegistered, uint64_t* windowsDeregistered) {
  const RegistrationCounts& c = registrationCounts();
  auto put = [](uint64_t* out, const std::atomic<uint64_t>& v) {
    if (out != nullptr) *out = v.load(std::memory_order_relaxed);
  };
  put(registered, c.registered);
  put(deregistered, c.deregistered);
  put(windowsRegistered, c.windowsRegistered);
  put(windowsDeregistered, c.windowsDeregistered);
}
