// Whether a communicator's streams fit the GPU's hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS), decided as a
// pure function so that it is unit-tested on the CPU.
//
// Why it matters: a Wait (cuStreamWaitValue32) is a semaphore acquire that blocks the hardware queue its stream is
// mapped to. CUDA maps a process's streams of one device onto CUDA_DEVICE_MAX_CONNECTIONS queues (default 8, at
// most 32). When several ranks of one communicator share a GPU and their streams outnumber the queues, two ranks'
// streams share a queue, and a rank's Wait can sit in front of the very Signal it waits for: a deadlock on the GPU
// that CUDA cannot see and no host timeout ends (issue 13; with CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM and
// TransformerEngine set it, ranks sharing a GPU always deadlock). Ranks on distinct GPUs never share a queue, so one
// rank per GPU works with any setting.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace conccl::exec {

// CUDA's default when CUDA_DEVICE_MAX_CONNECTIONS is not set, and its maximum.
constexpr int kDefaultDeviceConnections = 8;
constexpr int kMaxDeviceConnections = 32;

// The number of hardware queues CUDA uses for `env` (the value of CUDA_DEVICE_MAX_CONNECTIONS, or null when
// unset): the default when unset or not a number, clamped to [1, 32] as CUDA does.
int deviceConnectionsFrom(const char* env);

// Streams one rank uses on its GPU: the caller's stream plus `lanes` copy lanes.
inline int streamsPerRank(int lanes) { return lanes + 1; }

// For a communicator whose ranks run on `devices` (one entry per rank of this process) with `lanes` copy lanes:
// the reason it can deadlock with `connections` hardware queues per device, or nullopt when it cannot.
// It can when some device hosts two or more ranks and ranks x (lanes + 1) exceeds `connections`.
std::optional<std::string> hardwareQueueConflict(const std::vector<int>& devices, int lanes, int connections);

}  // namespace conccl::exec
