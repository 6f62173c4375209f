#include "core/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace conccl {
namespace {

[[noreturn]] void throwErrno(const std::string& what) {
  CONCCL_THROW(concclSystemError, what + ": " + std::strerror(errno));
}

// Closes the descriptor on every path: the mapping keeps the segment alive by itself.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void* mapShared(int fd, size_t bytes, const std::string& name) {
  // Populated at once: otherwise each page of the mailbox ring faults at its first write, inside a call (a call
  // publishes into the next ring slot, about one page of it). Those faults were 1-3 us of the host time of a
  // communicator's first calls, until the ring wrapped (one H100, 2026-12-05). The segment is small (KiBs per rank).
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) throwErrno("mmap of shared memory " + name + " (" + std::to_string(bytes) + " bytes)");
  return p;
}

}  // namespace

SharedSegment SharedSegment::create(const std::string& name, size_t bytes) {
  CONCCL_ASSERT(bytes > 0 && !name.empty() && name[0] == '/');
  Fd fd{::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)};
  if (fd.fd < 0) throwErrno("shm_open(" + name + ", O_CREAT|O_EXCL)");
  SharedSegment seg;
  seg.name_ = name;
  seg.linked_ = true;  // from here on the destructor unlinks if anything below fails
  // ftruncate zero-fills: every flag and mailbox slot starts at 0 without a write.
  if (::ftruncate(fd.fd, static_cast<off_t>(bytes)) != 0) {
    throwErrno("ftruncate of shared memory " + name + " to " + std::to_string(bytes) + " bytes (is /dev/shm full?)");
  }
  seg.data_ = mapShared(fd.fd, bytes, name);
  seg.bytes_ = bytes;
  return seg;
}

SharedSegment SharedSegment::open(const std::string& name, size_t bytes) {
  Fd fd{::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600)};
  if (fd.fd < 0) throwErrno("shm_open(" + name + ")");
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throwErrno("fstat of shared memory " + name);
  if (static_cast<size_t>(st.st_size) != bytes) {
    CONCCL_THROW(concclInternalError, "shared memory " + name + " has " + std::to_string(st.st_size) +
                                          " bytes, expected " + std::to_string(bytes));
  }
  SharedSegment seg;
  seg.name_ = name;
  seg.data_ = mapShared(fd.fd, bytes, name);
  seg.bytes_ = bytes;
  return seg;
}

SharedSegment::~SharedSegment() { reset(); }

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

void SharedSegment::unlink() noexcept {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

void SharedSegment::reset() noexcept {
  unlink();
  if (data_ != nullptr) ::munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace conccl
