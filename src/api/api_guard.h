// The C boundary: every public function runs its body through apiCall, which turns exceptions into result
// codes and records the message for concclGetLastError. Nothing escapes into the caller's C code.
#pragma once

#include <conccl/conccl.h>

#include <string>

#include "base/error.h"
#include "base/host_laps.h"
#include "core/comm.h"

namespace conccl::api {

// Records `message` as the last error of the calling thread and (if live) of `comm`, and logs it at WARN.
void recordError(concclComm* comm, concclResult_t code, const std::string& message);

// Throws concclInvalidUsage / concclInvalidArgument for a null or dead handle.
void requireLiveComm(const concclComm* comm);

template <typename Body>
concclResult_t apiCall(concclComm* comm, const char* api, Body&& body) {
  // Held until the call returns: a destroy or abort on another thread waits for it (core/comm.h, CommUse).
  CommUse use(comm);
  // CONCCL_DEBUG=TRACE: where this call's host time goes (base/host_laps.h; the launch logs it).
  struct LapsScope {
    bool opened = HostLaps::start();
    ~LapsScope() {
      if (opened) HostLaps::drop();
    }
  } laps;
  try {
    body();
    return concclSuccess;
  } catch (const Error& e) {
    std::string message = std::string(api) + ": " + e.message();
    recordError(comm, e.code(), message);
    return e.code();
  } catch (const std::bad_alloc&) {
    recordError(comm, concclSystemError, std::string(api) + ": out of host memory");
    return concclSystemError;
  } catch (const std::exception& e) {
    recordError(comm, concclInternalError, std::string(api) + ": unexpected exception: " + e.what());
    return concclInternalError;
  } catch (...) {
    recordError(comm, concclInternalError, std::string(api) + ": unknown exception");
    return concclInternalError;
  }
}

}  // namespace conccl::api
