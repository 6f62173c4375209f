// A POSIX shared-memory segment (shm_open + mmap) shared by the processes of one communicator.
//
// Lifetime rule that keeps /dev/shm clean: the creator unlinks the name as soon as every process has mapped
// it (ProcessClique does this during initialisation), so the memory lives exactly as long as some process
// maps it, and nothing named is left behind by a process that dies later. A creator that fails before that
// point unlinks in its destructor.
#pragma once

#include <cstddef>
#include <string>

namespace conccl {

class SharedSegment {
 public:
  SharedSegment() = default;
  // Creates `name` ("/conccl-...") with `bytes` zeroed bytes; fails if it exists. Throws concclSystemError.
  static SharedSegment create(const std::string& name, size_t bytes);
  // Maps an existing segment, which must have exactly `bytes` bytes. Throws concclSystemError.
  static SharedSegment open(const std::string& name, size_t bytes);
  ~SharedSegment();
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid). Idempotent; never throws.
  void unlink() noexcept;

 private:
  void reset() noexcept;
  std::string name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;  // this object created the name and has not unlinked it yet
};

}  // namespace conccl
