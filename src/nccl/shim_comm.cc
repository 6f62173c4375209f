#include "nccl/shim_comm.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/log_line.h"
#include "nccl/type_map.h"

namespace conccl::nccl {
namespace {

thread_local std::string tlsLastError;

bool debugIsInfo(const char* v) {
  return v != nullptr && (std::strcmp(v, "INFO") == 0 || std::strcmp(v, "TRACE") == 0 || std::strcmp(v, "info") == 0 ||
                          std::strcmp(v, "trace") == 0);
}

std::string shimDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr) return {};
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

void logLine(const char* level, const std::string& message) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  writeWholeLine(stderr, std::string(host) + ":" + std::to_string(getpid()) + ":" +
                            std::to_string(static_cast<long>(syscall(SYS_gettid))) + " NCCL " + level +
                            " conccl-shim: " + message + "\n");
}

}  // namespace

const char* threadLastError() { return tlsLastError.c_str(); }

Shim& shim() {
  static Shim* instance = [] {
    auto* s = new Shim;  // never freed: exported calls may run during static destruction
    s->env = parseShimEnv([](const char* name) { return std::getenv(name); });
    s->logInfo = debugIsInfo(std::getenv("NCCL_DEBUG")) || debugIsInfo(std::getenv("CONCCL_DEBUG"));
    s->real =
        new RealNccl(realNcclCandidates(s->env.realLib, shimDir()), reinterpret_cast<const void*>(&ncclGetVersion));
    if (!s->env.error.empty()) logLine("WARN", s->env.error + ": forwarding everything to the real NCCL");
    if (s->logInfo) {
      logLine("INFO", std::string("shim ") + (s->env.enabled ? "on" : "off") + ", real NCCL: " +
                          (s->real->available() ? s->real->path() : "none (" + s->real->error() + ")"));
    }
    return s;
  }();
  return *instance;
}

bool fromRealNccl(const void* returnAddress) {
  static const void* realBase = [] {
    void* sym = shim().real->symbol("ncclGetVersion");
    Dl_info info{};
    return sym != nullptr && dladdr(sym, &info) != 0 ? info.dli_fbase : nullptr;
  }();
  if (realBase == nullptr || returnAddress == nullptr) return false;
  Dl_info info{};
  return dladdr(returnAddress, &info) != 0 && info.dli_fbase == realBase;
}

void logInfo(const std::string& message) {
  if (shim().logInfo) logLine("INFO", message);
}

void logWarn(const std::string& message) { logLine("WARN", message); }

ncclResult_t fail(ncclComm_t comm, ncclResult_t result, const std::string& message) {
  std::string text = "conccl-shim: " + message;
  tlsLastError = text;
  if (isShimComm(comm)) comm->lastError = text;
  if (shim().logInfo) logLine("WARN", message);
  return result;
}

ncclResult_t fromConccl(ncclComm_t comm, concclResult_t result, const char* call) {
  if (result == concclSuccess) return ncclSuccess;
  const char* msg = concclGetLastError(isShimComm(comm) ? comm->conccl : nullptr);
  return fail(comm, static_cast<ncclResult_t>(toNcclResult(result)),
              std::string(call) + " on conccl: " + concclGetErrorString(result) + ": " + (msg ? msg : ""));
}

int& groupDepth() {
  thread_local int depth = 0;
  return depth;
}

uint64_t& groupEpoch() {
  thread_local uint64_t epoch = 0;
  return epoch;
}

ncclComm_t wrapComm(Path path, concclComm_t c, ncclComm_t real, const std::string& call, const std::string& reason,
                    int rank, int nranks) {
  auto* w = new ncclComm;
  w->path = path;
  w->conccl = c;
  w->real = real;
  logComm(w, call, reason, rank, nranks);
  return w;
}

void logComm(ncclComm_t w, const std::string& call, const std::string& reason, int rank, int nranks) {
  // Always printed: which path a communicator takes must never be a guess.
  int dev = -1;
  if (w->path == Path::kConccl) {
    concclCommUserRank(w->conccl, &rank);
    concclCommCount(w->conccl, &nranks);
    concclCommCuDevice(w->conccl, &dev);
  } else if (groupDepth() == 0) {
    auto r = realFn<decltype(&::ncclCommUserRank)>("ncclCommUserRank");
    auto n = realFn<decltype(&::ncclCommCount)>("ncclCommCount");
    auto d = realFn<decltype(&::ncclCommCuDevice)>("ncclCommCuDevice");
    if (r && rank < 0) r(w->real, &rank);
    if (n && nranks < 0) n(w->real, &nranks);
    if (d) d(w->real, &dev);
  }
  char buf[96];
  std::snprintf(buf, sizeof(buf), "comm %p rank %d nranks %d cudaDev %d", static_cast<void*>(w), rank, nranks, dev);
  // A communicator across hosts on the hierarchical path is "nccl" underneath (its flat communicator) but runs its
  // collectives on conccl + NCCL: say so.
  logLine("INFO", call + ": " + buf + " -> " + (w->hier != nullptr ? "hierarchical" : pathName(w->path)) + " (" +
                      reason + ")");
}

}  // namespace conccl::nccl
