// Host reference for the bench's correctness check: seeded input generation, reductions over ranks and
// the element-wise comparison that counts the #wrong column. No CUDA types.
#ifndef CONCCL_TOOLS_BENCH_REFERENCE_H_
#define CONCCL_TOOLS_BENCH_REFERENCE_H_

#include <conccl/conccl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace conccl::bench {

using Bytes = std::vector<unsigned char>;

// Fills `count` elements of `type` with fresh pseudo-random data from `seed` (never all zeros). For
// reductions the values are kept in a range where the result over `nranks` inputs is well defined:
// integer sums and averages do not overflow, floating products stay near 1. `op` < 0: data movement only,
// any bit pattern (including fp8) is fine.
Bytes RandomElements(concclDataType_t type, size_t count, uint64_t seed, int op, int nranks);

// Seed of rank `rank`'s input for one test case; distinct per rank, size, collective and type.
uint64_t InputSeed(uint64_t base_seed, int rank, size_t bytes, int coll, int type, int op);

// The reduction over ranks of element i of inputs[r] + in_offset, written to out[i] for i < count.
// Floating types: accumulated in double and rounded once. Also writes, per element, the magnitude the
// tolerance scales with (sum of |x| for sum/avg, |product| for prod) to `scale` when it is not null.
void ReduceRanks(concclDataType_t type, concclRedOp_t op, const std::vector<const unsigned char*>& inputs,
                 size_t in_offset, size_t count, unsigned char* out, std::vector<double>* scale);

// Number of elements of `got` that differ from `expected`. Integer types, data movement and max/min:
// exact (bitwise). Floating sum/prod/avg: |got - expected| <= (nranks + 1) * u * scale[i] + u * |expected|
// with u the unit roundoff of the type (different summation orders and fp32 accumulation on the device).
size_t CountWrong(concclDataType_t type, int op, int nranks, const unsigned char* got, const unsigned char* expected,
                  size_t count, const std::vector<double>* scale);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_REFERENCE_H_
