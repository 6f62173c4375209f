#include "exec/queue_budget.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

namespace conccl::exec {

int deviceConnectionsFrom(const char* env) {
  if (env == nullptr || *env == '\0') return kDefaultDeviceConnections;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (errno != 0 || end == env || *end != '\0') return kDefaultDeviceConnections;
  return static_cast<int>(std::clamp<long>(v, 1, kMaxDeviceConnections));
}

std::optional<std::string> hardwareQueueConflict(const std::vector<int>& devices, int lanes, int connections) {
  std::map<int, int> ranksOn;
  for (int d : devices) ++ranksOn[d];
  for (const auto& [device, ranks] : ranksOn) {
    if (ranks < 2) continue;
    const int streams = ranks * streamsPerRank(lanes);
    if (streams <= connections) continue;
    return std::to_string(ranks) + " ranks of this communicator share device " + std::to_string(device) +
           " with " + std::to_string(streams) + " streams (" + std::to_string(ranks) + " x (lanes " +
           std::to_string(lanes) + " + the caller's stream)) but CUDA_DEVICE_MAX_CONNECTIONS gives only " +
           std::to_string(connections) +
           " hardware queues: streams would share queues, and a rank's wait could block the signal it waits for "
           "(a deadlock on the GPU). Set CUDA_DEVICE_MAX_CONNECTIONS to at least " + std::to_string(streams) +
           " (at most " + std::to_string(kMaxDeviceConnections) +
           ") before CUDA starts, use fewer lanes or fewer ranks per GPU, or one rank per GPU";
  }
  return std::nullopt;
}

}  // namespace conccl::exec
