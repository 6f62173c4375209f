// The start gate of conccl-c3: streams and timing events for ranks on `rankDevices`, and one gated run of a
// GEMM, a collective, or both.
//
// Every run starts all streams together: a one-thread gate kernel on each device spins on a host-mapped flag,
// the start event is recorded behind it, every GEMM and collective stream waits for that event, and the host
// raises the flag only after everything is enqueued. So launch costs and host-side skew are not part of T_g,
// T_c or T_c3, and "from the common start" (FACTS.md) holds across devices up to the few microseconds the
// gates need to see the flag.
#pragma once

#include <limits>
#include <vector>

#include "collectives.h"
#include "exec/cuda/raii.h"
#include "gemm.h"

namespace conccl::c3 {

class Harness {
 public:
  struct Sample {
    double gemm = std::numeric_limits<double>::quiet_NaN();   // start -> last GEMM done
    double coll = std::numeric_limits<double>::quiet_NaN();   // start -> last rank's collective done
    double total = std::numeric_limits<double>::quiet_NaN();  // start -> both done
  };
  // kSerial: the collective, then the GEMMs (every GEMM stream waits for every rank's collective): `serial`
  // as FACTS.md defines it, NCCL's collective then the GEMM.
  enum class Mode { kGemm, kColl, kBoth, kSerial };

  // Devices may repeat (ranks sharing a GPU).
  explicit Harness(const std::vector<int>& rankDevices);
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  const std::vector<int>& devices() const { return devices_; }  // distinct, in first-seen order

  // `gemms`: one per distinct device (in devices() order), or empty for kColl. `highPriority`: the collective
  // runs on greatest-priority streams and is launched before the GEMMs (nccl+SP).
  Sample once(Mode mode, const std::vector<const Gemm*>& gemms, Collective* coll, bool highPriority);

  // `warmup` untimed runs, then the median of `iters` runs, per field.
  Sample median(Mode mode, const std::vector<const Gemm*>& gemms, Collective* coll, bool highPriority, int iters,
                int warmup);

  // Runs the work once without the gate so that lazy initialisation (NCCL connections, cuBLASLt kernel
  // loading) does not happen while a gate kernel spins.
  void prime(const std::vector<const Gemm*>& gemms, Collective* coll);

 private:
  size_t deviceIndex(int device) const;

  std::vector<int> rankDevices_;
  std::vector<int> devices_;
  exec::PinnedBuffer flagMemory_;
  volatile int* flag_ = nullptr;
  std::vector<exec::Stream> gate_, gemm_, coll_, collHigh_;
  std::vector<exec::Event> start_, gemmEnd_, collEnd_;
};

}  // namespace conccl::c3
