#include "c3/workload.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "base/error.h"

namespace conccl::c3 {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

const char* dtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBf16:
      return "bf16";
    case Dtype::kFp16:
      return "fp16";
    case Dtype::kFp8E4M3:
      return "fp8e4m3";
    case Dtype::kFp32:
      return "fp32";
  }
  return "?";
}

std::optional<Dtype> parseDtype(std::string_view name) {
  const std::string s = lower(name);
  if (s == "bf16" || s == "bfloat16") return Dtype::kBf16;
  if (s == "fp16" || s == "half" || s == "float16") return Dtype::kFp16;
  if (s == "fp8e4m3" || s == "fp8" || s == "e4m3") return Dtype::kFp8E4M3;
  if (s == "fp32" || s == "float" || s == "float32") return Dtype::kFp32;
  return std::nullopt;
}

size_t dtypeSize(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBf16:
    case Dtype::kFp16:
      return 2;
    case Dtype::kFp8E4M3:
      return 1;
    case Dtype::kFp32:
      return 4;
  }
  return 0;
}

size_t gemmOutputSize(Dtype input) { return input == Dtype::kFp8E4M3 ? 2 : dtypeSize(input); }

double GemmShape::flops() const { return 2.0 * double(m) * double(n) * double(k); }

double GemmShape::minimalBytes() const {
  const double in = double(dtypeSize(dtype));
  return in * (double(m) * double(k) + double(k) * double(n)) + double(gemmOutputSize(dtype)) * double(m) * double(n);
}

double GemmShape::arithmeticIntensity() const {
  const double bytes = minimalBytes();
  return bytes > 0 ? flops() / bytes : 0.0;
}

const char* gemmBoundName(GemmBound bound) { return bound == GemmBound::kCompute ? "compute" : "memory"; }

double MachineProfile::peakFlops(Dtype dtype) const {
  switch (dtype) {
    case Dtype::kBf16:
    case Dtype::kFp16:
      return peakFlopsBf16;
    case Dtype::kFp8E4M3:
      return peakFlopsFp8;
    case Dtype::kFp32:
      return peakFlopsFp32;
  }
  return peakFlopsBf16;
}

double MachineProfile::balance(Dtype dtype) const {
  return hbmBytesPerSec > 0 ? peakFlops(dtype) / hbmBytesPerSec : 0.0;
}

GemmBound classifyGemm(const GemmShape& gemm, const MachineProfile& machine) {
  return gemm.arithmeticIntensity() > machine.balance(gemm.dtype) ? GemmBound::kCompute : GemmBound::kMemory;
}

// ---------------------------------------------------------------------------------------------------
namespace {
[[noreturn]] void notC3(CollKind kind) {
  CONCCL_THROW(concclInvalidArgument, std::string("C3 scenarios have no ") + sched::collKindName(kind) +
                                          " (all-gather, reduce-scatter, all-reduce, all-to-all or broadcast)");
}
}  // namespace

bool isC3Collective(CollKind kind) {
  return kind == CollKind::kAllGather || kind == CollKind::kReduceScatter || kind == CollKind::kAllReduce ||
         kind == CollKind::kAllToAll || kind == CollKind::kBroadcast;
}

const char* collLabel(CollKind kind) {
  switch (kind) {
    case CollKind::kAllGather:
      return "all-gather";
    case CollKind::kReduceScatter:
      return "reduce-scatter";
    case CollKind::kAllReduce:
      return "all-reduce";
    case CollKind::kAllToAll:
      return "all-to-all";
    case CollKind::kBroadcast:
      return "broadcast";
    default:
      notC3(kind);
  }
}

std::optional<CollKind> parseCollKind(std::string_view name) {
  std::string s = lower(name);
  std::erase(s, '-');
  std::erase(s, '_');
  if (s == "allgather" || s == "ag") return CollKind::kAllGather;
  if (s == "reducescatter" || s == "rs") return CollKind::kReduceScatter;
  if (s == "allreduce" || s == "ar") return CollKind::kAllReduce;
  if (s == "alltoall" || s == "a2a") return CollKind::kAllToAll;
  if (s == "broadcast" || s == "bcast") return CollKind::kBroadcast;
  return std::nullopt;
}

double busBwFactor(CollKind kind, int ranks) {
  CONCCL_REQUIRE(ranks >= 1, "busBwFactor: ranks must be >= 1, got " + std::to_string(ranks));
  const double n = ranks;
  switch (kind) {
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      return (n - 1) / n;
    case CollKind::kAllReduce:
      return 2 * (n - 1) / n;
    case CollKind::kBroadcast:
      return 1.0;
    default:
      notC3(kind);
  }
}

uint64_t CollectiveSpec::callCount() const {
  const uint64_t elems = bytes / dtypeSize(dtype);
  if (ranks < 1) return 0;
  switch (kind) {
    case CollKind::kAllGather:      // bytes = output = ranks x sendcount
    case CollKind::kReduceScatter:  // bytes = input = ranks x recvcount
    case CollKind::kAllToAll:       // bytes = ranks x per-peer count
      return elems / uint64_t(ranks);
    case CollKind::kAllReduce:
    case CollKind::kBroadcast:
      return elems;
    default:
      notC3(kind);
  }
}

double algBw(uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) / seconds : 0.0; }

double busBw(const CollectiveSpec& coll, double seconds) {
  return algBw(coll.bytes, seconds) * busBwFactor(coll.kind, coll.ranks);
}

const char* collBoundName(CollBound bound) { return bound == CollBound::kLatency ? "latency" : "bandwidth"; }

std::optional<double> halfPeakSize(std::vector<BusBwPoint> curve) {
  std::erase_if(curve, [](const BusBwPoint& p) { return p.bytes == 0 || !(p.busBw >= 0); });
  if (curve.empty()) return std::nullopt;
  std::sort(curve.begin(), curve.end(), [](const BusBwPoint& a, const BusBwPoint& b) { return a.bytes < b.bytes; });
  double peak = 0;
  for (const BusBwPoint& p : curve) peak = std::max(peak, p.busBw);
  if (peak <= 0) return std::nullopt;
  const double half = peak / 2;
  for (size_t i = 0; i < curve.size(); ++i) {
    if (curve[i].busBw < half) continue;
    if (i == 0) return double(curve[0].bytes);  // already past half at the smallest measured size
    // Bus bandwidth grows roughly linearly in log(size) between neighbouring powers of two.
    const BusBwPoint& lo = curve[i - 1];
    const BusBwPoint& hi = curve[i];
    const double t = (half - lo.busBw) / (hi.busBw - lo.busBw);
    return std::exp(std::log(double(lo.bytes)) + t * (std::log(double(hi.bytes)) - std::log(double(lo.bytes))));
  }
  return std::nullopt;  // unreachable: the peak point satisfies busBw >= half
}

CollBound classifyCollective(uint64_t bytes, double halfPeakBytes) {
  return double(bytes) < halfPeakBytes ? CollBound::kLatency : CollBound::kBandwidth;
}

}  // namespace conccl::c3
