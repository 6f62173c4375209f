// CUDA IPC beside a CUDA graph capture in global mode (PyTorch's torch.cuda.graph): what conccl's calls and its closer
// of retired peer mappings may do while a caller captures. A second process (this binary, re-run with
// CONCCL_CAPTURE_IPC_HELPER_FD set: the helper test below) exports allocations; this process maps them and captures.
// - A call's own thread, in exec::RelaxedCaptureScope, maps a peer's buffer during its capture: the capture stays valid.
// - The closer (relaxed) unmaps a peer's buffer during another thread's capture, also one the peer has freed (the
//   mapping holds the last reference to the memory): the capture stays valid.
// - A device-wide wait begun before the capture began does not invalidate it.
// - conccl's closer (exec::IpcImportTable) unmaps a peer's freed buffer during a capture no conccl call has seen: the
//   capture stays valid.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec/cuda/ipc_import_table.h"
#include "exec/executor.h"
#include "gpu/gpu_test_util.h"

extern char** environ;

namespace conccl::gputest {
namespace {

constexpr int kHelperAllocations = 4;

// The exporting process: allocations, their handles written to the fd, then it lives until its stdin closes.
// Disabled: not a test of its own, run only by CaptureIpc (--gtest_also_run_disabled_tests).
TEST(CaptureIpcHelper, DISABLED_ExportsForTheParent) {
  const char* fdText = std::getenv("CONCCL_CAPTURE_IPC_HELPER_FD");
  ASSERT_NE(fdText, nullptr) << "runs only as the helper process of CaptureIpc";
  const int fd = std::atoi(fdText);
  std::vector<void*> allocations;
  for (int i = 0; i < kHelperAllocations; ++i) {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
    allocations.push_back(p);
    cudaIpcMemHandle_t h;
    ASSERT_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    ASSERT_EQ(write(fd, &h, sizeof(h)), static_cast<ssize_t>(sizeof(h)));
  }
  // Commands on stdin: a digit frees that allocation (as a peer frees a buffer conccl still maps) and is answered
  // with one byte; end of input ends the helper.
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
    const int i = c - '0';
    if (i >= 0 && i < kHelperAllocations && allocations[static_cast<size_t>(i)] != nullptr) {
      ASSERT_EQ(cudaFree(allocations[static_cast<size_t>(i)]), cudaSuccess);
      allocations[static_cast<size_t>(i)] = nullptr;
      ASSERT_EQ(write(fd, "k", 1), 1);
    }
  }
  close(fd);
}

struct Helper {
  pid_t pid = -1;
  int lifeline = -1;  // commands to the helper; closing it ends the helper
  int answers = -1;   // the handles, then one byte per command done
  std::vector<cudaIpcMemHandle_t> handles;
  // The helper frees allocation i (its mapping here then holds the last reference to that memory).
  bool freeAllocation(int i) {
    const char c = static_cast<char>('0' + i);
    char ack = 0;
    return write(lifeline, &c, 1) == 1 && read(answers, &ack, 1) == 1 && ack == 'k';
  }
  ~Helper() {
    if (answers >= 0) close(answers);
    if (lifeline >= 0) close(lifeline);
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
};

void startHelper(Helper& h) {
  int handlesPipe[2], lifePipe[2];
  ASSERT_EQ(pipe(handlesPipe), 0);
  ASSERT_EQ(pipe(lifePipe), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, lifePipe[0], STDIN_FILENO);
  posix_spawn_file_actions_addclose(&actions, lifePipe[1]);
  posix_spawn_file_actions_addclose(&actions, handlesPipe[0]);
  std::string self(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  ASSERT_GT(n, 0);
  self.resize(static_cast<size_t>(n));
  std::string filter = "--gtest_filter=CaptureIpcHelper.DISABLED_ExportsForTheParent";
  std::string disabled = "--gtest_also_run_disabled_tests";
  std::vector<char*> argv = {self.data(), filter.data(), disabled.data(), nullptr};
  std::vector<std::string> envStore;
  for (char** e = environ; *e != nullptr; ++e) envStore.emplace_back(*e);
  envStore.push_back("CONCCL_CAPTURE_IPC_HELPER_FD=" + std::to_string(handlesPipe[1]));
  std::vector<char*> envp;
  for (auto& e : envStore) envp.push_back(e.data());
  envp.push_back(nullptr);
  ASSERT_EQ(posix_spawn(&h.pid, self.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(handlesPipe[1]);
  close(lifePipe[0]);
  h.lifeline = lifePipe[1];
  h.handles.resize(kHelperAllocations);
  size_t got = 0;
  char* dst = reinterpret_cast<char*>(h.handles.data());
  const size_t want = sizeof(cudaIpcMemHandle_t) * kHelperAllocations;
  while (got < want) {
    const ssize_t r = read(handlesPipe[0], dst + got, want - got);
    ASSERT_GT(r, 0) << "the helper process ended before it sent its handles";
    got += static_cast<size_t>(r);
  }
  h.answers = handlesPipe[0];
}

struct Capture {
  cudaStream_t stream = nullptr;
  void* buf = nullptr;
  Capture() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&buf, 4096), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  void begin() {
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(buf, 1, 4096, stream), cudaSuccess);
  }
  // The capture's end: cudaSuccess when it stayed valid.
  cudaError_t end() {
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream, &graph);
    if (e == cudaSuccess) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return e;
  }
  ~Capture() {
    cudaFree(buf);
    cudaStreamDestroy(stream);
  }
};

TEST(CaptureIpc, MappingAndUnmappingAPeersBufferLeaveAGlobalCaptureValid) {
  SKIP_WITHOUT_GPU();
  Helper helper;
  ASSERT_NO_FATAL_FAILURE(startHelper(helper));
  Capture cap;

  // 1. The call's thread maps a peer's buffer during its own capture, in the relaxed scope.
  cap.begin();
  void* mapped0 = nullptr;
  cudaError_t open = cudaErrorUnknown;
  {
    const exec::RelaxedCaptureScope relaxed(exec::captureStatusOf(cap.stream) == exec::CaptureStatus::kActive);
    open = cudaIpcOpenMemHandle(&mapped0, helper.handles[0], cudaIpcMemLazyEnablePeerAccess);
  }
  cudaError_t end = cap.end();
  EXPECT_EQ(open, cudaSuccess) << "mapping in the relaxed scope: " << cudaGetErrorString(open);
  EXPECT_EQ(end, cudaSuccess) << "mapping in the relaxed scope invalidated the capture: " << cudaGetErrorString(end);

  // 2. For the record: the same in the caller's global mode (what conccl did before the scope).
  cap.begin();
  void* mapped1 = nullptr;
  const cudaError_t openGlobal = cudaIpcOpenMemHandle(&mapped1, helper.handles[1], cudaIpcMemLazyEnablePeerAccess);
  (void)cudaGetLastError();
  end = cap.end();
  std::fprintf(stderr, "CaptureIpc: mapping in global mode during the capture: %s; the capture's end: %s\n",
               cudaGetErrorString(openGlobal), cudaGetErrorString(end));

  // The closer's way: a relaxed thread unmaps `mapped` while this thread captures; the unmap's result, then the
  // capture's end.
  auto unmapBesideACapture = [&](void* mapped) {
    cap.begin();
    cudaError_t closeResult = cudaErrorUnknown;
    std::thread([&] {
      exec::relaxCaptureModeOfThisThread();
      closeResult = cudaIpcCloseMemHandle(mapped);
      (void)cudaGetLastError();
    }).join();
    const cudaError_t captureEnd = cap.end();
    return std::make_pair(closeResult, captureEnd);
  };

  // 3. The closer (relaxed) unmaps a buffer during another thread's capture.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto [closeResult, closeEnd] = unmapBesideACapture(mapped0);
  EXPECT_EQ(closeResult, cudaSuccess) << "unmapping from a relaxed thread: " << cudaGetErrorString(closeResult);
  EXPECT_EQ(closeEnd, cudaSuccess) << "unmapping from a relaxed thread invalidated the capture: "
                                   << cudaGetErrorString(closeEnd);

  // 3b. The same for a mapping that holds the last reference to its memory: the peer freed the buffer first (the
  // closer's usual case: the scenario's peers free their buffers and conccl unmaps them in the background).
  void* mapped2 = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&mapped2, helper.handles[2], cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  ASSERT_TRUE(helper.freeAllocation(2)) << "the helper did not free its allocation";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto [freedClose, freedEnd] = unmapBesideACapture(mapped2);
  EXPECT_EQ(freedClose, cudaSuccess) << "unmapping freed memory from a relaxed thread: " << cudaGetErrorString(freedClose);
  EXPECT_EQ(freedEnd, cudaSuccess) << "unmapping a peer's freed memory (the last reference) from a relaxed thread "
                                      "invalidated the capture: "
                                   << cudaGetErrorString(freedEnd);

  // 4. A device-wide wait that began before the capture (a host function holds the device 300 ms) and ends during it.
  cudaStream_t busy = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(
                busy, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr),
            cudaSuccess);
  cudaError_t syncResult = cudaErrorUnknown;
  std::thread waiter([&] {
    exec::relaxCaptureModeOfThisThread();
    syncResult = cudaDeviceSynchronize();
    (void)cudaGetLastError();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  cap.begin();
  waiter.join();
  end = cap.end();
  std::fprintf(stderr, "CaptureIpc: a device-wide wait begun before the capture: %s; the capture's end: %s\n",
               cudaGetErrorString(syncResult), cudaGetErrorString(end));
  EXPECT_EQ(end, cudaSuccess) << "a device-wide wait begun before the capture invalidated it";
  cudaStreamDestroy(busy);

  // 5. conccl's own closer, as a call that retires a peer's mapping runs it (IpcImportTable::release in the
  // background), during a capture no conccl call has seen (a caller that captures its own kernels first): the peer
  // freed the buffer, the closer unmaps it while this thread captures, and the capture stays valid. Until
  // 2026-12-04 the closer waited for the device before it unmapped, which invalidated such a capture.
  exec::BufferExport exported;
  exported.allocId = 0xC1053D;  // any id no other test uses in this process
  exported.pid = helper.pid;
  std::memcpy(exported.handle, &helper.handles[3], sizeof(cudaIpcMemHandle_t));
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  exec::IpcImportTable& table = exec::IpcImportTable::instance();
  ASSERT_NE(table.acquire(exported, device, std::chrono::milliseconds(10000)), nullptr);
  ASSERT_TRUE(helper.freeAllocation(3)) << "the helper did not free its allocation";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cap.begin();
  table.release(exported.pid, exported.allocId, device, /*inBackground=*/true);
  const bool closed = table.waitForBackgroundCloses(std::chrono::seconds(10));
  end = cap.end();
  EXPECT_TRUE(closed) << "the closer did not unmap within 10 s during the capture";
  EXPECT_EQ(end, cudaSuccess) << "conccl's closer invalidated a capture it had not seen: " << cudaGetErrorString(end);
  EXPECT_EQ(table.size(), 0u) << "the mapping is still held";

  if (mapped1 != nullptr) cudaIpcCloseMemHandle(mapped1);
  (void)cudaGetLastError();
}

}  // namespace
}  // namespace conccl::gputest
