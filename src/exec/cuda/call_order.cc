// The calls of a rank run on the GPU in the order they were made, whatever streams they were made on (NCCL's rule,
// which PyTorch relies on: FSDP2 all-gathers on one stream and reduce-scatters on another). Every call of a rank uses
// the rank's one set of flags and its scratch, so two calls running at once would take each other's signals and
// overwrite each other's chunks: a GPU deadlock (FSDP2 through the NCCL drop-in, 2026-12-01) or wrong data.
// Eager calls are ordered through the rank's done marker; calls captured into one graph through the graph's edges.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/driver_api.h"

namespace conccl::exec {

void CudaExecutor::orderAfterPreviousCall(RankState& s, cudaStream_t main) {
  // Calls on the same stream are ordered by the stream; a call on another stream waits for the done marker of the
  // previous launch (GEQ is a wrap-safe comparison). One memory operation, only when the stream changes.
  if (!config_.callOrder) return;  // a test reproducing what this prevents (Config::callOrder)
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetId(main, &id));
  if (s.launches > 0 && id != s.lastStreamId) {
    CU_CHECK(driverApi().streamWaitValue32(reinterpret_cast<CUstream>(main), s.doneCounterDevice, s.launches,
                                           CU_STREAM_WAIT_VALUE_GEQ));
  }
  s.lastStreamId = id;
}

void CudaExecutor::orderAfterPreviousCapturedCall(RankState& s, cudaStream_t main) {
  // Two calls captured into one graph on two streams (a stream forked off the capture's origin, as a caller overlaps
  // two collectives) would be parallel branches of the graph, and every replay could run them at once. The later one
  // depends on the nodes the earlier one ended with instead: an edge in the graph, so no event or memory operation of
  // its own. A call on the same stream is ordered by the stream already. Calls of different captures are different
  // graphs, whose launches the caller orders.
  if (!config_.callOrder || s.lastCapture.endNodes.empty() || s.lastCapture.stream == main) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(main, &status, &id));
  if (status != cudaStreamCaptureStatusActive || id != s.lastCapture.id) return;
  CUDA_CHECK(cudaStreamUpdateCaptureDependencies(main, s.lastCapture.endNodes.data(), nullptr,
                                                 s.lastCapture.endNodes.size(), cudaStreamAddCaptureDependencies));
}

void CudaExecutor::rememberCapturedCallEnd(RankState& s, cudaStream_t main) {
  // The program joined its lanes back into `main` at its end (CopyEngineProgram::finish), so the nodes the stream's
  // next capture would depend on are where the whole call ends. The driver's array lives until the next call on the
  // stream: copied. The nodes stay valid while their graph lives, and a later call of another capture never uses them.
  s.lastCapture.endNodes.clear();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaGraphNode_t* nodes = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // asked for, or the query fails where an edge carries data
  size_t count = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(main, &status, &id, nullptr, &nodes, &edges, &count));
  if (status != cudaStreamCaptureStatusActive) return;
  s.lastCapture.endNodes.assign(nodes, nodes + count);
  s.lastCapture.id = id;
  s.lastCapture.stream = main;
}

}  // namespace conccl::exec
