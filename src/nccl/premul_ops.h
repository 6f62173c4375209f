// ncclRedOpCreatePreMulSum on conccl communicators, its pure part (no CUDA): the table of created ops of one
// communicator, and the scratch memory the pre-multiplied inputs are written to.
//
// NCCL's PreMulSum is sum over ranks of (scalar * x_r): each rank multiplies its own input by the scalar, rounded
// to the datatype, before the sum (nccl.h: "pre-multiplies input values by a given scalar locally before reducing
// them with peer values via summation"). A sum followed by one multiplication rounds differently, so the shim does
// what NCCL does: scalar * input into scratch memory on the caller's stream, then conccl's sum of the scratch.
#ifndef CONCCL_NCCL_PREMUL_OPS_H_
#define CONCCL_NCCL_PREMUL_OPS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace conccl::nccl {

// One created op. scalarBits: the value of a host scalar (ncclScalarHostImmediate, read at creation), the
// datatype's bytes in the low bytes; devScalar: where a device scalar (ncclScalarDevice) is read when the
// collective runs on the GPU.
struct PreMulOp {
  int ncclType = -1;
  bool onDevice = false;
  uint64_t scalarBits = 0;
  const void* devScalar = nullptr;
};

// Bytes of one element of an NCCL datatype (0 for an invalid one).
size_t ncclTypeBytes(int ncclType);

// Ops are handed out as ncclNumOps + index (NCCL does the same: ncclRedOp_t values above the built-in ones), per
// communicator; a destroyed op's index is reused.
class PreMulOpTable {
 public:
  int create(const PreMulOp& op);
  std::optional<PreMulOp> find(int ncclOp) const;
  bool destroy(int ncclOp);
  size_t live() const;

 private:
  std::vector<std::optional<PreMulOp>> ops_;
};

// Scratch memory for the pre-multiplied inputs of one communicator. Rules, each for a reason:
//   - one arena per stream: calls on different streams may run at the same time, so they never share memory;
//     calls on one stream run in order and conccl lets a call's input be overwritten by work enqueued after it;
//   - inside a group (groupEpoch != 0) the calls are launched together at the group's end, after all of their
//     pre-multiplications ran, so each call of the group gets its own region (bump allocation, reset by the next
//     call outside that group);
//   - a call being captured into a CUDA graph gets memory of its own, kept until the communicator is destroyed:
//     the graph may be replayed at any time, on any stream, concurrently with eager calls;
//   - growing never frees the old block (work already enqueued may still read it, and cudaFree would synchronise
//     the device): old blocks are kept until the communicator is destroyed; growth is geometric, so they hold less
//     than the current block.
// alloc returns nullptr on failure; free is called for every block at destruction (not after forget()).
class ScratchArenas {
 public:
  using Alloc = std::function<void*(size_t bytes)>;
  using Free = std::function<void(void* block)>;
  ScratchArenas(Alloc alloc, Free free) : alloc_(std::move(alloc)), free_(std::move(free)) {}
  ~ScratchArenas();
  ScratchArenas(const ScratchArenas&) = delete;
  ScratchArenas& operator=(const ScratchArenas&) = delete;

  static constexpr size_t kAlign = 256;
  static constexpr size_t kMinBlock = 1 << 20;

  // A region of at least `bytes` that no other enqueued call of this communicator uses; nullptr if the
  // allocation failed. groupEpoch: 0 outside groups, else an id unique to the enclosing outermost group.
  void* acquire(const void* stream, size_t bytes, uint64_t groupEpoch, bool capturing);
  // After an abort: drop every block without freeing it (work may still be in flight on a broken GPU queue).
  void forget();
  size_t bytesAllocated() const { return allocated_; }
  size_t blocks() const { return owned_.size(); }

 private:
  struct Arena {
    char* base = nullptr;
    size_t capacity = 0;
    size_t used = 0;
    uint64_t epoch = 0;
  };
  Alloc alloc_;
  Free free_;
  std::map<const void*, Arena> arenas_;
  std::vector<void*> owned_;
  size_t allocated_ = 0;
};

// out[i] = scalar * in[i] rounded to the datatype, on the CPU (conccl's host backend, used by the CPU tests):
// float, double and the integer types (integers wrap like NCCL's device code). false for fp16 / bf16 / fp8 (the
// host backend's buffers in these tests never need them; the GPU path does them in premul_scale.cu).
bool preMultiplyOnHost(void* out, const void* in, size_t count, int ncclType, uint64_t scalarBits);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_PREMUL_OPS_H_
