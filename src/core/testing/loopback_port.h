// loopbackPortOutsideEphemeralRange: a TCP port on 127.0.0.1 for a test server that must be told
// its port before it starts (etcd, postgres, a server restarted on the same address).
//
// The usual trick, bind to port 0 and close, takes the port from the kernel's ephemeral range,
// the same range every outgoing connection draws its local port from. With tests running side by
// side, making thousands of loopback connections, a port picked that way is soon some client's
// again, and the server that was meant to have it fails with EADDRINUSE. Ports below the
// ephemeral range are handed to no client; the pick is random there and checked free by binding.
// Another process can still take the port between the check and the server's bind (rarely: it
// would have to pick the same number), so callers that can retry still should.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>

namespace tessera::core::testing {

// True when a listener could bind 127.0.0.1:port now.
inline bool loopbackPortBindable(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return false;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // As servers bind.
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// The kernel's pick for port 0 (0 if it has none): the fallback when no port outside the
// ephemeral range is free.
inline uint16_t kernelPickedLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return 0;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// A port on 127.0.0.1 that was free a moment ago and that no outgoing connection will be given
// (0 if none could be found).
inline uint16_t loopbackPortOutsideEphemeralRange() {
  int low = 32768;  // Linux's default range is 32768-60999.
  int high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(range >> low >> high) || low > high) {
    low = 32768;
    high = 60999;
  }
  // Above 10000 stays clear of well-known and commonly configured services.
  constexpr int kFloor = 10000;
  int first = kFloor;
  int last = low - 1;
  if (last - first < 1000) {  // A range that starts low: use the ports above it.
    first = high + 1;
    last = 65535;
  }
  if (last - first >= 1000) {
    thread_local std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<int> pick(first, last);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const auto port = static_cast<uint16_t>(pick(rng));
      if (loopbackPortBindable(port)) {
        return port;
      }
    }
  }
  return kernelPickedLoopbackPort();
}

}  // namespace tessera::core::testing
