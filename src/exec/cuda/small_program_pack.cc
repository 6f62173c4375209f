// See small_program_pack.h.
#include "exec/cuda/small_program_pack.h"

#include <variant>

#include "base/error.h"

namespace conccl::exec {
namespace {

uint32_t* flagPointer(const std::vector<CUdeviceptr>& flagTable, int rank, int slot) {
  return reinterpret_cast<uint32_t*>(flagTable[static_cast<size_t>(rank)] + sizeof(uint32_t) * static_cast<size_t>(slot));
}

}  // namespace

void packSmallProgram(const sched::RankProgram& program, int rank, const LocationResolver& resolve,
                      const std::vector<CUdeviceptr>& flagTable, SmallProgram& out) {
  out.numOps = 0;
  out.dtype = concclUint8;
  out.op = concclSum;
  int pointers = 0;
  for (const sched::Op& op : program.ops) {
    if (const auto* copy = std::get_if<sched::Copy>(&op); copy != nullptr && copy->bytes == 0) continue;
    if (const auto* reduce = std::get_if<sched::Reduce>(&op); reduce != nullptr && reduce->count == 0) continue;
    if (std::holds_alternative<sched::Ready>(op)) continue;  // a mark: the kernel's end is the mark of every block
    CONCCL_ASSERT(out.numOps < kSmallMaxOps);  // the caller checked fitsSmallProgram
    SmallOp& small = out.ops[out.numOps++];
    small = SmallOp{};
    if (const auto* copy = std::get_if<sched::Copy>(&op)) {
      small.kind = kSmallCopy;
      small.src = resolve(copy->src);
      small.dst = resolve(copy->dst);
      small.size = copy->bytes;
    } else if (const auto* signal = std::get_if<sched::Signal>(&op)) {
      small.kind = kSmallSignal;
      small.flag = flagPointer(flagTable, signal->peer, signal->slot);
    } else if (const auto* wait = std::get_if<sched::Wait>(&op)) {
      small.kind = kSmallWait;
      small.flag = flagPointer(flagTable, rank, wait->slot);
    } else if (const auto* reduce = std::get_if<sched::Reduce>(&op)) {
      CONCCL_ASSERT(pointers + static_cast<int>(reduce->inputs.size()) <= kSmallMaxPointers);
      small.kind = kSmallReduce;
      small.inputs = static_cast<uint8_t>(reduce->inputs.size());
      small.firstInput = static_cast<uint16_t>(pointers);
      for (const auto& in : reduce->inputs) out.pointers[pointers++] = resolve(in);
      small.dst = resolve(reduce->output);
      small.size = reduce->count;
      out.dtype = reduce->dtype;
      out.op = reduce->op;
    }
  }
}

}  // namespace conccl::exec
