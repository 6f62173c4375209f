// exec/cuda/vmm_export.h, the parts that run before any driver call: who the VMM handle server answers (the
// kernel's pid of the connection must be a peer of some communicator here), and who an importer trusts (the kernel's
// pid of the listener must be the owner's). A refused or failed request leaves the server serving. The GPU half
// (export, import, map) runs in test_gpu_multiprocess (ShareableVmmMemoryMovesDirectly).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
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
      (void)IpcImportTable::instance().acquire(e, 0);
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

}  // namespace
}  // namespace conccl::exec
