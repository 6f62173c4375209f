// exec/cuda/vmm_export.h: which buffers a cached VMM unit covers (the owner reuses a unit for a buffer it covers,
// and exports the buffer's offset in it). A pointer below, past or straddling the end of the unit is not covered;
// a unit reused for such a pointer would send its peers an offset outside their mapping.
#include <gtest/gtest.h>

#include <cstdint>

#include "exec/cuda/vmm_export.h"

namespace conccl::exec {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

VmmUnit unitAt(CUdeviceptr base, size_t bytes) {
  VmmUnit u;
  u.base = base;
  u.bytes = bytes;
  return u;
}

const void* at(CUdeviceptr a) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(a)); }

TEST(VmmUnitCover, BuffersInsideAreCovered) {
  const VmmUnit u = unitAt(0x7f0000000000ull, 40 * kMiB);
  EXPECT_TRUE(vmmUnitCovers(u, at(u.base), 40 * kMiB));
  EXPECT_TRUE(vmmUnitCovers(u, at(u.base + 3 * kMiB), 37 * kMiB));
  EXPECT_TRUE(vmmUnitCovers(u, at(u.base + 40 * kMiB), 0));  // empty, at the end
}

TEST(VmmUnitCover, BuffersOutsideOrAcrossTheEndAreNot) {
  const VmmUnit u = unitAt(0x7f0000000000ull, 40 * kMiB);
  EXPECT_FALSE(vmmUnitCovers(u, at(u.base - 1), 1));
  EXPECT_FALSE(vmmUnitCovers(u, at(u.base + 3 * kMiB), 37 * kMiB + 1));
  // Past the end: with end addresses computed as base + bytes - ptr this wrapped around and every higher buffer of a
  // segment was "covered" by the first unit made in it.
  EXPECT_FALSE(vmmUnitCovers(u, at(u.base + 40 * kMiB + 1), 0));
  EXPECT_FALSE(vmmUnitCovers(u, at(u.base + 41 * kMiB), 1 * kMiB));
  EXPECT_FALSE(vmmUnitCovers(u, at(u.base + 400 * kMiB), 64 * kMiB));
  EXPECT_FALSE(vmmUnitCovers(u, at(~CUdeviceptr{0} - kMiB), kMiB));
}

}  // namespace
}  // namespace conccl::exec
