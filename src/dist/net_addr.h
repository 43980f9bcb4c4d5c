// Which local address reaches a peer: what a rank tells others to connect to, and what Gloo
// binds, so a run spans hosts without naming interfaces.
#pragma once

#include <string>

namespace furlong::dist {

// True for "localhost", "::1" and 127.0.0.0/8.
bool is_loopback_address(const std::string& host);

// The IPv4 address of this host's interface that routes to `host` (a name or an IPv4 address),
// found by connecting a UDP socket (no packet is sent) and reading its local address; loopback
// when `host` is loopback. furlong::Error naming `host` when it does not resolve or no route
// leads there.
std::string local_address_towards(const std::string& host);

// The IPv4 address of the named interface (GLOO_SOCKET_IFNAME); furlong::Error when it has none.
std::string interface_address(const std::string& ifname);

}  // namespace furlong::dist
