// Host-side matrices for the fused-op tests (test_gpu_all_gather_matmul, test_gpu_matmul_reduce_scatter): random
// values rounded to the device type, kept both as the bytes the device gets and as the floats they stand for.
#pragma once

#include <conccl/conccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace conccl::gputest {

// One element of `type` (bf16, fp16, fp8 e4m3) as raw bits and back, through the types' raw views.
inline uint16_t encodeElement(float f, concclDataType_t type) {
  if (type == concclBfloat16) {
    const __nv_bfloat16_raw raw = __float2bfloat16_rn(f);
    return raw.x;
  }
  if (type == concclFloat8e4m3) return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
  const __half_raw raw = __float2half_rn(f);
  return raw.x;
}

inline float decodeElement(uint16_t u, concclDataType_t type) {
  if (type == concclBfloat16) {
    __nv_bfloat16_raw raw;
    raw.x = u;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  if (type == concclFloat8e4m3) {
    const __half_raw raw = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(u), __NV_E4M3);
    return __half2float(__half(raw));
  }
  __half_raw raw;
  raw.x = u;
  return __half2float(__half(raw));
}

// rows x cols, row-major, values as the device holds them.
struct HostMatrix {
  int64_t rows = 0, cols = 0;
  concclDataType_t type = concclBfloat16;
  std::vector<float> values;

  static HostMatrix random(int64_t rows, int64_t cols, concclDataType_t type, std::mt19937& rng) {
    HostMatrix m{rows, cols, type, {}};
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    m.values.resize(static_cast<size_t>(rows * cols));
    for (float& v : m.values) v = decodeElement(encodeElement(dist(rng), type), type);
    return m;
  }
  float at(int64_t r, int64_t c) const { return values[static_cast<size_t>(r * cols + c)]; }
  // The bytes of the matrix as stored, or of its transpose ([cols, rows]) when `transposed`.
  std::vector<unsigned char> bytes(bool transposed = false) const {
    const size_t es = concclTypeSize(type);
    std::vector<unsigned char> out(values.size() * es);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t bits = encodeElement(at(r, c), type);
        const size_t index = static_cast<size_t>(transposed ? c * rows + r : r * cols + c);
        std::memcpy(out.data() + index * es, &bits, es);  // little-endian: the low byte first
      }
    }
    return out;
  }
};

// Reads `count` elements of `type` from host bytes as floats.
inline std::vector<float> decodeAll(const std::vector<unsigned char>& bytes, concclDataType_t type) {
  const size_t es = concclTypeSize(type);
  std::vector<float> out(bytes.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + i * es, es);
    out[i] = decodeElement(bits, type);
  }
  return out;
}

}  // namespace conccl::gputest
