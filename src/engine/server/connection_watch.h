// Notices when the client of a request being handled hangs up, so a handler blocked on a long
// generation can abort it. cpp-httplib does not hand handlers their socket, so the watch finds
// it among this process's descriptors by its two endpoints (unique while the connection lives,
// and the connection lives at least as long as its handler).
#pragma once

#include <string>

namespace furlong::engine::server {

class ConnectionWatch {
 public:
  ConnectionWatch(const std::string& remote_addr, int remote_port, int local_port);
  // Whether the socket was found (if not, peer_closed() is always false).
  bool found() const { return fd_ >= 0; }
  // True once the peer has closed its side or reset the connection.
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

}  // namespace furlong::engine::server
