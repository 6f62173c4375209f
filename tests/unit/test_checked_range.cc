// Executor::CheckedRange (exec/executor.h): a buffer of a grouped call is taken as checked only when it lies wholly
// inside an allocation an earlier buffer of the same call was checked in; anything reaching past either end, or an
// allocation whose range the backend could not tell, is checked again.
#include "exec/executor.h"

#include <gtest/gtest.h>

#include <cstdint>

using conccl::exec::Executor;

namespace {

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

}  // namespace

TEST(CheckedRange, CoversSlicesInsideTheAllocation) {
  const Executor::CheckedRange r{0x10000, 4096};
  EXPECT_TRUE(r.covers(at(0x10000), 4096));  // the whole allocation
  EXPECT_TRUE(r.covers(at(0x10000), 1));
  EXPECT_TRUE(r.covers(at(0x10800), 2048));  // the last half, to the last byte
  EXPECT_TRUE(r.covers(at(0x10fff), 1));
  EXPECT_TRUE(r.covers(at(0x11000), 0));  // an empty slice at the end
}

TEST(CheckedRange, RefusesWhatReachesPastEitherEnd) {
  const Executor::CheckedRange r{0x10000, 4096};
  EXPECT_FALSE(r.covers(at(0x10800), 2049));  // one byte past the end
  EXPECT_FALSE(r.covers(at(0x11000), 1));     // starts at the end
  EXPECT_FALSE(r.covers(at(0xffff), 2));      // starts before it
  EXPECT_FALSE(r.covers(at(0x20000), 16));    // another allocation
  EXPECT_FALSE(r.covers(at(0x10001), SIZE_MAX));  // a size that would wrap around
}

TEST(CheckedRange, AnUnknownRangeCoversNothing) {
  const Executor::CheckedRange unknown{0x10000, 0};
  EXPECT_FALSE(unknown.covers(at(0x10000), 0));
  EXPECT_FALSE(unknown.covers(at(0x10000), 1));
  EXPECT_FALSE(Executor::CheckedRange{}.covers(at(0), 0));
}
