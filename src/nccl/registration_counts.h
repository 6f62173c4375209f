// How many buffer registrations the drop-in's conccl communicators of this process accepted and ended
// (concclNcclShimRegistrationCounts, conccl/nccl_shim.h): a framework's registration hooks (PyTorch's
// TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK, ProcessGroupNCCL.register_mem_pool) reach the library without any
// other visible effect, so the tests count them here. Calls forwarded to the real NCCL are not counted.
#pragma once

#include <atomic>
#include <cstdint>

namespace conccl::nccl {

struct RegistrationCounts {
  std::atomic<uint64_t> registered{0};    // ncclCommRegister
  std::atomic<uint64_t> deregistered{0};  // ncclCommDeregister
  std::atomic<uint64_t> windowsRegistered{0};
  std::atomic<uint64_t> windowsDeregistered{0};
};

inline RegistrationCounts& registrationCounts() {
  static RegistrationCounts counts;
  return counts;
}

inline void countRegistration(std::atomic<uint64_t> RegistrationCounts::*which) {
  (registrationCounts().*which).fetch_add(1, std::memory_order_relaxed);
}

}  // namespace conccl::nccl
