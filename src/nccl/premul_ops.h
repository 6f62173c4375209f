// ncclRedOpCreatePreMulSum on conccl communicators, its pure part (no CUDA): the table of created ops of one
// communicator, how the scalar is read, the host reference of the multiplication, and the pool of scratch memory
// the pre-multiplied inputs are written to.
//
// NCCL's PreMulSum is sum over ranks of (scalar * x_r): each rank multiplies its own input by the scalar, rounded
// to the datatype, before the sum (nccl.h: "pre-multiplies input values by a given scalar locally before reducing
// them with peer values via summation"). A sum followed by one multiplication rounds differently, so the shim does
// what NCCL does: scalar * input into scratch memory on the caller's stream, then conccl's sum of the scratch.
#ifndef CONCCL_NCCL_PREMUL_OPS_H_
#define CONCCL_NCCL_PREMUL_OPS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
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

// The op as NCCL records it (enqueue.cc, ncclRedOpCreatePreMulSum): a host scalar is the first
// ncclTypeBytes(type) bytes at `scalar`, copied now, whatever C type the caller meant (PyTorch passes a float for
// bf16: NCCL, and so the shim, then read that float's two low bytes as the bf16 scalar); a device scalar is the
// pointer, dereferenced as one value of the type each time a collective runs.
PreMulOp makePreMulOp(int ncclType, const void* scalar, bool onDevice);

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

// IEEE binary16 / bfloat16 bits <-> double, and double -> bits rounded to nearest even (subnormals, overflow to
// infinity; a NaN becomes the canonical 0x7fff). Host references of the device arithmetic.
double halfToDouble(uint16_t bits);
double bfloat16ToDouble(uint16_t bits);
uint16_t doubleToHalf(double v);
uint16_t doubleToBfloat16(double v);

// out[i] = scalar * in[i] rounded to the datatype, on the CPU (conccl's host backend, used by the CPU tests, and the
// reference of the GPU kernel): the integer types wrap like NCCL's device code; float / double are one IEEE
// multiplication; fp16 / bf16 are the correctly rounded product (the product of two fp16 or bf16 values is exact in
// double), which is what NCCL's __hmul computes. false for fp8 and invalid types.
bool preMultiplyOnHost(void* out, const void* in, size_t count, int ncclType, uint64_t scalarBits);

// What the scratch pool needs from the device: CUDA in the shim (events as fences, cudaMalloc, user objects of the
// graph being captured), malloc on conccl's host backend, a fake in the CPU tests. Streams and fences are opaque.
class ScratchDevice {
 public:
  virtual ~ScratchDevice() = default;
  virtual void* alloc(size_t bytes) = 0;  // nullptr on failure
  virtual void free(void* block) = 0;
  virtual void* createFence() = 0;  // nullptr on failure
  virtual void destroyFence(void* fence) = 0;
  // Marks the point on `stream` after the work enqueued so far.
  virtual bool recordFence(void* fence, const void* stream) = 0;
  // Whether the work before the fence's last record has completed (never blocks).
  virtual bool fenceDone(void* fence) = 0;
  // Makes work enqueued on `stream` from now on wait for the fence (a stream-ordered wait, no host wait).
  virtual bool waitFence(const void* stream, void* fence) = 0;
  // Ties a block to the graph being captured on `stream`: sets *released once that graph and every executable
  // graph made from it are destroyed and their launches have completed. false: it could not (the block is then
  // kept until the pool is destroyed).
  virtual bool attachToCapture(const void* stream, std::shared_ptr<std::atomic<bool>> released) = 0;
};

// A region of scratch for one call: `ptr` (nullptr on failure, `error` then says why) and the block to release.
struct ScratchGrant {
  void* ptr = nullptr;
  int block = -1;
  std::string error;
};

// The scratch memory of one communicator: blocks reused across calls, bounded in total. Rules, each for a reason:
//   - a block serves one call at a time: it is held from acquire() until release(), which the shim calls once the
//     call's collective is enqueued (inside a group: at the group's end, since the collectives launch then, after
//     every pre-multiplication of the group; so calls of one group never share a block);
//   - release() records a fence on the block's stream; the block is then reused at once on the same stream (stream
//     order protects it), on another stream once the fence completed, or, when nothing else fits under the bound, on
//     another stream after a stream-ordered wait on the fence;
//   - a call being captured into a CUDA graph gets a block no other call will touch while the graph exists (a graph
//     may be replayed at any time, on any stream, concurrently with eager calls): a fresh one, or an idle one whose
//     fence completed. The block is tied to the captured graph (ScratchDevice::attachToCapture) and comes back to
//     the pool when CUDA releases the graph's references (graph and executable graphs destroyed, launches done);
//     if it cannot be tied, it stays the graph's until the pool is destroyed;
//   - the total never exceeds maxBytes: a request that cannot be served under it (after reusing, reclaiming blocks
//     released by graphs and freeing idle completed blocks too small for it) fails with a message naming the limit.
//     Nothing is freed while work may use it, and nothing is freed in the steady state (cudaFree synchronises).
// Block sizes are rounded up to one of eight steps per power of two (at most 12.5% slack), at least kMinBlock.
// Not thread-safe: the shim holds the communicator's PreMulSum mutex around every call.
class ScratchPool {
 public:
  ScratchPool(std::unique_ptr<ScratchDevice> device, size_t maxBytes);
  ~ScratchPool();  // frees every block (not after forget())
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  static constexpr size_t kMinBlock = 64 << 10;
  static size_t blockSize(size_t bytes);

  // groupEpoch: 0 outside groups, else an id of the enclosing outermost group (releaseGroup releases its blocks).
  ScratchGrant acquire(const void* stream, size_t bytes, bool capturing, uint64_t groupEpoch);
  void release(int block);
  void releaseGroup(uint64_t groupEpoch);
  // After an abort: drop every block without freeing it (work may still be in flight on a broken GPU queue).
  void forget();

  size_t maxBytes() const { return maxBytes_; }
  size_t bytesAllocated() const { return allocated_; }
  size_t blocks() const;
  size_t graphBlocks() const;
  size_t heldBlocks() const;

 private:
  enum class State { kIdle, kHeld, kGraph, kGone };
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    State state = State::kIdle;
    const void* stream = nullptr;  // stream of the last eager use
    void* fence = nullptr;
    bool fenceRecorded = false;  // false: no eager work ever used it, or it came back from a graph
    bool fenceOk = true;         // false: the last record failed; only its own stream may reuse it
    uint64_t epoch = 0;
    std::shared_ptr<std::atomic<bool>> graphReleased;
  };
  bool completed(Block& b);
  void reclaimGraphBlocks();
  int findIdle(size_t need, bool requireCompleted, const void* stream, bool sameStreamOk);
  int allocate(size_t need, std::string* error);
  void freeBlock(Block& b);
  std::string limitMessage(size_t need) const;

  std::unique_ptr<ScratchDevice> device_;
  size_t maxBytes_;
  std::vector<Block> blocks_;
  size_t allocated_ = 0;
};

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_PREMUL_OPS_H_
