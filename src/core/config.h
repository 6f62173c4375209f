// How a communicator's Config is made from the caller's struct, the environment and the defaults, and written back
// into the public struct. The struct itself is base/config.h (the executors read it).
#pragma once

#include <conccl/conccl.h>

#include <functional>

#include "base/config.h"

namespace conccl {

// Merges `user` (may be null), the CONCCL_* environment variables and the defaults. `cudaAvailable`
// decides the default backend. Throws Error(concclInvalidArgument) for a bad struct or value, naming the
// field or variable.
Config resolveConfig(const concclConfig_t* user, bool cudaAvailable);

// Tests only: while an instance lives, every Config that resolveConfig returns is passed to `edit` last (after the
// environment and the caller's struct), so that a test can set the test-only switches above for the communicators
// it creates through the public API. One at a time per process (a second one replaces the first until it ends); create
// it before the communicators and keep it until they exist. Not for library code.
class ConfigTestHook {
 public:
  explicit ConfigTestHook(std::function<void(Config&)> edit);
  ~ConfigTestHook();
  ConfigTestHook(const ConfigTestHook&) = delete;
  ConfigTestHook& operator=(const ConfigTestHook&) = delete;

 private:
  std::function<void(Config&)> previous_;
};

// Writes `config` into the public struct (fields of the caller's struct size only).
void exportConfig(const Config& config, concclConfig_t* out);

}  // namespace conccl
