#include "engine/server/request_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace furlong::engine::server {
namespace {

// A chunk-size line (with extensions) or the line after the last chunk; longer is malformed.
constexpr size_t kMaxChunkLine = 1024;

// Whether `fd` is ready for `events` within `timeout_s` (and not hung up, for POLLOUT).
bool wait_for(int fd, short events, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n > 0) return (p.revents & events) && !(events == POLLOUT && (p.revents & POLLERR));
    if (n == 0 || errno != EINTR || Clock::now() >= deadline) return false;
  }
}

void endpoint(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return;
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof(text));
    port = ntohs(a.sin6_port);
  }
  ip = text;
}

}  // namespace

RequestStream::RequestStream(int fd, std::string prefix, Limits limits)
    : fd_(fd), prefix_(std::move(prefix)), limits_(limits) {}

// As cpp-httplib frames it: chunked wins over a Content-Length (parsed as strtoull does).
void RequestStream::expect_body(const httplib::Request& req) {
  if (strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0) {
    body_ = Body::kChunked;
  } else if (req.has_header("Content-Length")) {
    length_left_ = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    too_large_ = length_left_ > static_cast<uint64_t>(limits_.max_body_bytes);
    body_ = too_large_ ? Body::kRefused : Body::kLength;
  } else {
    body_ = Body::kNone;
  }
}

bool RequestStream::body_complete() const {
  switch (body_) {
    case Body::kNone:
      return true;
    case Body::kLength:
      return length_left_ == 0;
    case Body::kChunked:
      return chunked_complete_;
    default:
      return false;
  }
}

std::string RequestStream::take_unread() {
  std::string rest = prefix_.substr(prefix_used_);
  prefix_.clear();
  prefix_used_ = 0;
  return rest;
}

bool RequestStream::is_readable() const {
  return prefix_used_ < prefix_.size() || wait_for(fd_, POLLIN, limits_.read_timeout_s);
}

bool RequestStream::is_writable() const {
  return wait_for(fd_, POLLOUT, limits_.write_timeout_s);
}

ssize_t RequestStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  switch (body_) {
    case Body::kUnknown:  // the header (cpp-httplib reads it a byte at a time)
      return read_raw(ptr, size);
    case Body::kNone:
      return 0;
    case Body::kRefused:
      return -1;
    case Body::kLength: {
      if (length_left_ == 0) return 0;
      ssize_t n = read_raw(ptr, static_cast<size_t>(std::min<uint64_t>(size, length_left_)));
      if (n > 0) length_left_ -= static_cast<uint64_t>(n);
      return n;
    }
    case Body::kChunked:
      return read_chunked(ptr, size);
  }
  return -1;
}

ssize_t RequestStream::read_raw(char* ptr, size_t size) {
  if (prefix_used_ < prefix_.size()) {
    size_t n = std::min(size, prefix_.size() - prefix_used_);
    std::memcpy(ptr, prefix_.data() + prefix_used_, n);
    prefix_used_ += n;
    return static_cast<ssize_t>(n);
  }
  if (!wait_for(fd_, POLLIN, limits_.read_timeout_s)) return -1;
  ssize_t n;
  do {
    n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
  return n;
}

// Data reads stop at the chunk's end; framing lines go a byte at a time, as cpp-httplib reads
// them, so each line is seen whole before anything past it is read.
ssize_t RequestStream::read_chunked(char* ptr, size_t size) {
  if (chunk_ == Chunk::kDone) return 0;
  if (chunk_ == Chunk::kData) {
    ssize_t n = read_raw(ptr, static_cast<size_t>(std::min<uint64_t>(size, chunk_left_)));
    if (n > 0) chunk_left_ -= static_cast<uint64_t>(n);
    if (chunk_left_ == 0) chunk_ = Chunk::kDataEnd;
    return n;
  }
  ssize_t n = read_raw(ptr, 1);
  if (n <= 0) return n;
  line_ += *ptr;
  if (line_.size() > kMaxChunkLine) return -1;
  if (*ptr == '\n' && !end_of_chunk_line()) return -1;
  return n;
}

bool RequestStream::end_of_chunk_line() {
  const Chunk state = chunk_;
  if (state == Chunk::kDataEnd) {
    chunk_ = Chunk::kSizeLine;
  } else if (state == Chunk::kLastLine) {  // no trailers: cpp-httplib 0.11 takes none
    chunked_complete_ = line_ == "\r\n";
    chunk_ = Chunk::kDone;
  } else {
    char* end = nullptr;
    const uint64_t size = std::strtoull(line_.c_str(), &end, 16);
    if (end == line_.c_str()) {  // malformed: cpp-httplib fails the request itself
      chunk_ = Chunk::kDone;
    } else if (size == 0) {
      chunk_ = Chunk::kLastLine;
    } else if (size > static_cast<uint64_t>(limits_.max_body_bytes) - payload_) {
      too_large_ = true;
    } else {
      payload_ += size;
      chunk_left_ = size;
      chunk_ = Chunk::kData;
    }
  }
  line_.clear();
  return !too_large_;
}

ssize_t RequestStream::write(const char* ptr, size_t size) {
  if (!wait_for(fd_, POLLOUT, limits_.write_timeout_s)) return -1;
  ssize_t n;
  do {
    n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;  // the caller writes again
  if (n > 0) wrote_ = true;
  return n;
}

void RequestStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  endpoint(fd_, true, ip, port);
}

void RequestStream::get_local_ip_and_port(std::string& ip, int& port) const {
  endpoint(fd_, false, ip, port);
}

}  // namespace furlong::engine::server
