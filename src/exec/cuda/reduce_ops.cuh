// Element operations shared by the CUDA kernels that reduce (reduce_kernel.cu, small_program_kernel.cu):
// accumulation types, conversions and the five ops, with the host reference's semantics
// (src/exec/host/host_reduce.cc). Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <conccl/conccl.h>

#include <cstdint>
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

// ---- host-side dispatch over the reducible types and the ops ----------------------------------------------
// f(TypeTag<T>{}) picks a kernel instantiation without a switch per kernel.
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the C++ type of `dtype`; returns false for a type without reductions (fp8).
template <typename F>
bool visitReduceType(concclDataType_t dtype, F&& f) {
  switch (dtype) {
    case concclInt8: f(TypeTag<int8_t>{}); return true;
    case concclUint8: f(TypeTag<uint8_t>{}); return true;
    case concclInt32: f(TypeTag<int32_t>{}); return true;
    case concclUint32: f(TypeTag<uint32_t>{}); return true;
    case concclInt64: f(TypeTag<int64_t>{}); return true;
    case concclUint64: f(TypeTag<uint64_t>{}); return true;
    case concclFloat16: f(TypeTag<__half>{}); return true;
    case concclBfloat16: f(TypeTag<__nv_bfloat16>{}); return true;
    case concclFloat32: f(TypeTag<float>{}); return true;
    case concclFloat64: f(TypeTag<double>{}); return true;
    default: return false;
  }
}

// Calls f(TypeTag<Op>{}) with the functor of `op`; returns false for an unknown op.
template <typename F>
bool visitReduceOp(concclRedOp_t op, F&& f) {
  switch (op) {
    case concclSum: f(TypeTag<OpSum>{}); return true;
    case concclProd: f(TypeTag<OpProd>{}); return true;
    case concclMax: f(TypeTag<OpMax>{}); return true;
    case concclMin: f(TypeTag<OpMin>{}); return true;
    case concclAvg: f(TypeTag<OpAvg>{}); return true;
    default: return false;
  }
}

// Calls f(TypeTag<T>{}, TypeTag<Op>{}) for every reducible type and op (to preload every instantiation).
template <typename F>
void forEachReduceTypeAndOp(F&& f) {
  for (int t = 0; t < concclNumTypes; ++t) {
    visitReduceType(static_cast<concclDataType_t>(t), [&](auto type) {
      for (int o = 0; o < concclNumOps; ++o) {
        visitReduceOp(static_cast<concclRedOp_t>(o), [&](auto op) { f(type, op); });
      }
    });
  }
}

}  // namespace conccl::exec
