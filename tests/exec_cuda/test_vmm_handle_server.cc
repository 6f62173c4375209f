// exec/cuda/vmm_export.h, the parts that run before any driver call: who the VMM handle server answers (the
// kernel's pid of the connection must be a peer of some communicator here), and who an importer trusts (the kernel's
// pid of the listener must be the owner's). A refused or failed request leaves the server serving. The GPU half
// (export, import, map) runs in test_gpu_multiprocess (ShareableVmmMemoryMovesDirectly).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/peer_socket.h"
#include "exec/cuda/ipc_import_table.h"
#include "exec/cuda/vmm_export.h"

namespace conccl::exec {
namespace {

using namespace std::chrono_literals;

std::string errorOf(int64_t pid, uint64_t unitId) {
  try {
    (void)importVmmUnit(pid, unitId, 1 << 21, 0, 2s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A unit with no real memory behind it: serving it makes no driver call (exporting it would).
VmmUnit fakeUnit() {
  static uint64_t next = 1000;
  VmmUnit u;
  u.id = kVmmUnitIdBit | next++;
  u.base = 0x7f0000000000ull;
  u.bytes = 1 << 21;
  u.handleType = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  u.pieces.push_back(VmmPiece{u.base, u.bytes, 0});
  return u;
}

const int64_t kSelf = static_cast<int64_t>(::getpid());

TEST(VmmHandleServer, RefusesAProcessNoCommunicatorSharesWith) {
  VmmHandleServer& server = VmmHandleServer::instance();
  const VmmUnit u = fakeUnit();
  std::string why;
  ASSERT_TRUE(server.serve(u, 0, &why)) << why;
  // This process is not a peer of any communicator here: the server closes the connection unanswered.
  const std::string e = errorOf(kSelf, u.id);
  EXPECT_NE(e.find("closed the connection"), std::string::npos) << e;
  EXPECT_NE(e.find("CONCCL_VMM_EXPORT=0"), std::string::npos) << e;
  server.withdraw(u.id);
}

TEST(VmmHandleServer, TellsAPeerWhenTheUnitIsNoLongerExported) {
  VmmHandleServer& server = VmmHandleServer::instance();
  const VmmUnit u = fakeUnit();
  std::string why;
  ASSERT_TRUE(server.serve(u, 0, &why)) << why;
  server.withdraw(u.id);
  server.allowPeers({kSelf});
  const std::string e = errorOf(kSelf, u.id);
  EXPECT_NE(e.find("no longer exports it"), std::string::npos) << e;
  // Counted per communicator: one more allow needs one more disallow before the pid is refused again.
  server.allowPeers({kSelf});
  server.disallowPeers({kSelf});
  EXPECT_NE(errorOf(kSelf, u.id).find("no longer exports it"), std::string::npos);
  server.disallowPeers({kSelf});
  const std::string refused = errorOf(kSelf, u.id);
  EXPECT_NE(refused.find("closed the connection"), std::string::npos) << refused;
}

TEST(VmmHandleServer, AFailedExportClosesTheRequestAndTheServerGoesOn) {
  VmmHandleServer& server = VmmHandleServer::instance();
  const VmmUnit u = fakeUnit();
  std::string why;
  ASSERT_TRUE(server.serve(u, 0, &why)) << why;
  server.allowPeers({kSelf});
  // Handle 0 is no allocation: the export fails (or, without a driver, the device query before it); either way the
  // importer hears an error, not a hang, and the next request is answered.
  const std::string e = errorOf(kSelf, u.id);
  EXPECT_FALSE(e.empty());
  server.withdraw(u.id);
  EXPECT_NE(errorOf(kSelf, u.id).find("no longer exports it"), std::string::npos);
  server.disallowPeers({kSelf});
}

TEST(VmmHandleServer, AnImporterDoesNotTrustASocketHeldByAnotherProcess) {
  // Someone took the name of pid 4194000's server (a pid this test does not have): the importer sees the kernel's
  // pid of the listener, ours, and refuses before it sends anything.
  const int64_t victim = 4194000;
  peersock::OwnedFd squatter = peersock::listenAbstract(VmmHandleServer::socketName(victim), 4);
  const std::string e = errorOf(victim, kVmmUnitIdBit | 1);
  EXPECT_NE(e.find("is held by pid " + std::to_string(kSelf)), std::string::npos) << e;
}

TEST(VmmHandleServer, AnImporterGivesUpWhenNoServerListens) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = errorOf(4194001, kVmmUnitIdBit | 1);
  EXPECT_NE(e.find("connecting to 'conccl-vmm-4194001'"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

// The import table asks the owner without holding its lock (a round trip to another process): an import that fails
// must leave no trace, and two threads asking for the same unit at once must both get the answer, none waiting on
// the other for ever.
TEST(VmmHandleServer, AFailedImportLeavesTheTableUsable) {
  BufferExport e;
  e.kind = BufferExport::kVmm;
  e.pid = 4194002;  // no such server
  e.allocId = kVmmUnitIdBit | 7;
  e.allocBytes = 1 << 21;
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int> refused{0};
  auto ask = [&] {
    try {
      (void)IpcImportTable::instance().acquire(e, 0, std::chrono::milliseconds(5000));
    } catch (const Error& err) {
      if (std::string(err.what()).find("conccl-vmm-4194002") != std::string::npos) ++refused;
    }
  };
  // Detached and waited for with a bound: a table left waiting on the failed import would hang the asks.
  std::atomic<int> done{0};
  for (int t = 0; t < 2; ++t) {
    std::thread([&] {
      ask();
      ++done;
    }).detach();
  }
  while (done.load() < 2 && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
  if (done.load() < 2) {
    ADD_FAILURE() << "an acquire of a unit whose import failed on another thread did not return";
    std::_Exit(1);  // the blocked threads cannot be joined
  }
  ask();  // once more, after both
  EXPECT_EQ(refused.load(), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(IpcImportTable::instance().size(), 0u);
}

// An owner that never answers: a child process that listens on its own handle server's name (so the importer's
// SO_PEERCRED check passes) and then only waits to be killed. The child makes system calls only (the parent has
// threads: nothing that may take a lock after fork).
pid_t startSilentOwner() {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    char name[32] = "conccl-vmm-";  // VmmHandleServer::socketName, built without the allocator
    size_t len = std::strlen(name);
    char digits[24];
    size_t nd = 0;
    for (long v = static_cast<long>(::getpid()); v > 0; v /= 10) digits[nd++] = static_cast<char>('0' + v % 10);
    while (nd > 0) name[len++] = digits[--nd];
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name, len);  // abstract: sun_path[0] stays 0
    const int s = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);  // as peersock::listenAbstract
    const auto addrLen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
    const char ok = (s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&addr), addrLen) == 0 && ::listen(s, 8) == 0);
    (void)!::write(ready[1], &ok, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = 0;
  const bool listening = child > 0 && ::read(ready[0], &ok, 1) == 1 && ok == 1;
  ::close(ready[0]);
  if (!listening && child > 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return -1;
  }
  return child;
}

// A thread that waits for another thread's import of the same unit waits at most its own limit: the first import
// here is stuck on an owner that never answers (bounded by its own limit, 20 s), and the second acquire gives up
// after its 300 ms with an error that says why, instead of waiting on the first.
TEST(VmmHandleServer, AnAcquireWaitingForAnotherThreadsImportIsBounded) {
  const pid_t owner = startSilentOwner();
  ASSERT_GT(owner, 0) << "could not start the silent owner";
  BufferExport e;
  e.kind = BufferExport::kVmm;
  e.pid = owner;
  e.allocId = kVmmUnitIdBit | 11;
  e.allocBytes = 1 << 21;
  std::atomic<bool> firstReturned{false};
  std::thread first([&] {
    try {
      (void)IpcImportTable::instance().acquire(e, 0, std::chrono::milliseconds(20000));
    } catch (const Error&) {
    }
    firstReturned = true;
  });
  // The first thread marks the unit as being opened as soon as it holds the table's lock (microseconds): half a
  // second is its head start even on a loaded machine.
  std::this_thread::sleep_for(500ms);
  const auto t0 = std::chrono::steady_clock::now();
  std::string why;
  try {
    (void)IpcImportTable::instance().acquire(e, 0, std::chrono::milliseconds(300));
  } catch (const Error& err) {
    why = err.what();
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  ::kill(owner, SIGKILL);  // the first import then fails at once (the connection closes)
  ::waitpid(owner, nullptr, 0);
  first.join();
  EXPECT_TRUE(firstReturned.load());
  EXPECT_NE(why.find("another thread's mapping of it did not finish within 300 ms"), std::string::npos) << why;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 2s);
  EXPECT_EQ(IpcImportTable::instance().size(), 0u);
}

}  // namespace
}  // namespace conccl::exec
