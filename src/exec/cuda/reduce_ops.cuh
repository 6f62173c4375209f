// Element operations shared by the CUDA kernels that reduce (reduce_kernel.cu, small_program_kernel.cu):
// accumulation types, conversions and the five ops, with the host reference's semantics
// (src/exec/host/host_reduce.cc). Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace conccl::exec {

// ---- accumulation types and conversions ----------------------------------------------------------------
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<__half> {
  using type = float;
};
template <>
struct AccOf<__nv_bfloat16> {
  using type = float;
};
// Integers accumulate in their own type with wrapping sum/prod, and avg divides the wrapped sum: exactly
// the host backend's semantics (src/exec/host/host_reduce.cc), which the tests compare against.

template <typename A, typename T>
__device__ __forceinline__ A toAcc(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return static_cast<A>(v);
  }
}

template <typename T, typename A>
__device__ __forceinline__ T fromAcc(A v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return static_cast<T>(v);  // integers: modular narrowing (defined since C++20)
  }
}

// ---- operations ----------------------------------------------------------------------------------------
// Integer sum/prod go through the unsigned type: wrapping is the documented behaviour and signed overflow
// would be undefined.
template <typename A>
__device__ __forceinline__ A wrapAdd(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
__device__ __forceinline__ A wrapMul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

struct OpSum {
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    return wrapAdd(a, b);
  }
};
struct OpProd {
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    return wrapMul(a, b);
  }
};
struct OpMax {
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    return a < b ? b : a;  // std::max's choice on ties (+0 vs -0), like the host reference
  }
};
struct OpMin {
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    return b < a ? b : a;  // std::min's choice on ties
  }
};
struct OpAvg {  // the sum, divided by k when the element is finished
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    return wrapAdd(a, b);
  }
};

template <typename Op, typename A>
__device__ __forceinline__ A finish(A acc, int k) {
  if constexpr (std::is_same_v<Op, OpAvg>) {
    return static_cast<A>(acc / static_cast<A>(k));
  } else {
    (void)k;
    return acc;
  }
}

}  // namespace conccl::exec
