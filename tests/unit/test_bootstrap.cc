// Bootstrap of multi-process communicators (src/core/bootstrap.h), on the CPU: unique ids, threads as ranks,
// every failure mode (timeout, duplicate rank, nranks mismatch, rank 0 twice, a peer that leaves), real
// processes (fork), the release of the abstract socket name, and who may join: foreign connectors (wrong secret,
// silent, garbage, an impostor rank 0, another user) racing a real job.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/bootstrap.h"
#include "base/error.h"
#include "core/keyed_hash.h"

namespace conccl {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Generous: only reached when a test is broken (then it fails instead of hanging), and a 2-core CI machine
// under a sanitizer can be slow.
constexpr milliseconds kLongTimeout{10000};

struct Outcome {
  bool ok = false;
  concclResult_t code = concclSuccess;
  std::string message;
  std::vector<std::string> payloads;
  std::vector<int64_t> pids;
  std::vector<std::vector<std::string>> gathered;
  milliseconds elapsed{0};
};

struct RankSpec {
  int rank;
  int nranks;
  milliseconds delay{0};  // before calling connect()
};

// What rank r of the test sends: distinct bytes, lengths 0 .. 60 KiB (the hello limit is 64 KiB).
std::string payloadFor(int rank) {
  if (rank == 1) return std::string();
  std::string s(static_cast<size_t>(rank) * 15000 + 3, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 31 + static_cast<size_t>(rank) * 7) & 0xff);
  return s;
}

// Runs one connect() per spec, each on its own thread, then `after` on the connected bootstraps.
std::vector<Outcome> runRanks(const UniqueIdData& id, const std::vector<RankSpec>& specs, milliseconds timeout,
                              const std::function<void(Bootstrap&, Outcome&)>& after = {}) {
  std::vector<Outcome> out(specs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] {
      const RankSpec& s = specs[i];
      Outcome& o = out[i];
      std::this_thread::sleep_for(s.delay);
      auto start = Clock::now();
      try {
        auto b = Bootstrap::connect(id, s.rank, s.nranks, payloadFor(s.rank), timeout);
        o.payloads = b->payloads();
        o.pids = b->pids();
        if (after) after(*b, o);
        o.ok = true;
      } catch (const Error& e) {
        o.code = e.code();
        o.message = e.message();
      } catch (const std::exception& e) {
        o.code = concclInternalError;
        o.message = std::string("unexpected exception: ") + e.what();
      }
      o.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<RankSpec> allRanks(int n) {
  std::vector<RankSpec> specs;
  for (int r = 0; r < n; ++r) specs.push_back({r, n});
  return specs;
}

sockaddr_un abstractAddress(const UniqueIdData& id, socklen_t* len) {
  std::string name = "conccl-boot-" + uniqueIdTag(id);
  sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

// True when a socket listens on the abstract name of this id. /proc/net/unix lists abstract names with a
// leading '@'; the sockets rank 0 accepted carry the name too, so only the listening one (flag __SO_ACCEPTCON,
// 00010000) counts.
bool nameListening(const UniqueIdData& id) {
  std::ifstream f("/proc/net/unix");
  std::string line;
  const std::string name = "@conccl-boot-" + uniqueIdTag(id);
  while (std::getline(f, line)) {
    std::istringstream ss(line);
    std::string num, refs, proto, flags, type, st, inode, path;
    if (!(ss >> num >> refs >> proto >> flags >> type >> st >> inode >> path)) continue;
    if (path == name && flags == "00010000") return true;
  }
  return false;
}

bool waitUntilListening(const UniqueIdData& id) {
  for (int i = 0; i < 2000; ++i) {
    if (nameListening(id)) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

// True when the name can be bound, i.e. nothing holds it (the check holds it for a moment: only call it when no
// rank 0 of this id may be starting).
bool nameFree(const UniqueIdData& id) {
  socklen_t len;
  sockaddr_un addr = abstractAddress(id, &len);
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  bool ok = ::bind(s, reinterpret_cast<const sockaddr*>(&addr), len) == 0;
  ::close(s);
  return ok;
}

// --------------------------------------------------------------------------------------------------------
// Unique ids

TEST(UniqueId, RoundTrip) {
  UniqueIdData a = makeUniqueId();
  concclUniqueId raw;
  std::memset(&raw, 0xab, sizeof(raw));
  storeUniqueId(a, &raw);
  for (size_t i = sizeof(UniqueIdData); i < CONCCL_UNIQUE_ID_BYTES; ++i) ASSERT_EQ(raw.internal[i], 0) << i;
  UniqueIdData b = parseUniqueId(raw);
  EXPECT_EQ(b.magic, UniqueIdData::kMagic);
  EXPECT_EQ(b.version, UniqueIdData::kVersion);
  EXPECT_EQ(b.nonce[0], a.nonce[0]);
  EXPECT_EQ(b.nonce[1], a.nonce[1]);
  EXPECT_EQ(uniqueIdTag(a), uniqueIdTag(b));
}

TEST(UniqueId, RejectsGarbage) {
  for (int fill : {0, int('x')}) {
    concclUniqueId raw;
    std::memset(&raw, fill, sizeof(raw));
    try {
      parseUniqueId(raw);
      FAIL() << "garbage accepted (fill " << fill << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), concclInvalidArgument);
      EXPECT_NE(e.message().find("bad magic"), std::string::npos) << e.message();
    }
  }
}

TEST(UniqueId, RejectsOtherVersion) {
  UniqueIdData a = makeUniqueId();
  a.version = 77;
  concclUniqueId raw;
  storeUniqueId(a, &raw);
  try {
    parseUniqueId(raw);
    FAIL() << "version 77 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidArgument);
    EXPECT_NE(e.message().find("77"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("version " + std::to_string(UniqueIdData::kVersion)), std::string::npos)
        << e.message();
  }
}

TEST(UniqueId, FreshTagsDiffer) {
  std::string a = uniqueIdTag(makeUniqueId()), b = uniqueIdTag(makeUniqueId());
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
}

// --------------------------------------------------------------------------------------------------------
// Successful bootstraps

TEST(Bootstrap, RejectsBadArguments) {
  UniqueIdData id = makeUniqueId();
  auto code = [&](int rank, int nranks, const std::string& payload, milliseconds timeout) {
    try {
      Bootstrap::connect(id, rank, nranks, payload, timeout);
    } catch (const Error& e) {
      return e.code();
    }
    return concclSuccess;
  };
  EXPECT_EQ(code(0, 0, "", kLongTimeout), concclInvalidArgument);
  EXPECT_EQ(code(-1, 2, "", kLongTimeout), concclInvalidArgument);
  EXPECT_EQ(code(2, 2, "", kLongTimeout), concclInvalidArgument);
  EXPECT_EQ(code(0, 1, std::string((64 << 10) + 1, 'x'), kLongTimeout), concclInvalidArgument);
  EXPECT_EQ(code(0, 1, "", milliseconds(0)), concclInvalidArgument);
  EXPECT_TRUE(nameFree(id));
}

class BootstrapSizes : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapSizes, PayloadsAllGathersAndBarrier) {
  const int n = GetParam();
  UniqueIdData id = makeUniqueId();
  // Blobs of round k from rank r; round 1 has a 1 MiB blob from the last rank and an empty one from rank 0.
  auto blob = [](int k, int r, int nr) -> std::string {
    if (k == 0) return "round0-rank" + std::to_string(r);
    if (k == 1) {
      if (r == nr - 1) {
        std::string s(1 << 20, '\0');
        for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i ^ (i >> 8)) & 0xff);
        return s;
      }
      return r == 0 ? std::string() : std::string(static_cast<size_t>(r) * 100, static_cast<char>('a' + r));
    }
    return std::string(static_cast<size_t>(k + r), static_cast<char>('0' + r));
  };
  auto out = runRanks(id, allRanks(n), kLongTimeout, [&](Bootstrap& b, Outcome& o) {
    for (int k = 0; k < 3; ++k) {
      o.gathered.push_back(b.allGather(blob(k, b.rank(), b.nranks())));
      b.barrier();
    }
    b.close();
    b.close();  // idempotent
  });
  for (int r = 0; r < n; ++r) {
    const Outcome& o = out[r];
    ASSERT_TRUE(o.ok) << "rank " << r << ": " << o.message;
    ASSERT_EQ(o.payloads.size(), static_cast<size_t>(n));
    ASSERT_EQ(o.pids.size(), static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(o.payloads[q], payloadFor(q)) << "rank " << r << " sees rank " << q << "'s payload wrong";
      EXPECT_EQ(o.pids[q], static_cast<int64_t>(getpid()));
    }
    ASSERT_EQ(o.gathered.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      ASSERT_EQ(o.gathered[k].size(), static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) EXPECT_EQ(o.gathered[k][q], blob(k, q, n)) << "round " << k << " rank " << q;
    }
  }
  EXPECT_TRUE(nameFree(id));
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapSizes, ::testing::Values(1, 2, 5));

TEST(Bootstrap, ReverseOrderWithRankZeroLast) {
  const int n = 4;
  UniqueIdData id = makeUniqueId();
  std::vector<RankSpec> specs;
  for (int r = 0; r < n; ++r) specs.push_back({r, n, milliseconds((n - 1 - r) * 40)});
  auto out = runRanks(id, specs, kLongTimeout, [](Bootstrap& b, Outcome&) { b.barrier(); });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(out[r].ok) << "rank " << r << ": " << out[r].message;
    for (int q = 0; q < n; ++q) EXPECT_EQ(out[r].payloads[q], payloadFor(q));
  }
}

// The name is released as soon as every rank is connected (before close()), and the id works again.
TEST(Bootstrap, NameReleasedAndIdReusable) {
  UniqueIdData id = makeUniqueId();
  for (int round = 0; round < 2; ++round) {
    auto out = runRanks(id, allRanks(3), kLongTimeout, [&](Bootstrap& b, Outcome& o) {
      b.barrier();  // every rank is past connect(): rank 0 has closed its listening socket
      if (b.rank() == 0 && (nameListening(id) || !nameFree(id))) {
        o.message = "the name is still bound after connect()";
        throw std::runtime_error(o.message);
      }
      b.barrier();
    });
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(out[r].ok) << "round " << round << " rank " << r << ": " << out[r].message;
    EXPECT_TRUE(nameFree(id));
  }
}

// Something that is not a conccl rank connects to the name and sends garbage: rank 0 drops it and goes on.
TEST(Bootstrap, StrayConnectionIsIgnored) {
  UniqueIdData id = makeUniqueId();
  Outcome root;
  std::thread t0([&] {
    try {
      auto b = Bootstrap::connect(id, 0, 2, "root", kLongTimeout);
      root.payloads = b->payloads();
      root.ok = true;
    } catch (const Error& e) {
      root.message = e.message();
    }
  });
  ASSERT_TRUE(waitUntilListening(id));
  for (const char* junk : {"", "hello, is anybody there? this is not a conccl header at all"}) {
    socklen_t len;
    sockaddr_un addr = abstractAddress(id, &len);
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(s, 0);
    ASSERT_EQ(::connect(s, reinterpret_cast<const sockaddr*>(&addr), len), 0) << std::strerror(errno);
    ASSERT_EQ(::send(s, junk, std::strlen(junk), MSG_NOSIGNAL), static_cast<ssize_t>(std::strlen(junk)));
    ::close(s);
  }
  auto b1 = Bootstrap::connect(id, 1, 2, "one", kLongTimeout);
  t0.join();
  ASSERT_TRUE(root.ok) << root.message;
  EXPECT_EQ(root.payloads, (std::vector<std::string>{"root", "one"}));
  EXPECT_EQ(b1->payloads(), (std::vector<std::string>{"root", "one"}));
}

// --------------------------------------------------------------------------------------------------------
// Failures: always an Error within the timeout, never a hang

TEST(Bootstrap, MissingRankTimesOut) {
  UniqueIdData id = makeUniqueId();
  auto start = Clock::now();
  // Rank 1 a little after rank 0, so that rank 0's deadline comes first and rank 1 gets its verdict.
  auto out = runRanks(id, {{0, 3}, {1, 3, milliseconds(20)}}, milliseconds(300));
  auto elapsed = Clock::now() - start;
  EXPECT_LT(elapsed, milliseconds(1500));
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(out[r].ok) << "rank " << r;
    EXPECT_EQ(out[r].code, concclTimeout) << "rank " << r << ": " << out[r].message;
    EXPECT_NE(out[r].message.find("rank 0 timed out after 300 ms waiting for rank(s) 2 to call"), std::string::npos)
        << "rank " << r << ": " << out[r].message;
  }
  EXPECT_TRUE(nameFree(id));
}

TEST(Bootstrap, NonRootAloneTimesOut) {
  UniqueIdData id = makeUniqueId();
  auto out = runRanks(id, {{1, 2}}, milliseconds(200));
  EXPECT_EQ(out[0].code, concclTimeout) << out[0].message;
  EXPECT_NE(out[0].message.find("rank 1 could not reach rank 0"), std::string::npos) << out[0].message;
  EXPECT_LT(out[0].elapsed, milliseconds(1500));
}

TEST(Bootstrap, DuplicateRankFailsEveryone) {
  UniqueIdData id = makeUniqueId();
  auto out = runRanks(id, {{0, 3}, {1, 3}, {1, 3}}, kLongTimeout);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_FALSE(out[i].ok) << i;
    EXPECT_EQ(out[i].code, concclInvalidUsage) << i << ": " << out[i].message;
    EXPECT_NE(out[i].message.find("rank 1 arrived twice"), std::string::npos) << i << ": " << out[i].message;
    EXPECT_LT(out[i].elapsed, kLongTimeout / 2) << i;  // at once, not at the timeout
  }
  EXPECT_TRUE(nameFree(id));
}

TEST(Bootstrap, NranksMismatchFailsBoth) {
  UniqueIdData id = makeUniqueId();
  auto out = runRanks(id, {{0, 3}, {1, 4}}, kLongTimeout);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].code, concclInvalidUsage) << i << ": " << out[i].message;
    EXPECT_NE(out[i].message.find("says nranks = 4 but rank 0 has nranks = 3"), std::string::npos) << out[i].message;
    EXPECT_LT(out[i].elapsed, kLongTimeout / 2) << i;
  }
}

TEST(Bootstrap, RankZeroTwice) {
  UniqueIdData id = makeUniqueId();
  Outcome first;
  std::thread t0([&] {
    try {
      auto b = Bootstrap::connect(id, 0, 2, "", kLongTimeout);
      first.ok = true;
    } catch (const Error& e) {
      first.message = e.message();
    }
  });
  ASSERT_TRUE(waitUntilListening(id));
  try {
    Bootstrap::connect(id, 0, 2, "", kLongTimeout);
    ADD_FAILURE() << "a second rank 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidUsage);
    EXPECT_NE(e.message().find("rank 0 of this unique id already exists"), std::string::npos) << e.message();
  }
  // The first rank 0 is unharmed.
  auto b1 = Bootstrap::connect(id, 1, 2, "", kLongTimeout);
  t0.join();
  EXPECT_TRUE(first.ok) << first.message;
}

// Rank 2 joins an all-gather too late: rank 0 times out naming it and tells rank 1; rank 2, when it finally
// calls, gets rank 0's error too; later calls report the closed bootstrap.
TEST(Bootstrap, AllGatherTimeout) {
  UniqueIdData id = makeUniqueId();
  auto out = runRanks(id, allRanks(3), milliseconds(300), [](Bootstrap& b, Outcome& o) {
    if (b.rank() == 2) std::this_thread::sleep_for(milliseconds(700));
    try {
      b.allGather("x");
      o.message = "all-gather succeeded";
    } catch (const Error& e) {
      o.code = e.code();
      o.message = e.message();
    }
    try {
      b.barrier();
      o.message += "; barrier after the error succeeded";
    } catch (const Error& e) {
      if (e.code() != concclInvalidUsage) o.message += "; second call: " + e.message();
    }
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(out[r].ok) << r << ": " << out[r].message;
    EXPECT_EQ(out[r].code, concclTimeout) << r << ": " << out[r].message;
    EXPECT_NE(out[r].message.find("rank 0 timed out after 300 ms in a bootstrap all-gather waiting for rank(s) 2"),
              std::string::npos)
        << r << ": " << out[r].message;
    EXPECT_EQ(out[r].message.find(';'), std::string::npos) << r << ": " << out[r].message;
  }
}

TEST(Bootstrap, PeerThatLeavesIsReported) {
  UniqueIdData id = makeUniqueId();
  auto out = runRanks(id, allRanks(3), kLongTimeout, [](Bootstrap& b, Outcome& o) {
    if (b.rank() == 2) {
      b.close();  // as if its process exited
      return;
    }
    try {
      b.allGather("x");
    } catch (const Error& e) {
      o.code = e.code();
      o.message = e.message();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].code, concclSystemError) << r << ": " << out[r].message;
    EXPECT_NE(out[r].message.find("rank 2 closed its bootstrap connection"), std::string::npos)
        << r << ": " << out[r].message;
  }
}

// --------------------------------------------------------------------------------------------------------
// Real processes

// Waits for `pids` at most `limit`; kills the ones still running after that. Returns each exit status.
std::vector<int> waitChildren(const std::vector<pid_t>& pids, milliseconds limit) {
  std::vector<int> status(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  auto deadline = Clock::now() + limit;
  size_t left = pids.size();
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        done[i] = true;
        --left;
      }
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    ::kill(pids[i], SIGKILL);
    ::waitpid(pids[i], nullptr, 0);
  }
  return status;
}

// Child body: every failure is an exit code; it never returns into GoogleTest.
[[noreturn]] void childRank(const UniqueIdData& id, int rank, int nranks) {
  int code = 0;
  try {
    auto b = Bootstrap::connect(id, rank, nranks, "pid:" + std::to_string(getpid()), kLongTimeout);
    for (int r = 0; r < nranks && code == 0; ++r) {
      if (b->payloads()[r] != "pid:" + std::to_string(b->pids()[r])) code = 10;
      for (int q = 0; q < r; ++q) {
        if (b->pids()[q] == b->pids()[r]) code = 11;
      }
    }
    if (b->pids()[rank] != getpid()) code = 12;
    for (int k = 0; k < 3 && code == 0; ++k) {
      std::string mine(static_cast<size_t>(1000 * k * (rank + 1)), static_cast<char>('a' + rank));
      auto all = b->allGather(mine);
      for (int r = 0; r < nranks; ++r) {
        if (all[r] != std::string(static_cast<size_t>(1000 * k * (r + 1)), static_cast<char>('a' + r))) code = 13;
      }
    }
    if (code == 0) b->barrier();
  } catch (const Error&) {
    code = 20;
  } catch (...) {
    code = 21;
  }
  _exit(code);
}

TEST(Bootstrap, SeveralProcesses) {
  const int n = 4;
  UniqueIdData id = makeUniqueId();
  std::vector<pid_t> pids;
  // Rank 0 last, so that the others have to retry.
  for (int r = n - 1; r >= 0; --r) {
    pid_t p = ::fork();
    ASSERT_GE(p, 0) << std::strerror(errno);
    if (p == 0) childRank(id, r, n);
    pids.push_back(p);
  }
  auto status = waitChildren(pids, milliseconds(20000));
  for (size_t i = 0; i < pids.size(); ++i) {
    EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0)
        << "rank " << (n - 1 - static_cast<int>(i)) << ": status " << status[i];
  }
  EXPECT_TRUE(nameFree(id));
}

// A rank whose process dies after its hello, before every rank has arrived, is forgotten: a replacement for
// the same rank is welcome (not a duplicate) and the bootstrap completes.
TEST(Bootstrap, RankThatDiesBeforeCompletionCanBeReplaced) {
  const int n = 3;
  UniqueIdData id = makeUniqueId();
  // Forked before any thread is started here (the child retries until rank 0 listens).
  pid_t p = ::fork();
  ASSERT_GE(p, 0);
  if (p == 0) {
    try {
      Bootstrap::connect(id, 1, n, "doomed", kLongTimeout);
    } catch (...) {
    }
    _exit(0);
  }
  Outcome root;
  std::thread t0([&] {
    try {
      auto b = Bootstrap::connect(id, 0, n, payloadFor(0), kLongTimeout);
      root.payloads = b->payloads();
      b->barrier();
      root.ok = true;
    } catch (const Error& e) {
      root.message = e.message();
    }
  });
  EXPECT_TRUE(waitUntilListening(id));
  std::this_thread::sleep_for(milliseconds(100));  // usually long enough for its hello to reach rank 0
  ::kill(p, SIGKILL);
  ::waitpid(p, nullptr, 0);
  auto out = runRanks(id, {{1, n}, {2, n}}, kLongTimeout, [](Bootstrap& b, Outcome&) { b.barrier(); });
  t0.join();
  ASSERT_TRUE(root.ok) << root.message;
  for (const Outcome& o : out) ASSERT_TRUE(o.ok) << o.message;
  EXPECT_EQ(root.payloads[1], payloadFor(1));
}

// --------------------------------------------------------------------------------------------------------
// Who may join: connections that are not this job's ranks

// Joins a thread when the test leaves its scope, also through a failed ASSERT (a joinable std::thread would
// terminate the process). The threads are ranks: every one ends within its timeout.
class Joined {
 public:
  explicit Joined(std::thread t) : t_(std::move(t)) {}
  ~Joined() {
    if (t_.joinable()) t_.join();
  }
  Joined(const Joined&) = delete;
  Joined& operator=(const Joined&) = delete;
  void join() { t_.join(); }

 private:
  std::thread t_;
};

// The bootstrap's wire format and handshake as bootstrap.cc lays them out and the top of bootstrap.h describes
// them, for connectors that are not conccl ranks (a test that stages an attack has to speak the protocol).
struct Wire {
  uint32_t magic;
  uint32_t type;
  int32_t rank;
  int32_t nranks;
  int64_t pid;
  uint64_t length;
};
static_assert(sizeof(Wire) == 32);
constexpr uint32_t kWireMagic = 0x32424343u;  // "CCB2"
enum : uint32_t { kHello = 1, kTable = 2, kGather = 4, kChallenge = 6, kProof = 7, kRootProof = 8 };
constexpr size_t kChallengeSize = 32;

std::string randomString(size_t n) {
  std::string s(n, '\0');
  UniqueIdData r = makeUniqueId();  // a cheap source of fresh random bytes
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(r.secret[i % sizeof(r.secret)] ^ (i / sizeof(r.secret)));
  return s;
}

// HMAC-SHA256(key, "conccl-bootstrap-v2", role, nonce, c0, c1, rank, nranks, pid), the handshake's MAC.
std::string handshakeMac(const void* key, size_t keyLen, char role, const UniqueIdData& id, const std::string& c0,
                         const std::string& c1, int32_t rank, int32_t nranks, int64_t pid) {
  HmacSha256 mac(key, keyLen);
  mac.update("conccl-bootstrap-v2");
  mac.update(&role, 1);
  mac.update(id.nonce, sizeof(id.nonce));
  mac.update(c0);
  mac.update(c1);
  mac.update(&rank, sizeof(rank));
  mac.update(&nranks, sizeof(nranks));
  mac.update(&pid, sizeof(pid));
  Sha256Digest d = mac.finish();
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// One raw connection to (or from) the bootstrap's name; records every byte it receives.
class RawConn {
 public:
  explicit RawConn(int fd = -1) : fd_(fd) {}
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  // Connects to the name of `id` (something must listen on it).
  static std::unique_ptr<RawConn> dial(const UniqueIdData& id) {
    socklen_t len;
    sockaddr_un addr = abstractAddress(id, &len);
    int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return nullptr;
    if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
      ::close(s);
      return nullptr;
    }
    return std::make_unique<RawConn>(s);
  }
  int fd() const { return fd_; }
  bool sendBytes(const std::string& b) {
    return ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  bool sendMsg(uint32_t type, int rank, int nranks, const std::string& body, uint64_t length = UINT64_MAX) {
    Wire h{kWireMagic, type, rank, nranks, static_cast<int64_t>(getpid()), length == UINT64_MAX ? body.size() : length};
    return sendBytes(std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + body);
  }
  // Reads until `n` more bytes have come, the peer closes, or `limit` passes. True when the n bytes came.
  bool recvBytes(size_t n, std::string* out, milliseconds limit) {
    auto deadline = Clock::now() + limit;
    out->clear();
    while (out->size() < n) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      ssize_t k = ::recv(fd_, buf, std::min(sizeof(buf), n - out->size()), 0);
      if (k <= 0) {
        eof_ = true;
        return false;
      }
      out->append(buf, static_cast<size_t>(k));
      received_.append(buf, static_cast<size_t>(k));
    }
    return true;
  }
  bool recvMsg(Wire* h, std::string* body, milliseconds limit) {
    std::string hb;
    if (!recvBytes(sizeof(Wire), &hb, limit)) return false;
    std::memcpy(h, hb.data(), sizeof(*h));
    if (h->length > (1u << 20)) return false;
    return recvBytes(h->length, body, limit);
  }
  // Reads whatever comes until the peer closes or `limit` passes; true when it closed.
  bool drainUntilClosed(milliseconds limit) {
    std::string rest;
    recvBytes(SIZE_MAX, &rest, limit);
    return eof_;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_;
  bool eof_ = false;
  std::string received_;
};

// What a connection that never joined may have been sent: one challenge message, nothing of the job.
void expectOnlyAChallenge(const RawConn& c, const char* who) {
  EXPECT_LE(c.received().size(), sizeof(Wire) + kChallengeSize) << who << " was sent more than a challenge";
  if (c.received().size() >= sizeof(Wire)) {
    Wire h;
    std::memcpy(&h, c.received().data(), sizeof(h));
    EXPECT_EQ(h.type, kChallenge) << who;
    EXPECT_EQ(h.nranks, 0) << who << " learned nranks";
  }
  for (int r = 2; r < 5; ++r) {
    EXPECT_EQ(c.received().find(payloadFor(r).substr(0, 64)), std::string::npos) << who << " saw rank " << r;
  }
}

void expectJobIntact(const std::vector<Outcome>& out, int n) {
  ASSERT_EQ(out.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(out[r].ok) << "rank " << r << ": " << out[r].message;
    ASSERT_EQ(out[r].payloads.size(), static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) EXPECT_EQ(out[r].payloads[q], payloadFor(q)) << "rank " << r << " sees rank " << q;
  }
}

TEST(UniqueId, SecretIsRandomAndNamesNothing) {
  UniqueIdData a = makeUniqueId(), b = makeUniqueId();
  EXPECT_NE(std::memcmp(a.secret, b.secret, sizeof(a.secret)), 0);
  EXPECT_NE(std::memcmp(a.secret, a.nonce, sizeof(a.nonce)), 0);
  // The names come from the nonce alone: a different secret, the same tag.
  UniqueIdData c = a;
  std::memcpy(c.secret, b.secret, sizeof(c.secret));
  EXPECT_EQ(uniqueIdTag(c), uniqueIdTag(a));
  EXPECT_EQ(uniqueIdTag(a).find(uniqueIdTag(b)), std::string::npos);
  concclUniqueId raw;
  storeUniqueId(a, &raw);
  UniqueIdData back = parseUniqueId(raw);
  EXPECT_EQ(std::memcmp(back.secret, a.secret, sizeof(a.secret)), 0);
  // The NCCL shim's mark (the last 8 bytes) stays free.
  for (size_t i = CONCCL_UNIQUE_ID_BYTES - 8; i < CONCCL_UNIQUE_ID_BYTES; ++i) EXPECT_EQ(raw.internal[i], 0) << i;
}

TEST(UniqueId, RejectsMissingSecret) {
  UniqueIdData a = makeUniqueId();
  std::memset(a.secret, 0, sizeof(a.secret));
  concclUniqueId raw;
  storeUniqueId(a, &raw);
  try {
    parseUniqueId(raw);
    FAIL() << "an id without a secret was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidArgument);
    EXPECT_NE(e.message().find("no secret"), std::string::npos) << e.message();
  }
}

// A foreign process that knows the name but not the secret claims to be the last rank: it answers the challenge
// with a MAC under another key and pushes a hello without waiting. It is dropped having received only the
// challenge; the real last rank, arriving after it, completes the job.
TEST(Foreign, WrongSecretClaimingLastRankLearnsNothing) {
  const int n = 3;
  UniqueIdData id = makeUniqueId();
  std::vector<Outcome> out;
  Joined job(std::thread([&] { out = runRanks(id, {{0, n}, {1, n}, {2, n, milliseconds(300)}}, kLongTimeout); }));
  ASSERT_TRUE(waitUntilListening(id));
  auto foreign = RawConn::dial(id);
  ASSERT_NE(foreign, nullptr);
  Wire h;
  std::string c0;
  ASSERT_TRUE(foreign->recvMsg(&h, &c0, kLongTimeout));
  ASSERT_EQ(h.type, kChallenge);
  const std::string c1 = randomString(kChallengeSize);
  const std::string wrongKey = randomString(32);
  const int64_t pid = getpid();
  foreign->sendMsg(kProof, n - 1, n,
                   c1 + handshakeMac(wrongKey.data(), wrongKey.size(), 'P', id, c0, c1, n - 1, n, pid));
  foreign->sendMsg(kHello, n - 1, n, "FOREIGN");
  EXPECT_TRUE(foreign->drainUntilClosed(kLongTimeout)) << "rank 0 kept the connection";
  job.join();
  expectOnlyAChallenge(*foreign, "the foreign connector");
  expectJobIntact(out, n);
}

// The same through conccl itself: a process given an id with the right name but another secret never joins (it
// times out saying why), and the job it raced is untouched.
TEST(Foreign, RankWithAnotherSecretCannotJoin) {
  const int n = 3;
  UniqueIdData id = makeUniqueId();
  UniqueIdData other = id;
  UniqueIdData fresh = makeUniqueId();
  std::memcpy(other.secret, fresh.secret, sizeof(other.secret));
  std::vector<Outcome> out;
  Joined job(std::thread([&] { out = runRanks(id, {{0, n}, {1, n}, {2, n, milliseconds(300)}}, kLongTimeout); }));
  auto impostor = runRanks(other, {{n - 1, n}}, milliseconds(1000));
  job.join();
  EXPECT_FALSE(impostor[0].ok);
  EXPECT_EQ(impostor[0].code, concclTimeout) << impostor[0].message;
  EXPECT_NE(impostor[0].message.find("could not authenticate with rank 0"), std::string::npos) << impostor[0].message;
  EXPECT_TRUE(impostor[0].payloads.empty());
  expectJobIntact(out, n);
}

// Connections that say nothing, or not what the protocol asks, are dropped; rank 0 answers the real ranks in the
// meantime (the silent ones are still connected when the job completes, well inside their 2 s bound).
TEST(Foreign, SilentAndGarbageConnectorsDoNotDisturbTheJob) {
  const int n = 3;
  UniqueIdData id = makeUniqueId();
  Outcome root;
  auto start = Clock::now();
  Joined t0(std::thread([&] { root = runRanks(id, {{0, n}}, kLongTimeout)[0]; }));
  ASSERT_TRUE(waitUntilListening(id));
  std::vector<std::unique_ptr<RawConn>> silent, garbage;
  for (int i = 0; i < 4; ++i) {
    silent.push_back(RawConn::dial(id));
    ASSERT_NE(silent.back(), nullptr);
  }
  // A hello with no handshake (the attack that worked before), a kError-typed header, a huge length, random bytes,
  // a header only half sent, and a proof of the wrong size.
  const std::vector<std::function<void(RawConn&)>> sends = {
      [&](RawConn& c) { c.sendMsg(kHello, n - 1, n, payloadFor(n - 1)); },
      [&](RawConn& c) { c.sendMsg(3, 0, 0, std::string(1000, 'e')); },
      [&](RawConn& c) { c.sendMsg(kProof, n - 1, n, "", 1ull << 60); },
      [&](RawConn& c) { c.sendBytes(randomString(500)); },
      [&](RawConn& c) { c.sendBytes(std::string(20, '\x43')); },
      [&](RawConn& c) { c.sendMsg(kProof, n - 1, n, randomString(63)); },
  };
  for (const auto& send : sends) {
    garbage.push_back(RawConn::dial(id));
    ASSERT_NE(garbage.back(), nullptr);
    send(*garbage.back());
  }
  auto out = runRanks(id, {{1, n}, {2, n}}, kLongTimeout);
  t0.join();
  auto elapsed = Clock::now() - start;
  out.insert(out.begin(), root);
  expectJobIntact(out, n);
  EXPECT_LT(elapsed, milliseconds(1500)) << "rank 0 waited for a silent connection";
  for (auto& c : silent) {
    EXPECT_TRUE(c->drainUntilClosed(kLongTimeout));
    expectOnlyAChallenge(*c, "a silent connector");
  }
  for (size_t i = 0; i < garbage.size(); ++i) {
    EXPECT_TRUE(garbage[i]->drainUntilClosed(kLongTimeout)) << "garbage sender " << i;
    expectOnlyAChallenge(*garbage[i], ("garbage sender " + std::to_string(i)).c_str());
  }
}

// A process without the secret binds the name before rank 0 and poses as it: the ranks that connect to it
// send their proof (no payload), refuse its wrong proof, and connect again; once it is gone the real rank 0
// binds and the job completes.
TEST(Foreign, ImpostorRankZeroLearnsNoPayload) {
  const int n = 3;
  UniqueIdData id = makeUniqueId();
  socklen_t len;
  sockaddr_un addr = abstractAddress(id, &len);
  int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(l, 0);
  ASSERT_EQ(::bind(l, reinterpret_cast<const sockaddr*>(&addr), len), 0) << std::strerror(errno);
  auto listener = std::make_unique<RawConn>(l);  // closes it on the way out
  ASSERT_EQ(::listen(l, 16), 0);
  std::vector<Outcome> peers;
  Joined t(std::thread([&] { peers = runRanks(id, {{1, n}, {2, n}}, kLongTimeout); }));
  std::vector<std::unique_ptr<RawConn>> victims;
  for (int i = 0; i < n - 1; ++i) {
    pollfd p{l, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, static_cast<int>(kLongTimeout.count())), 1);
    victims.push_back(std::make_unique<RawConn>(::accept4(l, nullptr, nullptr, SOCK_CLOEXEC)));
    RawConn& v = *victims.back();
    ASSERT_GE(v.fd(), 0);
    const std::string c0 = randomString(kChallengeSize);
    v.sendMsg(kChallenge, 0, 0, c0);
    Wire h;
    std::string proof;
    ASSERT_TRUE(v.recvMsg(&h, &proof, kLongTimeout));
    EXPECT_EQ(h.type, kProof);
    ASSERT_EQ(proof.size(), 2 * kChallengeSize);
    v.sendMsg(kRootProof, 0, 0, randomString(32));  // it cannot compute the real one
    EXPECT_TRUE(v.drainUntilClosed(kLongTimeout)) << "a rank kept talking to the impostor";
    EXPECT_EQ(v.received().size(), sizeof(Wire) + 2 * kChallengeSize) << "a rank sent more than its proof";
    for (int r = 2; r < n; ++r) EXPECT_EQ(v.received().find(payloadFor(r).substr(0, 64)), std::string::npos);
  }
  listener.reset();
  auto root = runRanks(id, {{0, n}}, kLongTimeout);
  t.join();
  peers.insert(peers.begin(), root[0]);
  expectJobIntact(peers, n);
}

// Processes of another user: rank 0 closes their connection before sending anything, and a rank refuses a
// listener of another user before reading anything from it. Needs root (to become another user in a child).
constexpr uid_t kNobody = 65534;

TEST(Foreign, OtherUserIsRefusedByRankZero) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  const int n = 2;
  UniqueIdData id = makeUniqueId();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  // Forked before any thread of this test starts; it connects once rank 0 listens.
  pid_t p = ::fork();
  ASSERT_GE(p, 0);
  if (p == 0) {
    ::close(go[1]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0 || ::geteuid() == 0) _exit(90);
    char x;
    if (::read(go[0], &x, 1) != 1) _exit(89);
    auto c = RawConn::dial(id);
    if (!c) _exit(91);
    c->sendMsg(kHello, 1, n, "FOREIGN");
    bool closed = c->drainUntilClosed(milliseconds(5000));
    _exit(!closed ? 92 : c->received().empty() ? 0 : 93);
  }
  ::close(go[0]);
  Outcome root;
  Joined t0(std::thread([&] { root = runRanks(id, {{0, n}}, kLongTimeout)[0]; }));
  EXPECT_TRUE(waitUntilListening(id));
  EXPECT_EQ(::write(go[1], "x", 1), 1);
  ::close(go[1]);
  auto status = waitChildren({p}, milliseconds(15000));
  EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0)
      << "status " << status[0] << " (92: not closed, 93: it was sent bytes)";
  auto one = runRanks(id, {{1, n}}, kLongTimeout);
  t0.join();
  expectJobIntact({root, one[0]}, n);
}

TEST(Foreign, OtherUserListenerIsRefusedByRanks) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  const int n = 2;
  UniqueIdData id = makeUniqueId();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // Forked before any thread of this test starts.
  pid_t p = ::fork();
  ASSERT_GE(p, 0);
  if (p == 0) {
    ::close(ready[0]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0 || ::geteuid() == 0) _exit(90);
    socklen_t len;
    sockaddr_un addr = abstractAddress(id, &len);
    int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || ::bind(l, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || ::listen(l, 4) != 0) _exit(91);
    (void)!::write(ready[1], "x", 1);
    pollfd pl{l, POLLIN, 0};
    if (::poll(&pl, 1, 5000) != 1) _exit(92);
    RawConn v(::accept4(l, nullptr, nullptr, SOCK_CLOEXEC));
    v.sendMsg(kChallenge, 0, 0, randomString(kChallengeSize));  // tempting: a well-formed challenge
    bool closed = v.drainUntilClosed(milliseconds(5000));
    _exit(!closed ? 93 : v.received().empty() ? 0 : 94);
  }
  ::close(ready[1]);
  char x;
  ASSERT_EQ(::read(ready[0], &x, 1), 1);
  ::close(ready[0]);
  std::vector<Outcome> one;
  Joined t1(std::thread([&] { one = runRanks(id, {{1, n}}, kLongTimeout); }));
  auto status = waitChildren({p}, milliseconds(15000));
  EXPECT_TRUE(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0)
      << "status " << status[0] << " (93: the rank did not close, 94: the rank sent bytes)";
  auto root = runRanks(id, {{0, n}}, kLongTimeout);
  t1.join();
  expectJobIntact({root[0], one[0]}, n);
}

// A process that does hold the secret (a buggy rank) and sends malformed all-gather messages: an error on every
// rank, never a crash or a misread.
TEST(Bootstrap, MalformedAllGatherFromARankIsAnError) {
  const int n = 3;
  // Wrong rank in the header; wrong nranks; a type that is not an all-gather; a length over the 64 MiB limit.
  const std::vector<std::pair<Wire, std::string>> bad = {
      {{kWireMagic, kGather, 1, n, 0, 1}, "x"},
      {{kWireMagic, kGather, n - 1, n + 1, 0, 1}, "x"},
      {{kWireMagic, kTable, n - 1, n, 0, 1}, "x"},
      {{kWireMagic, kGather, n - 1, n, 0, (64ull << 20) + 1}, ""},
  };
  for (size_t k = 0; k < bad.size(); ++k) {
    UniqueIdData id = makeUniqueId();
    std::vector<Outcome> out;
    auto gather = [](Bootstrap& b, Outcome& o) {
      try {
        b.allGather("x");
        o.message = "the all-gather succeeded";
      } catch (const Error& e) {
        o.code = e.code();
        o.message = e.message();
      }
    };
    Joined job(std::thread([&] { out = runRanks(id, {{0, n}, {1, n}}, kLongTimeout, gather); }));
    ASSERT_TRUE(waitUntilListening(id));
    // The last rank, by hand: the whole handshake with the real secret, its hello, the table, then the bad message.
    auto c = RawConn::dial(id);
    ASSERT_NE(c, nullptr);
    Wire h;
    std::string c0, body;
    ASSERT_TRUE(c->recvMsg(&h, &c0, kLongTimeout));
    const std::string c1 = randomString(kChallengeSize);
    const int64_t pid = getpid();
    c->sendMsg(kProof, n - 1, n, c1 + handshakeMac(id.secret, sizeof(id.secret), 'P', id, c0, c1, n - 1, n, pid));
    ASSERT_TRUE(c->recvMsg(&h, &body, kLongTimeout));
    ASSERT_EQ(h.type, kRootProof);
    EXPECT_EQ(body, handshakeMac(id.secret, sizeof(id.secret), 'R', id, c0, c1, n - 1, n, pid));
    c->sendMsg(kHello, n - 1, n, payloadFor(n - 1));
    ASSERT_TRUE(c->recvMsg(&h, &body, kLongTimeout));
    ASSERT_EQ(h.type, kTable);
    Wire m = bad[k].first;
    m.pid = pid;
    c->sendBytes(std::string(reinterpret_cast<const char*>(&m), sizeof(m)) + bad[k].second);
    job.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(out[r].ok) << "case " << k << " rank " << r << ": " << out[r].message;
      EXPECT_EQ(out[r].code, concclSystemError) << "case " << k << " rank " << r << ": " << out[r].message;
      EXPECT_NE(out[r].message.find("rank " + std::to_string(n - 1)), std::string::npos)
          << "case " << k << " rank " << r << ": " << out[r].message;
    }
  }
}
}  // namespace
}  // namespace conccl
