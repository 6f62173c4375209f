// A byte count as text for log lines and messages: in the largest binary unit that divides it exactly ("64 MiB",
// "699048 B"), so that the text is the exact value.
#pragma once

#include <cstddef>
#include <iterator>
#include <string>

namespace conccl {

inline std::string bytesText(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  size_t unit = 0;
  while (unit + 1 < std::size(units) && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

}  // namespace conccl
