// conccl's own threads beside a caller's CUDA graph capture in global mode (PyTorch's torch.cuda.graph).
// - A thread that called exec::relaxCaptureModeOfThisThread (the closer of retired peer mappings, the proxy of
//   deferred calls) may allocate and free while another thread captures, and that capture stays valid.
// - A device-wide wait (cudaDeviceSynchronize) fails and invalidates the capture whatever the waiting thread's mode
//   (one H200, 2026-12-04, docs/results/2026-12-04-h200-1gpu-capture-host-time/ run 1, this test): hence no
//   background thread of conccl ever makes one (the closer of retired peer mappings unmaps without it).
// - A captured call's own side work (IPC mapping, scratch) runs in exec::RelaxedCaptureScope.
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

// A stream, a device buffer and a helper to replay a captured graph; every test captures a memset of the buffer.
class CaptureMode : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = 1 << 16;

  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&buf_, kBytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(buf_, 0, kBytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  void TearDown() override {
    (void)cudaGetLastError();
    if (buf_ != nullptr) cudaFree(buf_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // The graph is whole: replayed, it sets every byte of the buffer to `value`. Destroys `graph`.
  void expectReplaySets(cudaGraph_t graph, unsigned char value) {
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    std::vector<unsigned char> host(kBytes);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), buf_, kBytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    for (unsigned char c : host) ASSERT_EQ(c, value);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }

  cudaStream_t stream_ = nullptr;
  void* buf_ = nullptr;
};

TEST_F(CaptureMode, AThreadInRelaxedModeMayAllocateBesideAGlobalCapture) {
  cudaError_t mallocResult = cudaErrorUnknown, freeResult = cudaErrorUnknown;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream_, buf_, kBytes,
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
  expectReplaySets(graph, 0x7f);
}

// Why the closer must know about captures: relaxed or not, a device-wide wait breaks another thread's capture.
TEST_F(CaptureMode, ADeviceWideWaitInvalidatesAGlobalCaptureEvenFromARelaxedThread) {
  cudaError_t syncResult = cudaSuccess;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream_, buf_, kBytes,
      [&] {
        exec::relaxCaptureModeOfThisThread();
        syncResult = cudaDeviceSynchronize();
        (void)cudaGetLastError();
      },
      &graph);
  EXPECT_NE(syncResult, cudaSuccess) << "cudaDeviceSynchronize was allowed during another thread's global capture";
  EXPECT_NE(end, cudaSuccess) << "the capture survived a device-wide wait from a relaxed thread";
  if (end == cudaSuccess) cudaGraphDestroy(graph);
}

// What a captured call does on the capturing thread itself (map a peer's buffer, allocate scratch): inside
// exec::RelaxedCaptureScope it is allowed and the capture stays valid; the caller's global mode is back afterwards.
TEST_F(CaptureMode, ACallInARelaxedScopeMayAllocateDuringItsOwnGlobalCapture) {
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf_, 0x3c, kBytes, stream_), cudaSuccess);
  void* scratch = nullptr;
  cudaError_t inScope = cudaErrorUnknown;
  {
    const exec::RelaxedCaptureScope relaxed(exec::captureStatusOf(stream_) == exec::CaptureStatus::kActive);
    inScope = cudaMalloc(&scratch, 1 << 20);
  }
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);  // reads the mode (and sets it back below)
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal) << "the scope did not restore the caller's mode";
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  EXPECT_EQ(inScope, cudaSuccess) << cudaGetErrorString(inScope);
  ASSERT_EQ(end, cudaSuccess) << "the capture was invalidated: " << cudaGetErrorString(end);
  expectReplaySets(graph, 0x3c);
  if (scratch != nullptr) cudaFree(scratch);
}

TEST_F(CaptureMode, ControlAThreadInTheDefaultModeInvalidatesTheCapture) {
  cudaError_t syncResult = cudaSuccess;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = captureBeside(
      stream_, buf_, kBytes, [&] { syncResult = cudaDeviceSynchronize(); }, &graph);
  EXPECT_NE(syncResult, cudaSuccess) << "cudaDeviceSynchronize was allowed during another thread's global capture";
  EXPECT_NE(end, cudaSuccess) << "the capture survived an unsafe call from a thread in the default mode";
  if (end == cudaSuccess) cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace conccl::gputest
