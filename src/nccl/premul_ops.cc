#include "nccl/premul_ops.h"

#include <algorithm>
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

ScratchArenas::~ScratchArenas() {
  for (void* b : owned_) free_(b);
}

void ScratchArenas::forget() {
  owned_.clear();
  arenas_.clear();
  allocated_ = 0;
}

void* ScratchArenas::acquire(const void* stream, size_t bytes, uint64_t groupEpoch, bool capturing) {
  const size_t need = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (capturing) {
    void* b = alloc_(need);
    if (b == nullptr) return nullptr;
    owned_.push_back(b);
    allocated_ += need;
    return b;
  }
  Arena& a = arenas_[stream];
  // A call outside groups, or the first call of another group: everything enqueued before it on this stream
  // (earlier calls, earlier groups' launches) is ordered before it, so the arena starts over.
  if (groupEpoch == 0 || a.epoch != groupEpoch) a.used = 0;
  a.epoch = groupEpoch;
  if (a.base == nullptr || a.used + need > a.capacity) {
    const size_t capacity = std::max({need, 2 * a.capacity, kMinBlock});
    void* b = alloc_(capacity);
    if (b == nullptr) return nullptr;
    owned_.push_back(b);  // the old block stays allocated: calls already enqueued may still read it
    allocated_ += capacity;
    a.base = static_cast<char*>(b);
    a.capacity = capacity;
    a.used = 0;
  }
  void* region = a.base + a.used;
  a.used += need;
  return region;
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
    default:
      return false;
  }
}

}  // namespace conccl::nccl
