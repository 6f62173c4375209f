// conccl's own threads beside a caller's CUDA graph capture in global mode (PyTorch's torch.cuda.graph): a thread
// that called exec::relaxCaptureModeOfThisThread (the closer of retired peer mappings, the proxy of deferred calls)
// may make CUDA calls that are unsafe during a capture, and the caller's capture stays valid. The second test is the
// control: the same calls from a thread left in the default mode fail and invalidate the capture (what the closer did
// before it relaxed its mode; 2026-12-04, docs/results/2026-12-04-h200-1gpu-cross-node-capi/ run 7).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "exec/executor.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

// Captures a memset of `buf` on `stream` in global mode while `background` runs on another thread; returns
// cudaStreamEndCapture's result (*graph set on success).
cudaError_t captureBeside(cudaStream_t stream, void* buf, size_t bytes, const std::function<void()>& background,
                          cudaGraph_t* graph) {
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(buf, 0x7f, bytes, stream), cudaSuccess);
  std::thread t(background);
  t.join();
  return cudaStreamEndCapture(stream, graph);
}

TEST(CaptureMode, AThreadInRelaxedModeLeavesAGlobalCaptureValid) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const size_t bytes = 1 << 16;
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(buf, 0, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaError_t mallocResult = cudaErrorUnknown, syncResult = cudaErrorUnknown;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream, buf, bytes,
      [&] {
        exec::relaxCaptureModeOfThisThread();
        void* p = nullptr;
        mallocResult = cudaMalloc(&p, 1 << 20);
        if (mallocResult == cudaSuccess) cudaFree(p);
        syncResult = cudaDeviceSynchronize();
      },
      &graph);
  EXPECT_EQ(mallocResult, cudaSuccess) << cudaGetErrorString(mallocResult);
  EXPECT_EQ(syncResult, cudaSuccess) << cudaGetErrorString(syncResult);
  ASSERT_EQ(end, cudaSuccess) << "the capture was invalidated: " << cudaGetErrorString(end);
  // The graph is whole: replayed, it sets the buffer.
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  std::vector<unsigned char> host(bytes);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), buf, bytes, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (unsigned char c : host) ASSERT_EQ(c, 0x7f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(buf);
  cudaStreamDestroy(stream);
}

TEST(CaptureMode, ControlAThreadInTheDefaultModeInvalidatesTheCapture) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaError_t syncResult = cudaSuccess;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream, buf, 1 << 16, [&] { syncResult = cudaDeviceSynchronize(); }, &graph);
  EXPECT_NE(syncResult, cudaSuccess) << "cudaDeviceSynchronize was allowed during another thread's global capture";
  EXPECT_NE(end, cudaSuccess) << "the capture survived an unsafe call from a thread in the default mode";
  if (end == cudaSuccess) cudaGraphDestroy(graph);
  cudaGetLastError();
  cudaFree(buf);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace conccl::gputest
