#include "base/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unistd.h>

namespace conccl {
namespace {

struct LogSink {
  LogLevel level = LogLevel::kWarn;
  FILE* file = stderr;
  std::mutex mutex;

  LogSink() {
    if (const char* env = std::getenv("CONCCL_DEBUG")) {
      if (strcasecmp(env, "WARN") == 0) level = LogLevel::kWarn;
      else if (strcasecmp(env, "INFO") == 0) level = LogLevel::kInfo;
      else if (strcasecmp(env, "TRACE") == 0) level = LogLevel::kTrace;
      else level = LogLevel::kNone;
    }
    if (const char* path = std::getenv("CONCCL_DEBUG_FILE")) {
      // "%p" expands to the process id so that several processes can log side by side.
      std::string name(path);
      if (auto pos = name.find("%p"); pos != std::string::npos) name.replace(pos, 2, std::to_string(getpid()));
      if (FILE* f = std::fopen(name.c_str(), "a")) file = f;
    }
  }
};

LogSink& sink() {
  static LogSink instance;  // never destroyed before other statics that may log: intentionally leaked file
  return instance;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

LogLevel logLevel() { return sink().level; }

void logMessage(LogLevel level, int rank, int device, const std::string& message) {
  LogSink& s = sink();
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  std::string r = rank >= 0 ? std::to_string(rank) : "-";
  std::string d = device >= 0 ? std::to_string(device) : "-";
  std::lock_guard<std::mutex> lock(s.mutex);
  std::fprintf(s.file, "%s:%d [rank %s dev %s] CONCCL %s %s\n", host, static_cast<int>(getpid()), r.c_str(), d.c_str(),
               levelName(level), message.c_str());
  std::fflush(s.file);
}

std::string addressText(const void* p) {
  if (p == nullptr) return "null";
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

}  // namespace conccl
