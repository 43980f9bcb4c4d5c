// Local addresses towards peers (see net_addr.h).
#include "dist/net_addr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace furlong::dist {

bool is_loopback_address(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string local_address_towards(const std::string& host) {
  if (is_loopback_address(host)) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found);
  FURLONG_CHECK(rc == 0 && found != nullptr, "cannot resolve '", host,
                "' to an IPv4 address: ", ::gai_strerror(rc),
                " (MASTER_ADDR must name a host every rank can reach)");
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  int err = errno;
  ::freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  ok = ok && ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  if (!ok) err = errno;
  if (fd >= 0) ::close(fd);
  FURLONG_CHECK(ok, "no route from this host to '", host, "': ", std::strerror(err),
                " (set GLOO_SOCKET_IFNAME to the interface that reaches it)");
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

std::string interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  FURLONG_CHECK(::getifaddrs(&list) == 0, "cannot list network interfaces: ", std::strerror(errno));
  std::string address;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (ifname != i->ifa_name) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                sizeof(text));
    address = text;
    break;
  }
  ::freeifaddrs(list);
  FURLONG_CHECK(!address.empty(), "network interface '", ifname,
                "' (GLOO_SOCKET_IFNAME) has no IPv4 address on this host");
  return address;
}

}  // namespace furlong::dist
