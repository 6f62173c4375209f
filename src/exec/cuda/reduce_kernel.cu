#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_kernel_impl.cuh"
#include "exec/cuda/reduce_ops.cuh"

namespace conccl::exec {
namespace {

// The fixed-fan-in kernel is instantiated for the types that carry gradients and activations (fp32, bf16,
// fp16) and fan-in 2..8 (2..8 ranks of one node); everything else takes the generic kernel. Each instantiation
// costs compile time, and integers / fp64 are rare in reductions of that size.
template <typename T>
constexpr bool kHasFixedKernel =
    std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// Calls f(std::integral_constant<int, K>{}) for the fixed kernel's fan-in k; false when there is none.
template <typename F>
bool visitFixedFanIn(int k, F&& f) {
  switch (k) {
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 5: f(std::integral_constant<int, 5>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case 7: f(std::integral_constant<int, 7>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    default: return false;
  }
}
static_assert(kMinFixedFanIn == 2 && kMaxFixedFanIn == 8, "visitFixedFanIn lists fan-ins 2..8");

template <typename T, typename Op, int K>
const void* fixedKernel() {
  return reinterpret_cast<const void*>(&reduceFixedKernel<T, Op, K, fixedUnroll(K)>);
}

template <typename T, typename Op>
void launchTyped(const ReduceArgs& args, int ctas, int priority, cudaStream_t stream) {
  constexpr size_t kVec = 16 / sizeof(T);
  bool aligned = reinterpret_cast<uintptr_t>(args.output) % 16 == 0;
  for (int j = 0; j < args.k; ++j) aligned = aligned && reinterpret_cast<uintptr_t>(args.inputs[j]) % 16 == 0;
  // Never launch more CTAs than there is work for: small reductions then cost one short CTA, not reduceCtas.
  const size_t units = aligned ? args.count / kVec + args.count % kVec : args.count;
  const size_t needed = (units + kReduceThreads - 1) / kReduceThreads;
  const unsigned grid = static_cast<unsigned>(needed < static_cast<size_t>(ctas) ? needed : ctas);
  ReduceArgs a = args;
  const void* kernel = nullptr;
  if constexpr (kHasFixedKernel<T>) {
    if (aligned) visitFixedFanIn(args.k, [&](auto k) { kernel = fixedKernel<T, Op, decltype(k)::value>(); });
  }
  if (kernel != nullptr) {
    void* params[] = {&a};
    launchKernel(kernel, grid, kReduceThreads, params, priority, stream);
    return;
  }
  bool vectorized = aligned;
  void* params[] = {&a, &vectorized};
  launchKernel(reinterpret_cast<const void*>(&reduceGenericKernel<T, Op>), grid, kReduceThreads, params, priority,
               stream);
}

}  // namespace

void preloadReduceKernels() {
  forEachReduceTypeAndOp([](auto type, auto op) {
    cudaFuncAttributes attr{};
    // cudaFuncGetAttributes forces the lazy loader to load the function (and its module) now.
    using T = typename decltype(type)::type;
    using Op = typename decltype(op)::type;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&reduceGenericKernel<T, Op>)));
    if constexpr (kHasFixedKernel<T>) {
      for (int k = kMinFixedFanIn; k <= kMaxFixedFanIn; ++k) {
        visitFixedFanIn(k, [&](auto K) { CUDA_CHECK(cudaFuncGetAttributes(&attr, fixedKernel<T, Op, decltype(K)::value>())); });
      }
    }
  });
}

bool reduceSupported(concclDataType_t dtype, concclRedOp_t op) {
  if (op < concclSum || op >= concclNumOps) return false;
  return visitReduceType(dtype, [](auto) {});
}

void launchKernel(const void* kernel, unsigned grid, unsigned threads, void** params, int priority, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  if (priority != 0) {
    attribute.id = cudaLaunchAttributePriority;
    attribute.val.priority = priority;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  CUDA_CHECK(cudaLaunchKernelExC(&config, kernel, params));
}

void launchReduce(const ReduceArgs& args, concclDataType_t dtype, concclRedOp_t op, int ctas, int priority,
                  cudaStream_t stream) {
  CONCCL_REQUIRE(args.k >= 1, "a reduction needs at least one input (k = " + std::to_string(args.k) + ")");
  if (args.k > kMaxReduceInputs) {
    CONCCL_THROW(concclNotSupported, "the CUDA reduction kernel takes at most " + std::to_string(kMaxReduceInputs) +
                                         " inputs, the schedule asked for " + std::to_string(args.k));
  }
  CONCCL_REQUIRE(ctas >= 1, "reduceCtas = " + std::to_string(ctas) + " must be at least 1");
  if (!reduceSupported(dtype, op)) {
    CONCCL_THROW(concclNotSupported, "the CUDA reduction kernel does not support datatype " +
                                         std::to_string(static_cast<int>(dtype)) + " with op " +
                                         std::to_string(static_cast<int>(op)));
  }
  if (args.count == 0) return;
  const bool known = visitReduceType(dtype, [&](auto type) {
    visitReduceOp(op, [&](auto fn) {
      launchTyped<typename decltype(type)::type, typename decltype(fn)::type>(args, ctas, priority, stream);
    });
  });
  if (known) return;
  CONCCL_ASSERT(false);
}

}  // namespace conccl::exec
