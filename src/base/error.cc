#include "base/error.h"

#include <cstring>

namespace conccl::detail {

std::string formatLocation(const char* file, int line) {
  // Keep the path from "src/" on: stable across build directories and short in messages.
  const char* shown = std::strstr(file, "src/");
  return " (" + std::string(shown != nullptr ? shown : file) + ":" + std::to_string(line) + ")";
}

}  // namespace conccl::detail
