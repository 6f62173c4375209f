// Logging to stderr (or CONCCL_DEBUG_FILE), never stdout. Level from CONCCL_DEBUG=WARN|INFO|TRACE
// (default WARN); anything else (e.g. NONE) silences it. Each line names the rank and device when known.
#pragma once

#include <string>

namespace conccl {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel logLevel();
// rank/device < 0: not known (printed as '-').
void logMessage(LogLevel level, int rank, int device, const std::string& message);
// "0x7f..." (or "null"): names a stream, event or buffer in a log line.
std::string addressText(const void* p);

}  // namespace conccl

#define CONCCL_LOG(level, rank, device, message)                                              \
  do {                                                                                        \
    if (::conccl::logLevel() >= (level)) ::conccl::logMessage((level), (rank), (device), (message)); \
  } while (0)
#define CONCCL_WARN(rank, device, message) CONCCL_LOG(::conccl::LogLevel::kWarn, rank, device, message)
#define CONCCL_INFO(rank, device, message) CONCCL_LOG(::conccl::LogLevel::kInfo, rank, device, message)
#define CONCCL_TRACE(rank, device, message) CONCCL_LOG(::conccl::LogLevel::kTrace, rank, device, message)
