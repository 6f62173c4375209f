// Whole-file text I/O for the C3 layer's JSON files (scenarios, results, calibration), with errors that name
// the file: conccl::Error(concclInvalidArgument) "cannot open <what> file '<path>'" and the like.
#pragma once

#include <string>

namespace conccl::c3 {

std::string readTextFile(const std::string& path, const std::string& what);
void writeTextFile(const std::string& path, const std::string& text, const std::string& what);

}  // namespace conccl::c3
