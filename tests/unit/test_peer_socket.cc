// base/peer_socket.h: abstract SOCK_SEQPACKET sockets, the kernel's word for the peer (SO_PEERCRED), descriptors
// passed with SCM_RIGHTS, every wait bounded. Descriptors are counted in /proc/self/fd so that a leak fails a test.
#include "base/peer_socket.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"

namespace conccl::peersock {
namespace {

using namespace std::chrono_literals;

std::string freshName(const char* what) {
  std::random_device rd;
  return std::string("conccl-test-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
}

size_t openDescriptors() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n;
}

// A connected pair through a listener on a fresh name: (client, server side).
std::pair<OwnedFd, OwnedFd> connectedPair() {
  const std::string name = freshName("pair");
  OwnedFd listener = listenAbstract(name, 4);
  OwnedFd client = connectAbstract(name, Clock::now() + 2s);
  OwnedFd server;
  const auto until = Clock::now() + 2s;
  while (server.get() < 0 && Clock::now() < until) server = acceptPending(listener.get());
  EXPECT_GE(server.get(), 0);
  return {std::move(client), std::move(server)};
}

TEST(PeerSocket, TheKernelNamesThePeerOnBothEnds) {
  auto [client, server] = connectedPair();
  for (int fd : {client.get(), server.get()}) {
    const PeerCred c = peerCredOf(fd);
    EXPECT_EQ(c.pid, static_cast<int64_t>(::getpid()));
    EXPECT_EQ(c.uid, static_cast<uint32_t>(::getuid()));
  }
}

TEST(PeerSocket, ANameIsHeldByOneListener) {
  const std::string name = freshName("twice");
  OwnedFd first = listenAbstract(name, 4);
  try {
    OwnedFd second = listenAbstract(name, 4);
    FAIL() << "a second listener took the name";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclSystemError);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(PeerSocket, ConnectingToNoListenerFailsAtOnce) {
  const auto t0 = Clock::now();
  EXPECT_THROW(connectAbstract(freshName("nobody"), Clock::now() + 2s), Error);
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(PeerSocket, MessagesKeepTheirBoundaries) {
  auto [client, server] = connectedPair();
  sendMessage(client.get(), "first", {}, Clock::now() + 1s);
  sendMessage(client.get(), std::string(1000, 'x'), {}, Clock::now() + 1s);
  std::vector<OwnedFd> fds;
  EXPECT_EQ(recvMessage(server.get(), 4096, 0, &fds, Clock::now() + 1s), "first");
  EXPECT_EQ(recvMessage(server.get(), 4096, 0, &fds, Clock::now() + 1s), std::string(1000, 'x'));
  EXPECT_TRUE(fds.empty());
}

TEST(PeerSocket, DescriptorsArriveAndWork) {
  auto [client, server] = connectedPair();
  // Pipes: what is written through the received write end comes out of the read end kept here.
  std::vector<int> readEnds, writeEnds;
  for (size_t i = 0; i < kMaxFdsPerMessage; ++i) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    readEnds.push_back(p[0]);
    writeEnds.push_back(p[1]);
  }
  sendMessage(client.get(), "pipes", writeEnds, Clock::now() + 1s);
  for (int w : writeEnds) ::close(w);
  std::vector<OwnedFd> got;
  ASSERT_EQ(recvMessage(server.get(), 64, kMaxFdsPerMessage, &got, Clock::now() + 1s), "pipes");
  ASSERT_EQ(got.size(), kMaxFdsPerMessage);
  for (size_t i = 0; i < got.size(); ++i) {
    const char c = static_cast<char>('a' + i % 26);
    ASSERT_EQ(::write(got[i].get(), &c, 1), 1);
    char back = 0;
    ASSERT_EQ(::read(readEnds[i], &back, 1), 1);
    EXPECT_EQ(back, c) << "descriptor " << i << " arrived out of order";
    ::close(readEnds[i]);
  }
}

TEST(PeerSocket, UnwantedDescriptorsAreClosedNotLeaked) {
  auto [client, server] = connectedPair();
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const size_t before = openDescriptors();
  sendMessage(client.get(), "two", {p[0], p[1]}, Clock::now() + 1s);
  std::vector<OwnedFd> got;
  EXPECT_THROW(recvMessage(server.get(), 64, 1, &got, Clock::now() + 1s), Error);  // wanted at most one
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(openDescriptors(), before);
  ::close(p[0]);
  ::close(p[1]);
}

TEST(PeerSocket, ALongerMessageThanExpectedIsRefused) {
  auto [client, server] = connectedPair();
  sendMessage(client.get(), std::string(100, 'y'), {}, Clock::now() + 1s);
  std::vector<OwnedFd> got;
  try {
    recvMessage(server.get(), 10, 0, &got, Clock::now() + 1s);
    FAIL() << "a 100-byte message was taken for a 10-byte one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("longer than 10"), std::string::npos) << e.what();
  }
}

TEST(PeerSocket, WaitsAreBoundedAndAClosedPeerIsReported) {
  auto [client, server] = connectedPair();
  std::vector<OwnedFd> got;
  const auto t0 = Clock::now();
  EXPECT_THROW(recvMessage(server.get(), 64, 0, &got, Clock::now() + 200ms), Error);
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, 190ms);
  EXPECT_LT(waited, 2s);
  client.reset();
  try {
    recvMessage(server.get(), 64, 0, &got, Clock::now() + 1s);
    FAIL() << "a closed peer gave a message";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
  }
}

TEST(PeerSocket, AnotherProcessIsNamedByItsOwnPid) {
  const std::string name = freshName("fork");
  OwnedFd listener = listenAbstract(name, 4);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: connect, send one descriptor (its stdin duplicate), wait for the parent to close, exit.
    int rc = 1;
    try {
      OwnedFd c = connectAbstract(name, Clock::now() + 5s);
      sendMessage(c.get(), "child", {0}, Clock::now() + 5s);
      std::vector<OwnedFd> none;
      (void)recvMessage(c.get(), 8, 0, &none, Clock::now() + 5s);
    } catch (const Error&) {
      rc = 0;  // the parent closed: expected
    }
    ::_exit(rc);
  }
  OwnedFd conn;
  const auto until = Clock::now() + 5s;
  while (conn.get() < 0 && Clock::now() < until) {
    conn = acceptPending(listener.get());
    if (conn.get() < 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_GE(conn.get(), 0);
  EXPECT_EQ(peerCredOf(conn.get()).pid, static_cast<int64_t>(child));
  std::vector<OwnedFd> got;
  EXPECT_EQ(recvMessage(conn.get(), 64, 1, &got, Clock::now() + 5s), "child");
  EXPECT_EQ(got.size(), 1u);
  conn.reset();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace conccl::peersock
