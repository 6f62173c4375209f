// bytesText (base/bytes_text.h): the exact value in the largest binary unit that divides it.
#include "base/bytes_text.h"

#include <gtest/gtest.h>

namespace conccl {
namespace {

TEST(BytesText, LargestUnitThatDividesExactly) {
  EXPECT_EQ(bytesText(0), "0 B");
  EXPECT_EQ(bytesText(4), "4 B");
  EXPECT_EQ(bytesText(699048), "699048 B") << "not a whole KiB";
  EXPECT_EQ(bytesText(64 << 10), "64 KiB");
  EXPECT_EQ(bytesText(1536 << 10), "1536 KiB") << "1.5 MiB stays exact";
  EXPECT_EQ(bytesText(size_t{64} << 20), "64 MiB");
  EXPECT_EQ(bytesText(size_t{1} << 30), "1 GiB");
  EXPECT_EQ(bytesText(size_t{4096} << 30), "4096 GiB") << "no unit above GiB";
}

}  // namespace
}  // namespace conccl
