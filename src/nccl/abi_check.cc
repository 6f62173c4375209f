// nccl_abi.h's values against the real nccl.h: the pure layer is compiled without nccl.h, so this is where a
// drift between the two would show (as a build failure of the shim).
#include <nccl.h>

#include "nccl/nccl_abi.h"

namespace conccl::nccl {

static_assert(NCCL_MAJOR == 2 && NCCL_MINOR == 28, "the shim implements NCCL 2.28's API");
// Any 2.28 header: NCCL keeps its ABI within a minor version (a patch release adds no API), so the drop-in built
// against 2.28.3 serves a torch that loads 2.28.9, as conccl run's ABI check (python/conccl/abi.py) allows.
static_assert(NCCL_VERSION_CODE / 100 == kNcclVersionCode / 100);
static_assert(NCCL_UNIQUE_ID_BYTES == kUniqueIdBytes);

static_assert(ncclSuccess == kSuccess && ncclUnhandledCudaError == kUnhandledCudaError &&
              ncclSystemError == kSystemError && ncclInternalError == kInternalError &&
              ncclInvalidArgument == kInvalidArgument && ncclInvalidUsage == kInvalidUsage &&
              ncclRemoteError == kRemoteError && ncclInProgress == kInProgress);

static_assert(ncclInt8 == kInt8 && ncclUint8 == kUint8 && ncclInt32 == kInt32 && ncclUint32 == kUint32 &&
              ncclInt64 == kInt64 && ncclUint64 == kUint64 && ncclFloat16 == kFloat16 && ncclFloat32 == kFloat32 &&
              ncclFloat64 == kFloat64 && ncclBfloat16 == kBfloat16 && ncclFloat8e4m3 == kFloat8e4m3 &&
              ncclFloat8e5m2 == kFloat8e5m2 && ncclNumTypes == kNumTypes);

static_assert(ncclSum == kSum && ncclProd == kProd && ncclMax == kMax && ncclMin == kMin && ncclAvg == kAvg &&
              ncclNumOps == kNumOps);

}  // namespace conccl::nccl
