#include "nccl/premul_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "nccl/nccl_abi.h"

namespace conccl::nccl {

size_t ncclTypeBytes(int ncclType) {
  switch (ncclType) {
    case kInt8:
    case kUint8:
    case kFloat8e4m3:
    case kFloat8e5m2:
      return 1;
    case kFloat16:
    case kBfloat16:
      return 2;
    case kInt32:
    case kUint32:
    case kFloat32:
      return 4;
    case kInt64:
    case kUint64:
    case kFloat64:
      return 8;
    default:
      return 0;
  }
}

int PreMulOpTable::create(const PreMulOp& op) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (!ops_[i]) {
      ops_[i] = op;
      return kNumOps + static_cast<int>(i);
    }
  }
  ops_.push_back(op);
  return kNumOps + static_cast<int>(ops_.size() - 1);
}

std::optional<PreMulOp> PreMulOpTable::find(int ncclOp) const {
  if (ncclOp < kNumOps) return std::nullopt;
  size_t i = static_cast<size_t>(ncclOp - kNumOps);
  if (i >= ops_.size()) return std::nullopt;
  return ops_[i];
}

bool PreMulOpTable::destroy(int ncclOp) {
  if (!find(ncclOp)) return false;
  ops_[static_cast<size_t>(ncclOp - kNumOps)].reset();
  return true;
}

size_t PreMulOpTable::live() const {
  return static_cast<size_t>(std::count_if(ops_.begin(), ops_.end(), [](const auto& o) { return o.has_value(); }));
}

PreMulOp makePreMulOp(int ncclType, const void* scalar, bool onDevice) {
  PreMulOp p;
  p.ncclType = ncclType;
  p.onDevice = onDevice;
  if (onDevice) {
    p.devScalar = scalar;
  } else {
    std::memcpy(&p.scalarBits, scalar, std::min(ncclTypeBytes(ncclType), sizeof(p.scalarBits)));
  }
  return p;
}

namespace {

// Round-to-nearest-even of v into a binary format with `mantBits` stored significand bits and `expBits` exponent
// bits (binary16: 10, 5; bfloat16: 7, 8). v's exact value is rounded once (no intermediate format).
uint16_t roundToBinary(double v, int mantBits, int expBits) {
  const uint16_t expMask = static_cast<uint16_t>(((1u << expBits) - 1) << mantBits);
  if (std::isnan(v)) return 0x7fff;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | expMask;
  if (a == 0.0) return sign;
  const int bias = (1 << (expBits - 1)) - 1;
  const int emin = 1 - bias;
  const int emax = bias;
  int e = 0;
  std::frexp(a, &e);                  // a = m * 2^e, m in [0.5, 1): floor(log2(a)) = e - 1
  int ex = std::max(e - 1, emin);     // the exponent of the result's quantum, subnormals included
  double r = std::nearbyint(std::ldexp(a, mantBits - ex));  // exact scaling; ties to even (default mode)
  if (r >= std::ldexp(1.0, mantBits + 1)) {
    r /= 2;  // rounded up to the next power of two
    ++ex;
  }
  const auto ri = static_cast<uint32_t>(r);
  if (ri < (1u << mantBits)) return static_cast<uint16_t>(sign | ri);  // subnormal (ex == emin) or zero
  if (ex > emax) return sign | expMask;                                // overflow
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(ex + bias) << mantBits) | (ri - (1u << mantBits)));
}

}  // namespace

double halfToDouble(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exp = (bits >> 10) & 0x1f;
  const int mant = bits & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant != 0 ? std::nan("") : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

double bfloat16ToDouble(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t doubleToHalf(double v) { return roundToBinary(v, 10, 5); }
uint16_t doubleToBfloat16(double v) { return roundToBinary(v, 7, 8); }

ScratchPool::ScratchPool(std::unique_ptr<ScratchDevice> device, size_t maxBytes)
    : device_(std::move(device)), maxBytes_(maxBytes) {}

ScratchPool::~ScratchPool() {
  for (Block& b : blocks_) freeBlock(b);
}

void ScratchPool::forget() {
  blocks_.clear();  // neither the memory nor the fences are handed back: work may still use them
  allocated_ = 0;
}

size_t ScratchPool::blockSize(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  // Eight steps per power of two: a step is 1/8 of the power of two below `bytes`.
  size_t p = 1;
  while (p <= bytes / 2) p *= 2;
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

size_t ScratchPool::blocks() const {
  return static_cast<size_t>(
      std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.state != State::kGone; }));
}
size_t ScratchPool::graphBlocks() const {
  return static_cast<size_t>(
      std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.state == State::kGraph; }));
}
size_t ScratchPool::heldBlocks() const {
  return static_cast<size_t>(
      std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.state == State::kHeld; }));
}

bool ScratchPool::completed(Block& b) {
  if (!b.fenceRecorded) return true;
  if (!b.fenceOk) return false;
  if (!device_->fenceDone(b.fence)) return false;
  b.fenceRecorded = false;  // completed once is completed for good (until the next record)
  return true;
}

void ScratchPool::reclaimGraphBlocks() {
  for (Block& b : blocks_) {
    if (b.state == State::kGraph && b.graphReleased && b.graphReleased->load(std::memory_order_acquire)) {
      // CUDA released the graph's reference after its launches completed: nothing uses the block any more.
      b.state = State::kIdle;
      b.graphReleased.reset();
      b.stream = nullptr;
      b.fenceRecorded = false;
      b.fenceOk = true;
    }
  }
}

int ScratchPool::findIdle(size_t need, bool requireCompleted, const void* stream, bool sameStreamOk) {
  int best = -1;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = blocks_[i];
    if (b.state != State::kIdle || b.size < need) continue;
    if (best >= 0 && blocks_[static_cast<size_t>(best)].size <= b.size) continue;
    // A block whose fence could not be recorded is never reused (nothing tells when its last use ends).
    const bool ok = b.fenceOk && ((sameStreamOk && b.stream == stream && b.fenceRecorded) || completed(b));
    if (requireCompleted ? ok : b.fenceOk) best = static_cast<int>(i);
  }
  return best;
}

void ScratchPool::freeBlock(Block& b) {
  if (b.state == State::kGone) return;
  if (b.ptr != nullptr) device_->free(b.ptr);
  if (b.fence != nullptr) device_->destroyFence(b.fence);
  allocated_ -= b.size;
  b = Block{};
  b.state = State::kGone;
}

std::string ScratchPool::limitMessage(size_t need) const {
  return std::to_string(need) + " bytes of scratch are needed; the communicator's scratch holds " +
         std::to_string(allocated_) + " bytes in " + std::to_string(blocks()) + " blocks (" +
         std::to_string(heldBlocks()) + " held by calls not yet launched, " + std::to_string(graphBlocks()) +
         " kept for captured CUDA graphs) and may not exceed " + std::to_string(maxBytes_) +
         " bytes (CONCCL_NCCL_SCRATCH_MAX_BYTES): raise it, or destroy unused CUDA graphs";
}

int ScratchPool::allocate(size_t need, std::string* error) {
  const size_t size = blockSize(need);
  if (allocated_ + size > maxBytes_) {
    // Make room: idle blocks too small for this request whose work has completed are freed (they could not serve
    // it, and a growing need would otherwise strand them). Only here, at the limit: cudaFree synchronises.
    for (Block& b : blocks_) {
      if (allocated_ + size <= maxBytes_) break;
      if (b.state == State::kIdle && b.size < need && completed(b)) freeBlock(b);
    }
  }
  if (allocated_ + size > maxBytes_) {
    *error = limitMessage(need);
    return -1;
  }
  void* ptr = device_->alloc(size);
  if (ptr == nullptr) {
    *error = "allocating " + std::to_string(size) + " bytes of scratch failed (out of device memory?)";
    return -1;
  }
  void* fence = device_->createFence();
  if (fence == nullptr) {
    device_->free(ptr);
    *error = "creating the scratch block's event failed";
    return -1;
  }
  Block b;
  b.ptr = ptr;
  b.size = size;
  b.fence = fence;
  allocated_ += size;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].state == State::kGone) {
      blocks_[i] = b;
      return static_cast<int>(i);
    }
  }
  blocks_.push_back(b);
  return static_cast<int>(blocks_.size() - 1);
}

ScratchGrant ScratchPool::acquire(const void* stream, size_t bytes, bool capturing, uint64_t groupEpoch) {
  ScratchGrant g;
  const size_t need = std::max<size_t>(bytes, 1);
  if (blockSize(need) > maxBytes_) {
    g.error = limitMessage(need);
    return g;
  }
  reclaimGraphBlocks();
  int i = -1;
  if (capturing) {
    // Only a block nothing else will touch: fresh, or idle with its eager work completed.
    i = findIdle(need, /*requireCompleted=*/true, stream, /*sameStreamOk=*/false);
    if (i < 0) i = allocate(need, &g.error);
    if (i < 0) return g;
    Block& b = blocks_[static_cast<size_t>(i)];
    b.state = State::kGraph;
    b.graphReleased = std::make_shared<std::atomic<bool>>(false);
    if (!device_->attachToCapture(stream, b.graphReleased)) b.graphReleased.reset();  // kept until destruction
    g.ptr = b.ptr;
    g.block = i;
    return g;
  }
  i = findIdle(need, /*requireCompleted=*/true, stream, /*sameStreamOk=*/true);
  if (i < 0) {
    std::string allocError;
    i = allocate(need, &allocError);
    if (i < 0) {
      // At the limit: an idle block whose last use on another stream may still run, after a stream-ordered wait.
      i = findIdle(need, /*requireCompleted=*/false, stream, /*sameStreamOk=*/true);
      if (i >= 0) {
        Block& b = blocks_[static_cast<size_t>(i)];
        if (b.stream != stream && b.fenceRecorded && !device_->waitFence(stream, b.fence)) i = -1;
      }
      if (i < 0) {
        g.error = allocError;
        return g;
      }
    }
  }
  Block& b = blocks_[static_cast<size_t>(i)];
  b.state = State::kHeld;
  b.stream = stream;
  b.epoch = groupEpoch;
  g.ptr = b.ptr;
  g.block = i;
  return g;
}

void ScratchPool::release(int block) {
  if (block < 0 || static_cast<size_t>(block) >= blocks_.size()) return;
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.state != State::kHeld) return;  // a graph's block stays the graph's
  b.fenceOk = device_->recordFence(b.fence, b.stream);
  b.fenceRecorded = true;
  b.epoch = 0;
  b.state = State::kIdle;
}

void ScratchPool::releaseGroup(uint64_t groupEpoch) {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].state == State::kHeld && blocks_[i].epoch == groupEpoch) release(static_cast<int>(i));
  }
}

namespace {

template <class T>
void scale(void* out, const void* in, size_t count, uint64_t scalarBits) {
  T s;
  std::memcpy(&s, &scalarBits, sizeof(T));
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  if constexpr (std::is_integral_v<T>) {
    // Unsigned arithmetic: the product wraps like NCCL's device code, without signed-overflow undefined behaviour.
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < count; ++i) y[i] = static_cast<T>(static_cast<U>(static_cast<U>(x[i]) * static_cast<U>(s)));
  } else {
    for (size_t i = 0; i < count; ++i) y[i] = x[i] * s;
  }
}

}  // namespace

bool preMultiplyOnHost(void* out, const void* in, size_t count, int ncclType, uint64_t scalarBits) {
  switch (ncclType) {
    case kInt8:
      scale<int8_t>(out, in, count, scalarBits);
      return true;
    case kUint8:
      scale<uint8_t>(out, in, count, scalarBits);
      return true;
    case kInt32:
      scale<int32_t>(out, in, count, scalarBits);
      return true;
    case kUint32:
      scale<uint32_t>(out, in, count, scalarBits);
      return true;
    case kInt64:
      scale<int64_t>(out, in, count, scalarBits);
      return true;
    case kUint64:
      scale<uint64_t>(out, in, count, scalarBits);
      return true;
    case kFloat32:
      scale<float>(out, in, count, scalarBits);
      return true;
    case kFloat64:
      scale<double>(out, in, count, scalarBits);
      return true;
    case kFloat16:
    case kBfloat16: {
      const bool half = ncclType == kFloat16;
      const auto s = static_cast<uint16_t>(scalarBits & 0xffff);
      const double sd = half ? halfToDouble(s) : bfloat16ToDouble(s);
      const auto* x = static_cast<const uint16_t*>(in);
      auto* y = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < count; ++i) {
        const double p = (half ? halfToDouble(x[i]) : bfloat16ToDouble(x[i])) * sd;  // exact
        y[i] = half ? doubleToHalf(p) : doubleToBfloat16(p);
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace conccl::nccl
