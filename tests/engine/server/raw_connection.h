// A raw loopback TCP connection for tests that must control every byte the server sees
// (partial headers, chunked bodies that never end): bounded sends and reads, never blocking
// past the wait they are given.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

namespace furlong::engine::server::testing {

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }

  // Sends what the socket takes without waiting; false once the server has closed.
  bool send_some(const std::string& data) {
    ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK;
  }
  // Sends all of `data`, waiting at most 2 s for room each time; false if that fails.
  bool send_all(const std::string& data) {
    size_t off = 0;
    for (int tries = 0; off < data.size() && tries < 10000; ++tries) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 2000) <= 0 || !(p.revents & POLLOUT)) return false;
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (n > 0) off += static_cast<size_t>(n);
    }
    return off == data.size();
  }
  // Whether the server sent something or closed within `wait`.
  bool answered_within(std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(wait.count())) > 0;
  }
  // Reads until a whole response (headers and Content-Length body) arrived, the server closed,
  // or `limit` passed.
  std::string read_response(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!complete() && std::chrono::steady_clock::now() < deadline) {
      if (!answered_within(std::chrono::milliseconds(20))) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        received_.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        closed_ = true;
        break;
      }
    }
    return received_;
  }
  // Whether the server closed the connection (EOF or reset) within `limit`, reading and
  // keeping whatever it sent before.
  bool closed_within(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!closed_ && std::chrono::steady_clock::now() < deadline) {
      if (!answered_within(std::chrono::milliseconds(20))) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) received_.append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        closed_ = true;
    }
    return closed_;
  }
  const std::string& received() const { return received_; }

 private:
  bool complete() const {
    auto end = received_.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    auto at = received_.find("Content-Length: ");
    if (at == std::string::npos || at > end) return true;
    size_t length = std::strtoull(received_.c_str() + at + 16, nullptr, 10);
    return received_.size() >= end + 4 + length;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string received_;
};

// The status code of a raw HTTP response ("HTTP/1.1 413 ..."), -1 if there is none.
inline int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return -1;
  return std::atoi(response.c_str() + 9);
}

}  // namespace furlong::engine::server::testing
