#include "nccl/rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "core/keyed_hash.h"
#include "nccl/liveness_link.h"

namespace conccl::nccl {
namespace {

using Clock = std::chrono::steady_clock;
using Mac = std::array<uint8_t, 32>;

constexpr uint32_t kIdVersion = 1;
constexpr uint64_t kChallengeMagic = 0x3163564452434c43ull;  // "CLCRDVc1" read little-endian
constexpr uint64_t kHelloMagic = 0x3168564452434c43ull;
constexpr uint64_t kReplyMagic = 0x3172564452434c43ull;
constexpr size_t kChallengeBytes = 8 + 16;
constexpr size_t kHelloBodyBytes = 8 + 4 + 4 + 8 + 16;  // magic, rank, nranks, host, the rank's challenge
constexpr size_t kHelloBytes = kHelloBodyBytes + 32;
constexpr size_t kReplyHeaderBytes = 8 + 4 + 4 + 4 + 4;  // magic, status, nranks, answer bytes, message bytes
constexpr int kMaxRanks = 1 << 20;
constexpr uint32_t kMaxBlob = 1u << 16;
constexpr auto kGrace = std::chrono::milliseconds(1000);
constexpr auto kSendBound = std::chrono::milliseconds(5000);  // one reply to one rank, at most

template <class T>
void put(std::vector<uint8_t>* out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool randomBytes(uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = getrandom(out + done, n - done, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(r);
  }
  return true;
}

std::string errnoText(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Writes all of data before `deadline` (fd non-blocking). False on error, timeout or a closed peer.
bool sendAll(int fd, const uint8_t* data, size_t n, Clock::time_point deadline) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::send(fd, data + done, n - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int ms = remainingMs(deadline);
      if (ms == 0 || ::poll(&p, 1, ms) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

// Reads exactly n bytes before `deadline`. 1: done; 0: the peer closed first; -1: timeout or error (*why).
int recvAll(int fd, uint8_t* data, size_t n, Clock::time_point deadline, std::string* why) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::recv(fd, data + done, n - done, 0);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return 0;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLIN, 0};
      int ms = remainingMs(deadline);
      int pr = ms == 0 ? 0 : ::poll(&p, 1, ms);
      if (pr == 0) {
        *why = "timed out";
        return -1;
      }
      if (pr < 0 && errno != EINTR) {
        *why = errnoText("poll");
        return -1;
      }
      continue;
    }
    *why = errnoText("recv");
    return -1;
  }
  return 1;
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Mac mac(const std::array<uint8_t, 16>& secret, const char* domain, const std::array<uint8_t, 16>& nonce,
        const uint8_t* challenge, const uint8_t* body, size_t bodyBytes) {
  HmacSha256 h(secret.data(), secret.size());
  h.update(domain, std::strlen(domain) + 1);  // with its NUL: domains cannot run into the nonce
  h.update(nonce.data(), nonce.size());
  h.update(challenge, 16);
  h.update(body, bodyBytes);
  return h.finish();
}

std::vector<uint8_t> makeReply(const std::array<uint8_t, 16>& secret,
                               const std::array<uint8_t, 16>& nonce, const uint8_t* rankChallenge,
                               RendezvousStatus status, const std::vector<uint64_t>& hosts, const std::string& answer,
                               const std::string& message) {
  std::vector<uint8_t> out;
  put(&out, kReplyMagic);
  put(&out, static_cast<uint32_t>(status));
  put(&out, static_cast<uint32_t>(hosts.size()));
  const std::string msg = message.substr(0, kMaxBlob);
  put(&out, static_cast<uint32_t>(answer.size()));
  put(&out, static_cast<uint32_t>(msg.size()));
  for (uint64_t h : hosts) put(&out, h);
  out.insert(out.end(), answer.begin(), answer.end());
  out.insert(out.end(), msg.begin(), msg.end());
  Mac m = mac(secret, "conccl-shim rendezvous reply", nonce, rankChallenge, out.data(), out.size());
  out.insert(out.end(), m.begin(), m.end());
  return out;
}

// One connection at the root.
struct Conn {
  int fd = -1;
  std::array<uint8_t, 16> challenge{};      // the root's, sent on accept
  std::vector<uint8_t> hello;               // bytes read so far
  bool arrived = false;                     // a valid hello was read
  int rank = -1;
  uint64_t host = 0;
  std::array<uint8_t, 16> rankChallenge{};  // the rank's, for the reply's MAC
};

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += ", ...";
  return s;
}

RendezvousStatus rendezvousImpl(const RendezvousId& id, const std::array<uint8_t, 16>& secret, int rank, int nranks,
                                uint64_t host, RendezvousResult* out, std::string* error) {
  const std::string where = "the rendezvous root at " + rendezvousAddress(id);
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
    *error = "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " is not a valid rank";
    return RendezvousStatus::kBadUsage;
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(id.timeoutMs) + kGrace;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(id.port);
  addr.sin_addr.s_addr = htonl(id.ipv4);
  int fd = -1;
  std::string lastError;
  // The root listens from the moment the id exists; retry anyway (a busy backlog refuses for a moment).
  while (true) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      *error = errnoText("socket");
      return RendezvousStatus::kSocketError;
    }
    int c = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (c < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ms = std::min(remainingMs(deadline), 1000);
      if (ms > 0 && ::poll(&p, 1, ms) > 0) {
        int soError = 0;
        socklen_t len = sizeof(soError);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len);
        c = soError == 0 ? 0 : -1;
        errno = soError;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (c == 0) break;
    lastError = std::strerror(errno);
    ::close(fd);
    fd = -1;
    if (remainingMs(deadline) == 0) {
      *error = "could not reach " + where + " (" + lastError + ") within " + std::to_string(id.timeoutMs) +
               " ms: is the process that made the id still running, and is its address reachable from here "
               "(CONCCL_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)?";
      return RendezvousStatus::kTimeout;
    }
    ::usleep(50 * 1000);
  }
  setNoDelay(fd);
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};

  std::string why;
  uint8_t challenge[kChallengeBytes];
  int r = recvAll(fd, challenge, sizeof(challenge), deadline, &why);
  if (r <= 0 || get<uint64_t>(challenge) != kChallengeMagic) {
    *error = r == 0 || r > 0 ? where + " closed the connection or is not a rendezvous root"
                             : "no challenge from " + where + " (" + why + ")";
    return r < 0 ? RendezvousStatus::kTimeout : RendezvousStatus::kRefused;
  }
  std::array<uint8_t, 16> mine{};
  if (!randomBytes(mine.data(), mine.size())) {
    *error = errnoText("getrandom");
    return RendezvousStatus::kSocketError;
  }
  std::vector<uint8_t> hello;
  put(&hello, kHelloMagic);
  put(&hello, static_cast<int32_t>(rank));
  put(&hello, static_cast<int32_t>(nranks));
  put(&hello, host);
  hello.insert(hello.end(), mine.begin(), mine.end());
  Mac m = mac(secret, "conccl-shim rendezvous hello", id.nonce, challenge + 8, hello.data(), hello.size());
  hello.insert(hello.end(), m.begin(), m.end());
  if (!sendAll(fd, hello.data(), hello.size(), deadline)) {
    *error = "sending the hello to " + where + " failed";
    return RendezvousStatus::kSocketError;
  }

  std::vector<uint8_t> reply(kReplyHeaderBytes);
  r = recvAll(fd, reply.data(), reply.size(), deadline, &why);
  if (r == 0) {
    *error = where + " closed the connection without an answer: it refused this rank's proof of the id's secret "
                     "(an id altered on the way?), or it stopped";
    return RendezvousStatus::kRefused;
  }
  if (r < 0) {
    *error = "no answer from " + where + " (" + why + ")";
    return RendezvousStatus::kTimeout;
  }
  const uint32_t status = get<uint32_t>(reply.data() + 8);
  const uint32_t count = get<uint32_t>(reply.data() + 12);
  const uint32_t answerBytes = get<uint32_t>(reply.data() + 16);
  const uint32_t messageBytes = get<uint32_t>(reply.data() + 20);
  if (get<uint64_t>(reply.data()) != kReplyMagic || count > static_cast<uint32_t>(kMaxRanks) ||
      answerBytes > kMaxBlob || messageBytes > kMaxBlob) {
    *error = "a malformed answer from " + where;
    return RendezvousStatus::kRefused;
  }
  const size_t rest = size_t{count} * 8 + answerBytes + messageBytes + 32;
  reply.resize(kReplyHeaderBytes + rest);
  r = recvAll(fd, reply.data() + kReplyHeaderBytes, rest, deadline, &why);
  if (r <= 0) {
    *error = "the answer from " + where + " was cut short (" + (r == 0 ? std::string("closed") : why) + ")";
    return r == 0 ? RendezvousStatus::kRefused : RendezvousStatus::kTimeout;
  }
  const size_t body = reply.size() - 32;
  Mac expect = mac(secret, "conccl-shim rendezvous reply", id.nonce, mine.data(), reply.data(), body);
  if (!equalConstantTime(expect.data(), reply.data() + body, 32)) {
    *error = "the answer from " + rendezvousAddress(id) + " does not prove the id's secret: refused";
    return RendezvousStatus::kRefused;
  }
  const uint8_t* p = reply.data() + kReplyHeaderBytes;
  std::vector<uint64_t> hosts(count);
  for (uint32_t i = 0; i < count; ++i) hosts[i] = get<uint64_t>(p + 8 * size_t{i});
  p += size_t{count} * 8;
  std::string answer(reinterpret_cast<const char*>(p), answerBytes);
  std::string message(reinterpret_cast<const char*>(p + answerBytes), messageBytes);
  if (status != static_cast<uint32_t>(RendezvousStatus::kOk)) {
    *error = where + ": " + message;
    return status <= static_cast<uint32_t>(RendezvousStatus::kSocketError) ? static_cast<RendezvousStatus>(status)
                                                                           : RendezvousStatus::kSocketError;
  }
  if (count != static_cast<uint32_t>(nranks)) {
    *error = where + " answered for " + std::to_string(count) + " ranks, this rank expected " + std::to_string(nranks);
    return RendezvousStatus::kBadUsage;
  }
  out->hosts = std::move(hosts);
  out->answer = std::move(answer);
  out->link = closer.fd;  // the caller keeps it (a watched answer) or closes it
  closer.fd = -1;
  return RendezvousStatus::kOk;
}

}  // namespace

const char* rendezvousStatusName(RendezvousStatus s) {
  switch (s) {
    case RendezvousStatus::kOk:
      return "ok";
    case RendezvousStatus::kTimeout:
      return "timeout";
    case RendezvousStatus::kBadUsage:
      return "invalid usage";
    case RendezvousStatus::kAnswerFailed:
      return "answer failed";
    case RendezvousStatus::kRefused:
      return "refused";
    case RendezvousStatus::kSocketError:
      return "system error";
  }
  return "invalid";
}

void encodeRendezvousId(const RendezvousId& id, char* out) {
  std::memset(out, 0, kRendezvousIdBytes);
  std::vector<uint8_t> b;
  put(&b, kIdVersion);
  put(&b, id.ipv4);
  put(&b, id.port);
  put(&b, static_cast<uint16_t>(0));
  put(&b, id.timeoutMs);
  b.insert(b.end(), id.secret.begin(), id.secret.end());
  b.insert(b.end(), id.nonce.begin(), id.nonce.end());
  std::memcpy(out, b.data(), b.size());
  std::memcpy(out + kRendezvousIdBytes - 8, &kRendezvousIdTag, 8);
}

std::optional<RendezvousId> decodeRendezvousId(const char* in) {
  if (classifyId(in, kRendezvousIdBytes) != IdKind::kRendezvous) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(in);
  if (get<uint32_t>(p) != kIdVersion) return std::nullopt;
  RendezvousId id;
  id.ipv4 = get<uint32_t>(p + 4);
  id.port = get<uint16_t>(p + 8);
  id.timeoutMs = get<uint32_t>(p + 12);
  std::memcpy(id.secret.data(), p + 16, 16);
  std::memcpy(id.nonce.data(), p + 32, 16);
  if (id.port == 0 || id.timeoutMs == 0) return std::nullopt;
  return id;
}

void keepRendezvousRoot(std::unique_ptr<RendezvousRoot> root, const std::function<void(const std::string&)>& outcome) {
  static std::mutex mutex;
  static auto* roots = new std::vector<std::unique_ptr<RendezvousRoot>>;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = roots->begin(); it != roots->end();) {
    if ((*it)->finished()) {
      if (!(*it)->outcome().empty() && outcome) outcome("rendezvous " + rendezvousAddress((*it)->id()) + ": " + (*it)->outcome());
      it = roots->erase(it);  // joins a thread that has ended
    } else {
      ++it;
    }
  }
  roots->push_back(std::move(root));
}

std::string rendezvousAddress(const RendezvousId& id) { return formatIpv4(id.ipv4) + ":" + std::to_string(id.port); }

std::vector<NetInterface> listInterfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    NetInterface f;
    f.name = a->ifa_name ? a->ifa_name : "";
    f.ipv4 = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    if (a->ifa_netmask != nullptr) f.netmask = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
    f.up = (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_RUNNING) != 0;
    f.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(f);
  }
  freeifaddrs(list);
  return out;
}

std::unique_ptr<RendezvousRoot> RendezvousRoot::start(uint32_t ipv4, std::chrono::milliseconds timeout, Answer answer,
                                                      std::string* error, Watch watch) {
  std::unique_ptr<RendezvousRoot> root(new RendezvousRoot);
  root->answer_ = std::move(answer);
  root->watch_ = std::move(watch);
  root->id_.ipv4 = ipv4;
  root->id_.timeoutMs = static_cast<uint32_t>(std::clamp<long long>(timeout.count(), 1, 0x7fffffff));
  if (!randomBytes(root->id_.secret.data(), 16) || !randomBytes(root->id_.nonce.data(), 16)) {
    *error = errnoText("getrandom");
    return nullptr;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = errnoText("socket");
    return nullptr;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(ipv4);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4096) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *error = "bind/listen on " + formatIpv4(ipv4) + ": " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  root->id_.port = ntohs(addr.sin_port);
  root->wakeFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (root->wakeFd_ < 0) {
    *error = errnoText("eventfd");
    ::close(fd);
    return nullptr;
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(root->id_.timeoutMs);
  RendezvousRoot* self = root.get();
  try {
    root->thread_ = std::thread([self, fd, deadline] { self->run(fd, self->wakeFd_, deadline); });
  } catch (const std::system_error& e) {
    *error = std::string("starting the rendezvous thread: ") + e.what();
    ::close(fd);
    return nullptr;
  }
  return root;
}

RendezvousRoot::~RendezvousRoot() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    if (::write(wakeFd_, &one, sizeof(one)) < 0) {
      // The eventfd cannot be full with one write; the thread ends at its deadline in any case.
    }
    thread_.join();
  }
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

std::string RendezvousRoot::outcome() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return outcome_;
}

void RendezvousRoot::run(int listenFd, int wakeFd, Clock::time_point deadline) {
  std::vector<Conn> conns;
  int nranks = 0;
  std::map<int, size_t> byRank;  // rank -> index in conns (valid hellos whose connection is open)
  std::string outcome;
  const std::string where = rendezvousAddress(id_);

  auto closeConn = [&](size_t i) {
    if (conns[i].arrived) byRank.erase(conns[i].rank);
    ::close(conns[i].fd);
    conns[i].fd = -1;
  };
  auto replyAll = [&](RendezvousStatus status, const std::vector<uint64_t>& hosts, const std::string& answer,
                      const std::string& message) {
    // Every rank whose hello was valid hears the outcome (two claiming one rank number both hear the failure).
    for (const Conn& c : conns) {
      if (!c.arrived || c.fd < 0) continue;
      std::vector<uint8_t> reply =
          makeReply(id_.secret, id_.nonce, c.rankChallenge.data(), status, hosts, answer, message);
      sendAll(c.fd, reply.data(), reply.size(), Clock::now() + kSendBound);
    }
  };

  while (true) {
    // Drop closed connections.
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.fd < 0; }), conns.end());
    byRank.clear();
    for (size_t i = 0; i < conns.size(); ++i) {
      if (conns[i].arrived) byRank[conns[i].rank] = i;
    }
    if (nranks > 0 && static_cast<int>(byRank.size()) == nranks) {
      std::vector<uint64_t> hosts(static_cast<size_t>(nranks));
      for (auto& [rank, i] : byRank) hosts[static_cast<size_t>(rank)] = conns[i].host;
      std::string answer, error;
      bool ok = false;
      try {
        ok = answer_(hosts, &answer, &error);
      } catch (const std::exception& e) {
        error = std::string("the root's answer threw: ") + e.what();
      }
      if (ok && answer.size() > kMaxBlob) {
        ok = false;
        error = "the root's answer is too long";
      }
      if (ok) {
        replyAll(RendezvousStatus::kOk, hosts, answer, "");
        if (watch_ && watch_(answer)) {
          std::vector<int> fds(static_cast<size_t>(nranks), -1);
          for (auto& [rank, i] : byRank) std::swap(fds[static_cast<size_t>(rank)], conns[i].fd);
          watchRanks(std::move(fds), wakeFd);
        }
      } else {
        replyAll(RendezvousStatus::kAnswerFailed, {}, "", error);
        outcome = error;
      }
      break;
    }
    const int ms = remainingMs(deadline);
    if (ms == 0) {
      std::vector<int> missing;
      for (int r = 0; r < nranks; ++r) {
        if (!byRank.count(r)) missing.push_back(r);
      }
      outcome = nranks == 0 ? "no rank reached the rendezvous at " + where + " within " +
                                  std::to_string(id_.timeoutMs) + " ms"
                            : "rank" + std::string(missing.size() > 1 ? "s " : " ") + rankList(missing) + " (" +
                                  std::to_string(missing.size()) + " of " + std::to_string(nranks) +
                                  ") did not reach the rendezvous at " + where + " within " +
                                  std::to_string(id_.timeoutMs) + " ms (CONCCL_TIMEOUT_MS)";
      replyAll(RendezvousStatus::kTimeout, {}, "", outcome);
      break;
    }
    std::vector<pollfd> fds;
    fds.push_back({listenFd, POLLIN, 0});
    fds.push_back({wakeFd, POLLIN, 0});
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    int pr = ::poll(fds.data(), fds.size(), ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      outcome = errnoText("poll");
      replyAll(RendezvousStatus::kSocketError, {}, "", "the rendezvous root failed: " + outcome);
      break;
    }
    if (fds[1].revents != 0) {
      outcome = "stopped before every rank arrived";
      break;
    }
    std::string failure;
    for (size_t k = 2; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Conn& c = conns[k - 2];
      if (c.arrived) {
        // Nothing more is expected from an arrived rank: data or a close ends it (a rank that died frees its slot,
        // so that a restarted process can take it).
        closeConn(k - 2);
        continue;
      }
      uint8_t buf[kHelloBytes];
      ssize_t r = ::recv(c.fd, buf, kHelloBytes - c.hello.size(), 0);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) {
        closeConn(k - 2);
        continue;
      }
      c.hello.insert(c.hello.end(), buf, buf + r);
      if (c.hello.size() < kHelloBytes) continue;
      const uint8_t* h = c.hello.data();
      Mac expect = mac(id_.secret, "conccl-shim rendezvous hello", id_.nonce, c.challenge.data(), h, kHelloBodyBytes);
      if (get<uint64_t>(h) != kHelloMagic || !equalConstantTime(expect.data(), h + kHelloBodyBytes, 32)) {
        ++refused_;  // not a rank of this id: it gets nothing, not even an error
        closeConn(k - 2);
        continue;
      }
      const int rank = get<int32_t>(h + 8);
      const int n = get<int32_t>(h + 12);
      if (n < 1 || n > kMaxRanks || rank < 0 || rank >= n) {
        failure = "a rank said it is rank " + std::to_string(rank) + " of " + std::to_string(n);
      } else if (nranks != 0 && n != nranks) {
        failure = "rank " + std::to_string(rank) + " says nranks " + std::to_string(n) + ", an earlier rank said " +
                  std::to_string(nranks);
      } else if (byRank.count(rank)) {
        failure = "two processes both called ncclCommInitRank as rank " + std::to_string(rank);
      }
      c.arrived = true;  // it hears the failure below, if there is one
      c.rank = rank;
      c.host = get<uint64_t>(h + 16);
      std::memcpy(c.rankChallenge.data(), h + 24, 16);
      if (!failure.empty()) break;
      nranks = n;
      byRank[rank] = k - 2;
    }
    if (!failure.empty()) {
      outcome = failure;
      replyAll(RendezvousStatus::kBadUsage, {}, "", failure);
      break;
    }
    if (fds[0].revents != 0) {
      int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        setNoDelay(fd);
        Conn c;
        c.fd = fd;
        std::vector<uint8_t> msg;
        put(&msg, kChallengeMagic);
        if (!randomBytes(c.challenge.data(), 16)) {
          ::close(fd);
          continue;
        }
        msg.insert(msg.end(), c.challenge.begin(), c.challenge.end());
        if (!sendAll(fd, msg.data(), msg.size(), Clock::now() + kSendBound)) {
          ::close(fd);
          continue;
        }
        conns.push_back(std::move(c));
      }
    }
  }
  for (Conn& c : conns) {
    if (c.fd >= 0) ::close(c.fd);
  }
  ::close(listenFd);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outcome_ = outcome;
  }
  finished_ = true;
}

void RendezvousRoot::watchRanks(std::vector<int> fds, int wakeFd) {
  std::vector<std::vector<uint8_t>> partial(fds.size());
  auto tellOthers = [&](watch_wire::Kind kind, int about) {
    uint8_t frame[watch_wire::kFrameBytes];
    watch_wire::encode({kind, about}, frame);
    for (size_t r = 0; r < fds.size(); ++r) {
      // A rank that died too (a node holds several) refuses the write: MSG_NOSIGNAL, and it does not matter.
      if (fds[r] >= 0 && static_cast<int>(r) != about) sendAll(fds[r], frame, sizeof(frame), Clock::now() + kSendBound);
    }
  };
  bool over = false;
  while (!over) {
    std::vector<pollfd> p;
    std::vector<size_t> rankOf;
    p.push_back({wakeFd, POLLIN, 0});
    for (size_t r = 0; r < fds.size(); ++r) {
      if (fds[r] < 0) continue;
      p.push_back({fds[r], POLLIN, 0});
      rankOf.push_back(r);
    }
    if (rankOf.empty()) break;
    // No deadline: the watch lasts as long as the communicator. The RendezvousRoot's destructor wakes it.
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      tellOthers(watch_wire::kEnded, -1);  // cannot watch any more: say so rather than fall silent
      break;
    }
    if (p[0].revents != 0) {
      tellOthers(watch_wire::kEnded, -1);
      break;
    }
    for (size_t k = 1; k < p.size() && !over; ++k) {
      if (p[k].revents == 0) continue;
      const size_t r = rankOf[k - 1];
      uint8_t buf[watch_wire::kFrameBytes];
      const ssize_t got = ::recv(fds[r], buf, watch_wire::kFrameBytes - partial[r].size(), MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (got <= 0) {
        // Closed without a bye: the rank's process ended (the kernel closes its sockets, SIGKILL included).
        ::close(fds[r]);
        fds[r] = -1;
        tellOthers(watch_wire::kDied, static_cast<int>(r));
        over = true;
        break;
      }
      partial[r].insert(partial[r].end(), buf, buf + got);
      if (partial[r].size() < watch_wire::kFrameBytes) continue;
      // A bye (or anything else from a rank that proved the secret at its hello): the watch is over for every rank.
      tellOthers(watch_wire::kEnded, static_cast<int>(r));
      over = true;
    }
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

RendezvousStatus rendezvous(const RendezvousId& id, int rank, int nranks, uint64_t host, RendezvousResult* out,
                            std::string* error) {
  return rendezvousImpl(id, id.secret, rank, nranks, host, out, error);
}

RendezvousStatus rendezvousWithSecret(const RendezvousId& id, const std::array<uint8_t, 16>& secret, int rank,
                                      int nranks, uint64_t host, RendezvousResult* out, std::string* error) {
  return rendezvousImpl(id, secret, rank, nranks, host, out, error);
}

}  // namespace conccl::nccl
