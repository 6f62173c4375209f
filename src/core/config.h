// The communicator configuration after the caller's struct, environment variables and defaults have been
// merged (see the table in conccl.h). Every later layer reads this, never the environment.
#pragma once

#include <conccl/conccl.h>

#include <cstddef>

namespace conccl {

struct Config {
  concclBackend_t backend = concclBackendHost;
  concclEngine_t engine = concclEngineAuto;
  int reduceCtas = 0;  // 0: auto, from the size of each reduction (exec/cuda/copy_engine_program.h)
  int lanes = 2;
  size_t scratchBytes = size_t{64} << 20;
  int timeoutMs = 300000;
  size_t smallMessageBytes = size_t{64} << 10;
  // Tuning knobs without a config field (environment only; README table): programs that copy at most
  // singleStreamBytes run every op on the caller's stream; reduction pipelines cut a share into chunks of at
  // least minChunkBytes (and at most the scratch budget allows), aiming at kTargetChunks per share.
  size_t singleStreamBytes = size_t{256} << 10;
  size_t minChunkBytes = size_t{512} << 10;
};

// Merges `user` (may be null), the CONCCL_* environment variables and the defaults. `cudaAvailable`
// decides the default backend. Throws Error(concclInvalidArgument) for a bad struct or value, naming the
// field or variable.
Config resolveConfig(const concclConfig_t* user, bool cudaAvailable);

// Writes `config` into the public struct (fields of the caller's struct size only).
void exportConfig(const Config& config, concclConfig_t* out);

}  // namespace conccl
