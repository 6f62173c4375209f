// The two halves of a C3 scenario, a GEMM and a collective, and how each is classified: arithmetic
// intensity vs machine balance for the GEMM, bus bandwidth vs its half-peak size for the collective.
// Definitions follow /work/shared/FACTS.md ("Definitions we use"). Pure C++: no CUDA types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sched/schedule.h"

namespace conccl::c3 {

// Element types of the GEMMs in the grid. fp8 GEMMs take e4m3 inputs and write bf16 (what cuBLASLt and
// FP8 training recipes do), so their output is counted at 2 bytes per element.
enum class Dtype { kBf16, kFp16, kFp8E4M3, kFp32 };

const char* dtypeName(Dtype dtype);                      // "bf16", "fp16", "fp8e4m3", "fp32"
std::optional<Dtype> parseDtype(std::string_view name);  // accepts the names above (case-insensitive)
size_t dtypeSize(Dtype dtype);                           // bytes per element of an input
size_t gemmOutputSize(Dtype input);                      // bytes per element of the GEMM output

// D[M,N] = A[M,K] x B[K,N].
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  Dtype dtype = Dtype::kBf16;

  double flops() const;  // 2 M N K
  // The least HBM traffic the GEMM can get away with: A and B read once, D written once.
  double minimalBytes() const;
  // flops / minimalBytes (FLOP per byte); 0 for an empty GEMM.
  double arithmeticIntensity() const;
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

enum class GemmBound { kCompute, kMemory };
const char* gemmBoundName(GemmBound bound);  // "compute", "memory"

// Peak rates of one GPU. The machine balance (FLOP/B) is peak FLOP/s / HBM bytes/s. The defaults are the
// H200 datasheet (dense bf16/fp16 989.4 TFLOP/s, fp8 1978.9, tf32 494.7, HBM3e 4.8 TB/s), which gives
// the ~206 FLOP/B for bf16 that FACTS.md uses.
struct MachineProfile {
  std::string name = "H200";
  int sms = 132;
  double peakFlopsBf16 = 989.4e12;
  double peakFlopsFp8 = 1978.9e12;
  double peakFlopsFp32 = 494.7e12;  // tf32 tensor cores
  double hbmBytesPerSec = 4.8e12;

  double peakFlops(Dtype dtype) const;
  double balance(Dtype dtype) const;  // FLOP per byte

  static MachineProfile h200() { return {}; }
};

// Compute-bound iff the intensity is above the machine balance for the GEMM's dtype.
GemmBound classifyGemm(const GemmShape& gemm, const MachineProfile& machine);

// ---------------------------------------------------------------------------------------------------
// The collective kinds are the schedule layer's (one name per idea). C3 scenarios use five of them: all-gather,
// reduce-scatter, all-reduce, all-to-all and broadcast; the functions below throw concclInvalidArgument for the others.
using CollKind = sched::CollKind;

bool isC3Collective(CollKind kind);                            // one of the five above
const char* collLabel(CollKind kind);                          // "all-gather", ...: scenario files and reports
std::optional<CollKind> parseCollKind(std::string_view name);  // the five; also "allgather", "ag", "rs", "ar", "a2a"

// nccl-tests bus-bandwidth factor: busbw = algbw x factor, (n-1)/n for all-gather, reduce-scatter and
// all-to-all, 2(n-1)/n for all-reduce, 1 for broadcast. ranks < 1 is invalid (throws).
double busBwFactor(CollKind kind, int ranks);

// A collective as nccl-tests sizes it: `bytes` per rank is the output size for all-gather, the input size
// for reduce-scatter, the buffer size for all-reduce/broadcast, and the total send (= receive) size per
// rank for all-to-all.
struct CollectiveSpec {
  CollKind kind = CollKind::kAllGather;
  uint64_t bytes = 0;
  int ranks = 8;
  Dtype dtype = Dtype::kBf16;

  // Element count the nccl-style call takes (sendcount for all-gather, recvcount for reduce-scatter,
  // count for all-reduce/broadcast, per-peer count for all-to-all); rounded down so that the buffers fit.
  uint64_t callCount() const;
  friend bool operator==(const CollectiveSpec&, const CollectiveSpec&) = default;
};

double algBw(uint64_t bytes, double seconds);  // bytes / seconds (0 if seconds <= 0)
double busBw(const CollectiveSpec& coll, double seconds);

enum class CollBound { kLatency, kBandwidth };
const char* collBoundName(CollBound bound);  // "latency", "bandwidth"

// One point of a measured bus-bandwidth curve (nccl-tests output).
struct BusBwPoint {
  uint64_t bytes = 0;
  double busBw = 0;  // bytes per second
};

// The size at which the curve's bus bandwidth first reaches half of its peak, interpolated linearly in
// log(size) between the two measured points around it (curves are measured at powers of two). Points
// need not be sorted. Empty curve or zero peak: nullopt.
std::optional<double> halfPeakSize(std::vector<BusBwPoint> curve);

// Latency-bound below the half-peak size, bandwidth-bound at or above it.
CollBound classifyCollective(uint64_t bytes, double halfPeakBytes);

}  // namespace conccl::c3
