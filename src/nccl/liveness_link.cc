#include "nccl/liveness_link.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace conccl::nccl {

namespace watch_wire {

void encode(const Frame& f, uint8_t* out) {
  std::memcpy(out, &kMagic, 8);
  std::memcpy(out + 8, &f.kind, 4);
  std::memcpy(out + 12, &f.rank, 4);
}

bool decode(const uint8_t* in, Frame* f) {
  uint64_t magic = 0;
  std::memcpy(&magic, in, 8);
  if (magic != kMagic) return false;
  std::memcpy(&f->kind, in + 8, 4);
  std::memcpy(&f->rank, in + 12, 4);
  return true;
}

}  // namespace watch_wire

LivenessLink::LivenessLink(int fd) : fd_(fd) {}

LivenessLink::~LivenessLink() {
  std::lock_guard<std::mutex> lock(mutex_);
  closeLocked();
}

void LivenessLink::closeLocked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int LivenessLink::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (fd_ >= 0 && dead_ == kAlive && !ended_) {
    uint8_t buf[watch_wire::kFrameBytes];
    const size_t want = watch_wire::kFrameBytes - partial_.size();
    const ssize_t r = ::recv(fd_, buf, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // nothing new
    if (r <= 0) {
      // Closed (or reset) without a frame: the root's process ended.
      dead_ = kRootLost;
      closeLocked();
      break;
    }
    partial_.insert(partial_.end(), buf, buf + r);
    if (partial_.size() < watch_wire::kFrameBytes) continue;
    watch_wire::Frame f;
    const bool ok = watch_wire::decode(partial_.data(), &f);
    partial_.clear();
    if (ok && f.kind == watch_wire::kDied && f.rank >= 0) {
      dead_ = f.rank;
    } else {
      // kEnded, or bytes that are no frame (a root of another version): stop watching rather than guess.
      ended_ = true;
    }
    closeLocked();
  }
  return dead_;
}

bool LivenessLink::ended() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

void LivenessLink::bye() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ >= 0 && dead_ == kAlive && !ended_) {
    uint8_t frame[watch_wire::kFrameBytes];
    watch_wire::encode({watch_wire::kBye, -1}, frame);
    // One small frame on an idle connection: the socket buffer takes it at once; if not, closing says as much.
    (void)::send(fd_, frame, sizeof(frame), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ended_ = true;
  closeLocked();
}

std::string LivenessLink::describe(int dead) const {
  if (dead == kRootLost) {
    return "the connection to the rendezvous root closed without a word: the process that made the communicator's id "
           "(ncclGetUniqueId) ended";
  }
  return "rank " + std::to_string(dead) + "'s process ended without destroying or aborting the communicator";
}

}  // namespace conccl::nccl
