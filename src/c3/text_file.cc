#include "c3/text_file.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace conccl::c3 {

std::string readTextFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  CONCCL_REQUIRE(in.good(), "cannot open " + what + " file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void writeTextFile(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path);
  CONCCL_REQUIRE(out.good(), "cannot write " + what + " file '" + path + "'");
  out << text;
  CONCCL_REQUIRE(out.good(), "error writing " + what + " file '" + path + "'");
}

}  // namespace conccl::c3
