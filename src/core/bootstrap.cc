#include "core/bootstrap.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/bootstrap_wire.h"
#include "base/error.h"
#include "core/keyed_hash.h"
#include "base/logging.h"

namespace conccl {
namespace {

using namespace wire;

// The handshake (see bootstrap.h): challenges and MACs are 32 bytes (HMAC-SHA256 keyed with the id's secret).
constexpr size_t kChallengeBytes = 32;
using Challenge = std::array<uint8_t, kChallengeBytes>;
// How long a connection may take from connect/accept to the end of the handshake. A real rank answers at once
// (microseconds); the bound is for connections that do not belong to the job: rank 0 drops them when it passes,
// having served the real ranks meanwhile (every handshake runs in rank 0's one poll loop). A real rank dropped
// that way (a machine so loaded it was not scheduled for this long) connects again.
constexpr std::chrono::milliseconds kHandshakeBudget{2000};
// Rank 0 refuses further connections while this many are in the handshake (each costs a descriptor).
constexpr size_t kMaxPendingHandshakes = 64;
// Rank 0 logs this many refused connections at WARN, the rest at INFO (a rank given another id retries, and would
// log a line every 100 ms), and counts them all in its timeout message.
constexpr int kRefusalWarnings = 8;
// A rank waits this long before it connects again after a listener failed the handshake.
constexpr std::chrono::milliseconds kRefusedRetry{100};

constexpr uint64_t kMaxHelloPayload = 64ull << 10;
constexpr uint64_t kMaxBlob = 64ull << 20;
constexpr int kListenBacklog = 128;
// Best-effort delivery of an ERROR message once the operation's own deadline is spent.
constexpr std::chrono::milliseconds kErrorSendBudget{200};
// How long past its own deadline a non-root rank waits for rank 0's verdict (the table, the all-gather result,
// or an ERROR): timeout / 2, at most this. Ranks start at slightly different times, and only rank 0 knows which
// ranks are missing: without it a rank that started before rank 0 would always give up first and report less
// than rank 0 can tell it.
constexpr std::chrono::milliseconds kMaxVerdictGrace{1000};

Clock::duration verdictGrace(std::chrono::milliseconds timeout) {
  return std::min<Clock::duration>(timeout / 2, kMaxVerdictGrace);
}

std::string socketName(const std::string& tag) { return "conccl-boot-" + tag; }

// Abstract namespace: sun_path[0] == '\0' and the name is the following bytes, with no terminator, so the
// address length must be exactly the same on bind and connect.
socklen_t socketAddress(const std::string& tag, sockaddr_un* addr) {
  std::string name = socketName(tag);
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  CONCCL_ASSERT(name.size() + 1 <= sizeof(addr->sun_path));
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// Fills `out` from the kernel's CSPRNG (getrandom). Never blocks: GRND_NONBLOCK fails, instead of waiting, only
// in the first seconds of boot before the pool is initialised.
void randomBytes(void* out, size_t n, const std::string& what) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t k = ::getrandom(p, n, GRND_NONBLOCK);
    if (k < 0) {
      if (errno == EINTR) continue;
      CONCCL_THROW(concclSystemError, "no entropy for " + what + ": getrandom failed: " + errnoText(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// The other end of a connected Unix socket, as the kernel recorded it at connect() / listen(): it cannot be
// forged. Empty when it runs as this process's effective uid; otherwise why not (for the logs). `pid` gets its
// pid (0 if unknown).
std::string otherUserOf(int fd, int64_t* pid) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  *pid = 0;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    return "its credentials could not be read (SO_PEERCRED: " + errnoText(errno) + ")";
  }
  *pid = cred.pid;
  if (cred.uid == ::geteuid()) return std::string();
  return "it runs as uid " + std::to_string(cred.uid) + ", not as this job's uid " + std::to_string(::geteuid());
}

// The MACs of the handshake: HMAC-SHA256 keyed with the id's secret, over a label naming who proves (so that
// neither side's answer is ever valid as the other's), the nonce, both challenges and the connecting rank's
// rank, nranks and pid as its proof's header carries them. Fresh challenges on both sides make every MAC good
// for one connection only.
enum class Prover : uint8_t { kPeer = 'P', kRoot = 'R' };

Sha256Digest handshakeMac(const UniqueIdData& id, Prover who, const Challenge& c0, const Challenge& c1, int32_t rank,
                          int32_t nranks, int64_t pid) {
  HmacSha256 mac(id.secret, sizeof(id.secret));
  mac.update("conccl-bootstrap-v2");
  const uint8_t role = static_cast<uint8_t>(who);
  mac.update(&role, 1);
  mac.update(id.nonce, sizeof(id.nonce));
  mac.update(c0.data(), c0.size());
  mac.update(c1.data(), c1.size());
  mac.update(&rank, sizeof(rank));
  mac.update(&nranks, sizeof(nranks));
  mac.update(&pid, sizeof(pid));
  return mac.finish();
}

std::string bytesOf(const Sha256Digest& d) { return std::string(reinterpret_cast<const char*>(d.data()), d.size()); }

std::string unexpected(const Incoming& in, const char* wanted) {
  return "it sent a message of type " + std::to_string(in.hdr.type) + " with " + std::to_string(in.body.size()) +
         " bytes instead of " + wanted;
}

// A connecting rank's half of the handshake on a fresh connection to rank 0's name, within `deadline`: checks
// that the listener runs as our uid, answers its challenge, checks its proof. Sends nothing but the proof (no
// payload) before rank 0 has proven itself. Empty when rank 0 is authenticated; otherwise why not.
std::string authenticateRoot(int fd, const UniqueIdData& id, int rank, int nranks, Clock::time_point deadline) {
  int64_t rootPid = 0;
  std::string why = otherUserOf(fd, &rootPid);
  const std::string listener = "the process listening on rank 0's name (pid " + std::to_string(rootPid) + ")";
  if (!why.empty()) return listener + " is not this job's rank 0: " + why;
  const std::string closed =
      "rank 0 closed the connection during the handshake (it refuses a rank whose unique id has another secret, "
      "and closes its name once every rank has arrived)";
  auto failed = [&](Io st, const Incoming& in, int err, const char* waiting) -> std::string {
    if (st == Io::kClosed) return closed;
    if (st == Io::kTimeout) return listener + " did not send " + waiting + " within the handshake's bound";
    return listener + ": receiving " + waiting + " failed: " + (in.why.empty() ? errnoText(err) : in.why);
  };
  int err = 0;
  Incoming challenge;
  Io st = recvMessage(fd, kChallengeBytes, deadline, &challenge, &err, /*errorAllowed=*/false);
  if (st != Io::kOk) return failed(st, challenge, err, "its challenge");
  if (challenge.hdr.type != kChallenge || challenge.body.size() != kChallengeBytes) {
    return listener + " is not this job's rank 0: " + unexpected(challenge, "a challenge");
  }
  Challenge c0, c1;
  std::memcpy(c0.data(), challenge.body.data(), c0.size());
  randomBytes(c1.data(), c1.size(), "a bootstrap challenge");
  const int64_t pid = ::getpid();
  std::string proof(reinterpret_cast<const char*>(c1.data()), c1.size());
  proof += bytesOf(handshakeMac(id, Prover::kPeer, c0, c1, rank, nranks, pid));
  st = sendMessage(fd, kProof, rank, nranks, proof, deadline, &err);
  if (st == Io::kClosed) return closed;
  if (st != Io::kOk) return listener + ": sending this rank's proof failed: " + errnoText(err);
  Incoming answer;
  st = recvMessage(fd, sizeof(Sha256Digest), deadline, &answer, &err, /*errorAllowed=*/false);
  if (st != Io::kOk) return failed(st, answer, err, "its proof");
  if (answer.hdr.type != kRootProof || answer.body.size() != sizeof(Sha256Digest)) {
    return listener + " is not this job's rank 0: " + unexpected(answer, "its proof");
  }
  const Sha256Digest want = handshakeMac(id, Prover::kRoot, c0, c1, rank, nranks, pid);
  if (!equalConstantTime(want.data(), answer.body.data(), want.size())) {
    return listener + " is not this job's rank 0: its proof of the unique id's secret is wrong";
  }
  return std::string();
}

// Non-root ranks: rank 0 may have sent an ERROR just before closing; it is still in our receive queue even when
// our send failed with EPIPE. Throws it if it is there, otherwise that rank 0 closed the connection.
[[noreturn]] void throwRootClosed(int fd, int rank, const std::string& when) {
  Incoming in;
  if (in.pump(fd, 0) == Io::kOk && in.hdr.type == kError) throwReported(in.body);
  CONCCL_THROW(concclSystemError, "rank " + std::to_string(rank) + ": rank 0 closed its bootstrap connection " +
                                      when + " (did its process exit?)");
}

// Rank 0: tells every given peer (best effort, within a short budget of its own) why the bootstrap failed, so
// that they fail with the same error now instead of at their own timeout.
void broadcastError(const std::vector<int>& fds, concclResult_t code, const std::string& text) {
  std::string body = errorBody(code, text);
  auto deadline = Clock::now() + kErrorSendBudget;
  for (int fd : fds) {
    if (fd < 0) continue;
    int err = 0;
    sendMessage(fd, kError, 0, 0, body, deadline, &err);
  }
}

// Rank 0 sends `body` to ranks 1..n-1 (the ranks wait for it until their deadline plus the verdict grace; so may
// this send). On the first failure the ranks not yet served get an ERROR and it is thrown here; the ranks already
// served will notice at their next bootstrap operation. `what` and `timeoutText` only word the messages.
void sendToEveryRank(const std::vector<int>& fds, MsgType type, int nranks, const std::string& body,
                     Clock::time_point deadline, const std::string& what, const std::string& timeoutText) {
  for (int r = 1; r < nranks; ++r) {
    int err = 0;
    Io st = sendMessage(fds[r], type, 0, nranks, body, deadline, &err);
    if (st == Io::kOk) continue;
    const std::string who = "rank " + std::to_string(r);
    std::string text;
    concclResult_t code = concclSystemError;
    if (st == Io::kClosed) {
      text = who + " closed its bootstrap connection (did its process exit?)";
    } else if (st == Io::kTimeout) {
      code = concclTimeout;
      text = who + " did not take " + what + " within " + timeoutText + " ms";
    } else {
      text = "rank 0: sending " + what + " to " + who + " failed: " + errnoText(err);
    }
    broadcastError(std::vector<int>(fds.begin() + r + 1, fds.end()), code, text);
    CONCCL_THROW(code, text);
  }
}

// Rank 0: true when a rank that already said hello has gone (it sends nothing more until the table arrives,
// so anything readable on its socket is end of stream, a reset, or a protocol violation).
bool peerGone(int fd) {
  char c;
  for (;;) {
    ssize_t k = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    return !(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::string pidText(int64_t pid) { return std::to_string(pid); }

// Rank 0: a connection that has not finished the handshake. Nothing is sent on it but the challenge and, once
// its proof checks, rank 0's proof; nothing it sends is believed before its proof checks.
struct Handshake {
  Fd fd;
  Clock::time_point until;  // dropped after this
  int64_t credPid = 0;      // from SO_PEERCRED, for the logs
  Challenge c0{};
  bool proven = false;
  WireHeader proofHdr{};  // the rank, nranks and pid its proof covers
  Incoming in;
};

enum class Step { kPending, kJoined, kDrop };

// Rank 0: the connections it refused, counted and logged.
struct RefusalLog {
  const std::string& tag;
  int count = 0;
  void note(int64_t pid, const std::string& what) {
    ++count;
    std::string line = "bootstrap " + tag + ": " + what + " (pid " + std::to_string(pid) + ")";
    if (count < kRefusalWarnings) {
      CONCCL_WARN(0, -1, line);
    } else if (count == kRefusalWarnings) {
      CONCCL_WARN(0, -1, line + "; further refusals are logged at INFO");
    } else {
      CONCCL_INFO(0, -1, line);
    }
  }
};

// Rank 0: reads what `h` has sent and moves its handshake on; never waits. kJoined: it proved it holds the secret,
// rank 0 proved the same to it, and its hello (same rank, nranks and pid as its proof) is in h.in. kDrop: `why`.
Step advanceHandshake(Handshake& h, const UniqueIdData& id, std::string* why) {
  for (;;) {
    Io st = h.in.pump(h.fd.get(), h.proven ? kMaxHelloPayload : 2 * kChallengeBytes, /*errorAllowed=*/false);
    if (st == Io::kPending) return Step::kPending;
    if (st == Io::kClosed) {
      *why = "it closed the connection";
      return Step::kDrop;
    }
    if (st != Io::kOk) {
      *why = h.in.why;
      return Step::kDrop;
    }
    if (h.proven) {
      const WireHeader& p = h.proofHdr;
      const WireHeader& q = h.in.hdr;
      if (q.type != kHello || q.rank != p.rank || q.nranks != p.nranks || q.pid != p.pid) {
        *why = "after its proof " + unexpected(h.in, "its hello");
        return Step::kDrop;
      }
      return Step::kJoined;
    }
    if (h.in.hdr.type != kProof || h.in.body.size() != 2 * kChallengeBytes) {
      *why = unexpected(h.in, "a proof");
      return Step::kDrop;
    }
    Challenge c1;
    std::memcpy(c1.data(), h.in.body.data(), c1.size());
    const WireHeader& p = h.in.hdr;
    const Sha256Digest want = handshakeMac(id, Prover::kPeer, h.c0, c1, p.rank, p.nranks, p.pid);
    if (!equalConstantTime(want.data(), h.in.body.data() + kChallengeBytes, want.size())) {
      *why = "its proof of the unique id's secret is wrong (a process outside this job, or a rank given another id)";
      return Step::kDrop;
    }
    h.proven = true;
    h.proofHdr = p;
    // A fresh socket's send buffer has room for these 64 bytes: never wait for it (deadline now).
    int err = 0;
    const std::string mine = bytesOf(handshakeMac(id, Prover::kRoot, h.c0, c1, p.rank, p.nranks, p.pid));
    if (sendMessage(h.fd.get(), kRootProof, 0, 0, mine, Clock::now(), &err) != Io::kOk) {
      *why = "it did not take rank 0's proof";
      return Step::kDrop;
    }
    h.in = Incoming();
  }
}

// Rank 0: accepts what waits on the listening socket. A connection from another uid is closed at once; any other
// gets a fresh challenge and joins `pending`.
void acceptConnections(int listenFd, const std::string& tag, std::vector<std::unique_ptr<Handshake>>& pending,
                       RefusalLog& refusals) {
  for (;;) {
    int c = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // EMFILE and the like: what waits stays in the backlog; the real ranks retry; the deadline bounds it all.
      CONCCL_WARN(0, -1, "bootstrap " + tag + ": accept on the bootstrap socket failed: " + errnoText(errno));
      return;
    }
    auto h = std::make_unique<Handshake>();
    h->fd.reset(c);
    h->until = Clock::now() + kHandshakeBudget;
    std::string why = otherUserOf(c, &h->credPid);
    if (why.empty() && pending.size() >= kMaxPendingHandshakes) {
      why = std::to_string(pending.size()) + " connections are in the handshake already";
    }
    if (why.empty()) {
      randomBytes(h->c0.data(), h->c0.size(), "a bootstrap challenge");
      const std::string body(reinterpret_cast<const char*>(h->c0.data()), h->c0.size());
      int err = 0;
      if (sendMessage(c, kChallenge, 0, 0, body, Clock::now(), &err) != Io::kOk) why = "it did not take the challenge";
    }
    if (!why.empty()) {
      refusals.note(h->credPid, "refused a connection: " + why);
      continue;
    }
    pending.push_back(std::move(h));
  }
}

// Rank 0's side of connect(): listens, authenticates every connection, collects one hello from each rank
// 1..n-1, sends everyone the table. `fds`, `payloads`, `pids` are the Bootstrap's members (its destructor closes
// whatever is left on a throw). Everything runs in one poll loop that never waits on one connection.
void rootConnect(const UniqueIdData& id, const std::string& tag, int nranks, std::chrono::milliseconds timeout,
                 Clock::time_point deadline, int& listenFd, std::vector<int>& fds, std::vector<std::string>& payloads,
                 std::vector<int64_t>& pids) {
  sockaddr_un addr;
  socklen_t addrLen = socketAddress(tag, &addr);
  listenFd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listenFd < 0) CONCCL_THROW(concclSystemError, "rank 0: socket(AF_UNIX) failed: " + errnoText(errno));
  if (::bind(listenFd, reinterpret_cast<const sockaddr*>(&addr), addrLen) != 0) {
    int e = errno;
    closeFd(listenFd);
    if (e == EADDRINUSE) {
      CONCCL_THROW(concclInvalidUsage,
                   "rank 0 of this unique id already exists (rank 0 called concclCommInitRank twice, the id was "
                   "reused while its first communicator was still initialising, or another process holds the name)");
    }
    CONCCL_THROW(concclSystemError, "rank 0: bind of the bootstrap socket failed: " + errnoText(e));
  }
  if (::listen(listenFd, kListenBacklog) != 0) {
    CONCCL_THROW(concclSystemError, "rank 0: listen on the bootstrap socket failed: " + errnoText(errno));
  }
  CONCCL_INFO(0, -1, "bootstrap " + tag + ": rank 0 listening for " + std::to_string(nranks - 1) + " rank(s)");

  fds.assign(nranks, -1);
  // Only connections that completed the handshake are told: the others learn nothing.
  auto fail = [&](concclResult_t code, const std::string& text, int extraFd) {
    std::vector<int> tell = fds;
    tell.push_back(extraFd);
    broadcastError(tell, code, text);
    CONCCL_THROW(code, text);
  };
  std::vector<bool> left(nranks, false);  // arrived, then left, and not back (yet)
  auto forget = [&](int r, const std::string& why) {
    left[r] = true;
    CONCCL_WARN(0, -1, "bootstrap " + tag + ": rank " + std::to_string(r) + " (pid " + pidText(pids[r]) + ") " +
                           why + "; waiting for it to arrive again");
    closeFd(fds[r]);
    payloads[r].clear();
    pids[r] = 0;
  };
  std::vector<std::unique_ptr<Handshake>> pending;
  RefusalLog refusals{tag};  // connections refused or dropped before they joined
  auto drop = [&](size_t i, const std::string& why) {
    refusals.note(pending[i]->credPid,
                  "dropped a connection before it joined (it was sent nothing but the handshake): " + why);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };

  auto start = Clock::now();
  int arrived = 0;
  while (arrived < nranks - 1) {
    const auto now = Clock::now();
    if (now >= deadline) {
      std::vector<int> missing, gone;
      for (int r = 1; r < nranks; ++r) {
        if (fds[r] < 0) (left[r] ? gone : missing).push_back(r);
      }
      std::string text = "rank 0 timed out after " + std::to_string(timeout.count()) + " ms waiting for ";
      if (!missing.empty()) text += "rank(s) " + rankList(missing) + " to call concclCommInitRank";
      if (!missing.empty() && !gone.empty()) text += "; and for ";
      if (!gone.empty()) {
        text += "rank(s) " + rankList(gone) + ", which arrived but left again (gave up or exited) before every "
                "rank had arrived";
      }
      if (refusals.count > 0) {
        text += " (" + std::to_string(refusals.count) +
                " connection(s) that did not prove they belong to this job were refused: a rank given an id with "
                "another secret, or a process outside the job; see the warnings)";
      }
      fail(concclTimeout, text, -1);
    }
    for (size_t i = pending.size(); i-- > 0;) {
      if (pending[i]->until <= now) {
        drop(i, "it did not complete the handshake within " + std::to_string(kHandshakeBudget.count()) + " ms");
      }
    }
    std::vector<pollfd> pfds{{listenFd, POLLIN, 0}};
    std::vector<int> who{-1};
    for (int r = 1; r < nranks; ++r) {
      if (fds[r] < 0) continue;
      pfds.push_back({fds[r], POLLIN, 0});
      who.push_back(r);
    }
    const size_t firstPending = pfds.size();
    auto wake = deadline;
    for (const auto& h : pending) {
      pfds.push_back({h->fd.get(), POLLIN, 0});
      wake = std::min(wake, h->until);
    }
    int k = ::poll(pfds.data(), pfds.size(), pollTimeoutMs(wake));
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(concclSystemError, "rank 0: poll on the bootstrap sockets failed: " + errnoText(errno), -1);
    }
    if (k == 0) continue;
    // A rank that leaves before the table is sent is forgotten: its slot is free for a retry.
    for (size_t i = 1; i < firstPending; ++i) {
      if (pfds[i].revents != 0 && peerGone(fds[who[i]])) {
        forget(who[i], "closed its bootstrap connection before every rank had arrived");
        --arrived;
      }
    }
    // Backwards, so that erasing one does not move those still to be looked at.
    for (size_t i = pending.size(); i-- > 0;) {
      if (arrived == nranks - 1) break;
      if (pfds[firstPending + i].revents == 0) continue;
      std::string why;
      Step step = advanceHandshake(*pending[i], id, &why);
      if (step == Step::kPending) continue;
      if (step == Step::kDrop) {
        drop(i, why);
        continue;
      }
      Fd conn = std::move(pending[i]->fd);
      Incoming in = std::move(pending[i]->in);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      // It holds the secret: from here on it is one of this job's ranks, told about errors like the others.
      const int r = in.hdr.rank;
      const std::string sender = "rank " + std::to_string(r) + " (pid " + pidText(in.hdr.pid) + ")";
      if (in.hdr.nranks != nranks) {
        fail(concclInvalidUsage,
             sender + " says nranks = " + std::to_string(in.hdr.nranks) + " but rank 0 has nranks = " +
                 std::to_string(nranks),
             conn.get());
      }
      if (r < 1 || r >= nranks) {
        fail(concclInvalidUsage,
             "a process (pid " + pidText(in.hdr.pid) + ") says it is rank " + std::to_string(r) +
                 ", which is out of range for nranks = " + std::to_string(nranks) +
                 (r == 0 ? " (rank 0 is already here)" : ""),
             conn.get());
      }
      if (fds[r] >= 0 && peerGone(fds[r])) {
        forget(r, "closed its bootstrap connection before every rank had arrived");
        --arrived;
      }
      if (fds[r] >= 0) {
        fail(concclInvalidUsage,
             "rank " + std::to_string(r) + " arrived twice (pids " + pidText(pids[r]) + " and " +
                 pidText(in.hdr.pid) + ")",
             conn.get());
      }
      fds[r] = conn.release();
      left[r] = false;
      pids[r] = in.hdr.pid;
      payloads[r] = std::move(in.body);
      ++arrived;
    }
    if ((pfds[0].revents & POLLIN) && arrived < nranks - 1) acceptConnections(listenFd, tag, pending, refusals);
  }
  // Release the abstract name at once: the id may be reused as soon as connect() returns, and a late
  // duplicate is refused by the kernel instead of waiting in the backlog. Connections still in the handshake
  // are closed unanswered.
  closeFd(listenFd);
  if (!pending.empty()) {
    CONCCL_INFO(0, -1,
                "bootstrap " + tag + ": closed " + std::to_string(pending.size()) +
                    " connection(s) still in the handshake when every rank had arrived");
  }
  pending.clear();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  CONCCL_INFO(0, -1, "bootstrap " + tag + ": all " + std::to_string(nranks) + " ranks arrived in " +
                         std::to_string(ms) + " ms");

  std::string table;
  for (int r = 0; r < nranks; ++r) {
    appendU64(table, static_cast<uint64_t>(pids[r]));
    appendU64(table, payloads[r].size());
    table += payloads[r];
  }
  // The ranks wait for the table until their deadline plus the verdict grace; so may this send (the last rank
  // may have arrived just before the deadline).
  sendToEveryRank(fds, kTable, nranks, table, deadline + verdictGrace(timeout), "the table of ranks",
                  std::to_string(timeout.count()));
}

// One connect() to rank 0's name before `deadline`. 0: `sock` is connected; otherwise the errno.
int connectOnce(const sockaddr_un& addr, socklen_t addrLen, Clock::time_point deadline, const std::string& me,
                Fd& sock) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) CONCCL_THROW(concclSystemError, me + ": socket(AF_UNIX) failed: " + errnoText(errno));
  sock.reset(s);
  if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), addrLen) == 0) return 0;
  int e = errno;
  if (e == EINPROGRESS) {
    int err = 0;
    if (waitFor(s, POLLOUT, deadline, &err) == Io::kOk) {
      socklen_t len = sizeof(e);
      if (::getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
      if (e == 0) return 0;
    } else {
      e = err ? err : ECONNREFUSED;
    }
  }
  sock.reset();
  return e;
}

// A non-root rank's side of connect(): connects to rank 0 (retrying until it listens and proves itself), says
// hello, waits for the table. Returns the connected socket.
int peerConnect(const UniqueIdData& id, const std::string& tag, int rank, int nranks, const std::string& payload,
                std::chrono::milliseconds timeout, Clock::time_point deadline, std::vector<std::string>& payloads,
                std::vector<int64_t>& pids) {
  const std::string me = "rank " + std::to_string(rank);
  const auto verdictDeadline = deadline + verdictGrace(timeout);
  sockaddr_un addr;
  socklen_t addrLen = socketAddress(tag, &addr);
  Fd sock;
  std::string refusal;  // why the last connection to the name did not lead to this job's rank 0
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    int e = connectOnce(addr, addrLen, deadline, me, sock);
    auto pause = backoff;
    if (e == 0) {
      std::string why =
          authenticateRoot(sock.get(), id, rank, nranks, std::min(verdictDeadline, Clock::now() + kHandshakeBudget));
      if (why.empty()) break;
      sock.reset();
      // Once per connect(): a foreign process at the name would otherwise log at every retry.
      if (refusal.empty()) CONCCL_WARN(rank, -1, "bootstrap " + tag + ": " + why + "; retrying");
      refusal = why;
      pause = kRefusedRetry;
    } else if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR) {
      // ECONNREFUSED: nobody listens on the name yet (rank 0 has not arrived); EAGAIN: its backlog is full.
      CONCCL_THROW(concclSystemError, me + ": connecting to rank 0's bootstrap socket failed: " + errnoText(e));
    }
    auto now = Clock::now();
    if (now >= deadline) {
      if (!refusal.empty()) {
        CONCCL_THROW(concclTimeout, me + " could not authenticate with rank 0 of this id within " +
                                        std::to_string(timeout.count()) + " ms: " + refusal);
      }
      CONCCL_THROW(concclTimeout, me + " could not reach rank 0 of this id within " +
                                      std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(10));
  }

  // Rank 0 is authenticated: what it sends from here on is believed (and checked for shape).
  int err = 0;
  Io st = sendMessage(sock.get(), kHello, rank, nranks, payload, verdictDeadline, &err);
  if (st == Io::kClosed) throwRootClosed(sock.get(), rank, "before this rank's hello was sent");
  if (st == Io::kTimeout) {
    CONCCL_THROW(concclTimeout, me + " timed out after " + std::to_string(timeout.count()) +
                                    " ms sending its hello to rank 0");
  }
  if (st == Io::kFailed) {
    CONCCL_THROW(concclSystemError, me + ": sending the hello to rank 0 failed: " + errnoText(err));
  }

  Incoming in;
  st = recvMessage(sock.get(), static_cast<uint64_t>(nranks) * (16 + kMaxHelloPayload), verdictDeadline, &in, &err);
  switch (st) {
    case Io::kOk: break;
    case Io::kTimeout:
      CONCCL_THROW(concclTimeout, me + " timed out after " + std::to_string(timeout.count()) +
                                      " ms waiting for rank 0 to report that all " + std::to_string(nranks) +
                                      " ranks have arrived (rank 0 did not say which are missing)");
    case Io::kClosed:
      CONCCL_THROW(concclSystemError,
                   me + ": rank 0 closed its bootstrap connection before every rank had arrived (did its process "
                        "exit, or did this rank arrive after the communicator was complete?)");
    default:
      CONCCL_THROW(concclSystemError, me + ": receiving the table of ranks from rank 0 failed: " +
                                          (in.why.empty() ? errnoText(err) : in.why));
  }
  if (in.hdr.type == kError) throwReported(in.body);
  if (in.hdr.type != kTable || in.hdr.rank != 0 || in.hdr.nranks != nranks) {
    CONCCL_THROW(concclSystemError, me + ": rank 0 sent an unexpected bootstrap message (type " +
                                        std::to_string(in.hdr.type) + ") instead of the table of ranks");
  }
  BodyReader rd(in.body);
  for (int r = 0; r < nranks; ++r) {
    uint64_t pid = 0, len = 0;
    if (!rd.u64(&pid) || !rd.u64(&len) || len > kMaxHelloPayload || !rd.bytes(len, &payloads[r])) {
      CONCCL_THROW(concclSystemError, me + ": rank 0 sent a malformed table of ranks");
    }
    pids[r] = static_cast<int64_t>(pid);
  }
  if (!rd.atEnd()) CONCCL_THROW(concclSystemError, me + ": rank 0 sent a malformed table of ranks");
  return sock.release();
}

}  // namespace

UniqueIdData makeUniqueId() {
  UniqueIdData data;
  randomBytes(data.nonce, sizeof(data.nonce), "a unique id");
  randomBytes(data.secret, sizeof(data.secret), "a unique id");
  return data;
}

UniqueIdData parseUniqueId(const concclUniqueId& id) {
  UniqueIdData data;
  std::memcpy(&data, id.internal, sizeof(data));
  if (data.magic != UniqueIdData::kMagic) {
    CONCCL_THROW(concclInvalidArgument,
                 "not a conccl unique id (bad magic): was it initialised with concclGetUniqueId?");
  }
  if (data.version != UniqueIdData::kVersion) {
    CONCCL_THROW(concclInvalidArgument, "the unique id has version " + std::to_string(data.version) +
                                            " but this conccl uses version " +
                                            std::to_string(UniqueIdData::kVersion) +
                                            " (the id was made by another conccl build)");
  }
  uint8_t any = 0;
  for (uint8_t b : data.secret) any |= b;
  if (any == 0) {
    CONCCL_THROW(concclInvalidArgument,
                 "the unique id has no secret (all zero): it is damaged, or was not made by concclGetUniqueId");
  }
  return data;
}

void storeUniqueId(const UniqueIdData& data, concclUniqueId* id) {
  CONCCL_REQUIRE(id != nullptr, "the unique id pointer is NULL");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, &data, sizeof(data));
}

std::string uniqueIdTag(const UniqueIdData& data) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(data.nonce[0]),
                static_cast<unsigned long long>(data.nonce[1]));
  return buf;
}

std::unique_ptr<Bootstrap> Bootstrap::connect(const UniqueIdData& id, int rank, int nranks,
                                              const std::string& payload, std::chrono::milliseconds timeout) {
  CONCCL_REQUIRE(nranks >= 1, "nranks must be at least 1, got " + std::to_string(nranks));
  CONCCL_REQUIRE(rank >= 0 && rank < nranks,
                 "rank " + std::to_string(rank) + " is out of range for nranks = " + std::to_string(nranks));
  CONCCL_REQUIRE(payload.size() <= kMaxHelloPayload, "bootstrap payload of " + std::to_string(payload.size()) +
                                                         " bytes exceeds the limit of " +
                                                         std::to_string(kMaxHelloPayload));
  CONCCL_REQUIRE(timeout.count() > 0, "the bootstrap timeout must be positive, got " +
                                          std::to_string(timeout.count()) + " ms");
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->nranks_ = nranks;
  b->timeout_ = timeout;
  b->tag_ = uniqueIdTag(id);
  b->payloads_.assign(nranks, std::string());
  b->pids_.assign(nranks, 0);
  b->payloads_[rank] = payload;
  b->pids_[rank] = static_cast<int64_t>(::getpid());
  if (nranks == 1) return b;

  auto deadline = Clock::now() + timeout;
  if (rank == 0) {
    rootConnect(id, b->tag_, nranks, timeout, deadline, b->listenFd_, b->peerFds_, b->payloads_, b->pids_);
  } else {
    b->peerFds_.assign(1, -1);
    b->peerFds_[0] = peerConnect(id, b->tag_, rank, nranks, payload, timeout, deadline, b->payloads_, b->pids_);
  }
  return b;
}

Bootstrap::~Bootstrap() { close(); }

void Bootstrap::close() {
  closeFd(listenFd_);
  for (int& fd : peerFds_) closeFd(fd);
  peerFds_.clear();
}

void Bootstrap::barrier() { allGather(std::string()); }

std::vector<std::string> Bootstrap::allGather(const std::string& mine) {
  const std::string me = "rank " + std::to_string(rank_);
  CONCCL_REQUIRE(mine.size() <= kMaxBlob, me + ": bootstrap all-gather blob of " + std::to_string(mine.size()) +
                                              " bytes exceeds the limit of " + std::to_string(kMaxBlob));
  if (nranks_ == 1) return {mine};
  if (peerFds_.empty()) {
    CONCCL_THROW(concclInvalidUsage, me + ": the bootstrap is closed (close() was called, or an earlier bootstrap "
                                          "operation failed)");
  }
  const auto deadline = Clock::now() + timeout_;
  // After a failure the streams are in an unknown state (a message may be half sent): close everything, so a
  // later call reports that instead of misreading bytes.
  try {
    return rank_ == 0 ? allGatherAsRoot(mine, deadline) : allGatherFromRoot(mine, deadline);
  } catch (...) {
    close();
    throw;
  }
}

std::vector<std::string> Bootstrap::allGatherFromRoot(const std::string& mine, Clock::time_point deadline) {
  const std::string me = "rank " + std::to_string(rank_);
  const std::string ms = std::to_string(timeout_.count());
  const uint64_t gatheredLimit = static_cast<uint64_t>(nranks_) * (8 + kMaxBlob);
  // Everything here waits on rank 0, whose verdict may come a little after our own deadline.
  const auto peerDeadline = deadline + verdictGrace(timeout_);
  const int fd = peerFds_[0];
  int err = 0;
  Io st = sendMessage(fd, kGather, rank_, nranks_, mine, peerDeadline, &err);
  if (st == Io::kClosed) throwRootClosed(fd, rank_, "during a bootstrap all-gather");
  if (st == Io::kTimeout) {
    CONCCL_THROW(concclTimeout, me + " timed out after " + ms + " ms sending its all-gather blob to rank 0");
  }
  if (st == Io::kFailed) CONCCL_THROW(concclSystemError, me + ": bootstrap send failed: " + errnoText(err));
  Incoming in;
  st = recvMessage(fd, gatheredLimit, peerDeadline, &in, &err);
  if (st == Io::kClosed) throwRootClosed(fd, rank_, "during a bootstrap all-gather");
  if (st == Io::kTimeout) {
    CONCCL_THROW(concclTimeout,
                 me + " timed out after " + ms + " ms waiting for rank 0 to complete a bootstrap all-gather");
  }
  if (st != Io::kOk) {
    CONCCL_THROW(concclSystemError, me + ": bootstrap receive from rank 0 failed: " +
                                        (in.why.empty() ? errnoText(err) : in.why));
  }
  if (in.hdr.type == kError) throwReported(in.body);
  if (in.hdr.type != kGathered || in.hdr.rank != 0 || in.hdr.nranks != nranks_) {
    CONCCL_THROW(concclSystemError, me + ": rank 0 sent an unexpected bootstrap message (type " +
                                        std::to_string(in.hdr.type) + ") during an all-gather");
  }
  std::vector<std::string> out(nranks_);
  BodyReader rd(in.body);
  for (int r = 0; r < nranks_; ++r) {
    uint64_t len = 0;
    if (!rd.u64(&len) || len > kMaxBlob || !rd.bytes(len, &out[r])) {
      CONCCL_THROW(concclSystemError, me + ": rank 0 sent a malformed all-gather result");
    }
  }
  if (!rd.atEnd()) CONCCL_THROW(concclSystemError, me + ": rank 0 sent a malformed all-gather result");
  return out;
}

std::vector<std::string> Bootstrap::allGatherAsRoot(const std::string& mine, Clock::time_point deadline) {
  const std::string ms = std::to_string(timeout_.count());
  auto fail = [&](concclResult_t code, const std::string& text) {
    broadcastError(peerFds_, code, text);
    CONCCL_THROW(code, text);
  };
  std::vector<std::string> out(nranks_);
  out[0] = mine;
  std::vector<Incoming> in(nranks_);
  int pending = nranks_ - 1;
  while (pending > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 1; r < nranks_; ++r) {
      if (in[r].complete) continue;
      pfds.push_back({peerFds_[r], POLLIN, 0});
      who.push_back(r);
    }
    if (Clock::now() >= deadline) {
      fail(concclTimeout, "rank 0 timed out after " + ms + " ms in a bootstrap all-gather waiting for rank(s) " +
                              rankList(who));
    }
    int k = ::poll(pfds.data(), pfds.size(), pollTimeoutMs(deadline));
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(concclSystemError, "rank 0: poll on the bootstrap sockets failed: " + errnoText(errno));
    }
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      const int r = who[i];
      Io st = in[r].pump(peerFds_[r], kMaxBlob);
      if (st == Io::kPending) continue;
      if (st == Io::kClosed) {
        fail(concclSystemError,
             "rank " + std::to_string(r) + " closed its bootstrap connection (did its process exit?)");
      }
      if (st != Io::kOk) {
        fail(concclSystemError, "rank 0: bootstrap receive from rank " + std::to_string(r) + " failed: " + in[r].why);
      }
      if (in[r].hdr.type != kGather || in[r].hdr.rank != r || in[r].hdr.nranks != nranks_) {
        fail(concclSystemError, "rank " + std::to_string(r) + " sent an unexpected bootstrap message (type " +
                                    std::to_string(in[r].hdr.type) + ") during an all-gather");
      }
      out[r] = std::move(in[r].body);
      --pending;
    }
  }
  std::string body;
  for (const std::string& blob : out) {
    appendU64(body, blob.size());
    body += blob;
  }
  // The ranks wait for the result until their deadline plus the verdict grace; so may this send.
  sendToEveryRank(peerFds_, kGathered, nranks_, body, deadline + verdictGrace(timeout_),
                  "the bootstrap all-gather result", ms);
  return out;
}

}  // namespace conccl
