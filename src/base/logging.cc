#include "base/logging.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unistd.h>

#include "base/log_line.h"

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
  std::string line = std::string(host) + ":" + std::to_string(getpid()) + " [rank " + r + " dev " + d + "] CONCCL " +
                     levelName(level) + " " + message + "\n";
  std::lock_guard<std::mutex> lock(s.mutex);
  writeWholeLine(s.file, line);
}

void writeWholeLine(FILE* file, const std::string& line) {
  std::fflush(file);  // whatever the stream still buffers goes first, so lines keep their order
  int fd = fileno(file);
  size_t done = 0;
  while (fd >= 0 && done < line.size()) {
    ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a log line that cannot be written is dropped: logging never fails a call
    done += static_cast<size_t>(n);
  }
  if (fd < 0) std::fputs(line.c_str(), file);
}

std::string addressText(const void* p) {
  if (p == nullptr) return "null";
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

}  // namespace conccl
