// conccl's own threads beside a caller's CUDA graph capture in global mode (PyTorch's torch.cuda.graph).
// - A thread that called exec::relaxCaptureModeOfThisThread (the closer of retired peer mappings, the proxy of
//   deferred calls) may allocate and free while another thread captures, and that capture stays valid.
// - A device-wide wait (cudaDeviceSynchronize) fails and invalidates the capture whatever the waiting thread's mode
//   (one H200, 2026-12-04, docs/results/2026-12-04-h200-1gpu-capture-host-time/ run 1, this test): hence
//   exec::CaptureWatch, which tells the closer about the captures conccl's calls saw, so that it waits until they end.
// - A captured call's own side work (IPC mapping, scratch) runs in exec::RelaxedCaptureScope.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "exec/cuda/capture_watch.h"
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

TEST(CaptureMode, AThreadInRelaxedModeMayAllocateBesideAGlobalCapture) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const size_t bytes = 1 << 16;
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(buf, 0, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaError_t mallocResult = cudaErrorUnknown, freeResult = cudaErrorUnknown;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream, buf, bytes,
      [&] {
        exec::relaxCaptureModeOfThisThread();
        void* p = nullptr;
        mallocResult = cudaMalloc(&p, 1 << 20);
        if (mallocResult == cudaSuccess) freeResult = cudaFree(p);
      },
      &graph);
  EXPECT_EQ(mallocResult, cudaSuccess) << cudaGetErrorString(mallocResult);
  EXPECT_EQ(freeResult, cudaSuccess) << cudaGetErrorString(freeResult);
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

// Why the closer must know about captures: relaxed or not, a device-wide wait breaks another thread's capture.
TEST(CaptureMode, ADeviceWideWaitInvalidatesAGlobalCaptureEvenFromARelaxedThread) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaError_t syncResult = cudaSuccess;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream, buf, 1 << 16,
      [&] {
        exec::relaxCaptureModeOfThisThread();
        syncResult = cudaDeviceSynchronize();
        (void)cudaGetLastError();
      },
      &graph);
  EXPECT_NE(syncResult, cudaSuccess) << "cudaDeviceSynchronize was allowed during another thread's global capture";
  EXPECT_NE(end, cudaSuccess) << "the capture survived a device-wide wait from a relaxed thread";
  if (end == cudaSuccess) cudaGraphDestroy(graph);
  cudaGetLastError();
  cudaFree(buf);
  cudaStreamDestroy(stream);
}

// What a captured call does on the capturing thread itself (map a peer's buffer, allocate scratch): inside
// exec::RelaxedCaptureScope it is allowed and the capture stays valid; the caller's global mode is back afterwards.
TEST(CaptureMode, ACallInARelaxedScopeMayAllocateDuringItsOwnGlobalCapture) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const size_t bytes = 1 << 16;
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf, 0x3c, bytes, stream), cudaSuccess);
  void* scratch = nullptr;
  cudaError_t inScope = cudaErrorUnknown;
  {
    const exec::RelaxedCaptureScope relaxed(exec::noteCallStream(stream) == exec::CaptureStatus::kActive);
    inScope = cudaMalloc(&scratch, 1 << 20);
  }
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);  // reads the mode (and sets it back below)
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal) << "the scope did not restore the caller's mode";
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  EXPECT_EQ(inScope, cudaSuccess) << cudaGetErrorString(inScope);
  ASSERT_EQ(end, cudaSuccess) << "the capture was invalidated: " << cudaGetErrorString(end);
  exec::noteCallStream(stream);  // the capture ended: the watch forgets it
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  std::vector<unsigned char> host(bytes);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), buf, bytes, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (unsigned char c : host) ASSERT_EQ(c, 0x3c);
  if (scratch != nullptr) cudaFree(scratch);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(buf);
  cudaStreamDestroy(stream);
}

// The watch sees a capture through a call's stream, from another thread without disturbing it, until it ends.
TEST(CaptureMode, TheWatchKnowsACaptureSeenByACallUntilItEnds) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr, other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  exec::CaptureWatch& watch = exec::CaptureWatch::instance();
  exec::noteCallStream(other);  // not capturing: nothing to remember
  EXPECT_TRUE(watch.noKnownCapture());
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf, 1, 1 << 16, stream), cudaSuccess);
  exec::noteCallStream(stream);  // what a call on the capturing stream does
  bool seenFromAnotherThread = false;
  std::thread([&] {
    exec::relaxCaptureModeOfThisThread();
    seenFromAnotherThread = !watch.noKnownCapture();
  }).join();
  EXPECT_TRUE(seenFromAnotherThread) << "a background thread did not see the capture a call reported";
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "asking about the capture invalidated it";
  EXPECT_TRUE(watch.noKnownCapture()) << "the capture ended but the watch still knows it";
  // A second capture on the same stream is a new one; a call on the stream after it ends forgets it too.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf, 2, 1 << 16, stream), cudaSuccess);
  exec::noteCallStream(stream);
  EXPECT_FALSE(watch.noKnownCapture());
  cudaGraph_t graph2 = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph2), cudaSuccess);
  exec::noteCallStream(stream);
  EXPECT_TRUE(watch.noKnownCapture());
  cudaGraphDestroy(graph);
  cudaGraphDestroy(graph2);
  cudaFree(buf);
  cudaStreamDestroy(stream);
  cudaStreamDestroy(other);
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
