#include "engine/server/connection_gate.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace furlong::engine::server {
namespace {

using Clock = std::chrono::steady_clock;

// A short error answer, sent without waiting (the connection is closed right after).
void reply(int fd, int status, const char* reason, const std::string& message) {
  std::string body = R"({"error": {"message": ")" + message +
                     R"(", "type": "invalid_request_error", "code": )" + std::to_string(status) +
                     "}}";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                         "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         "Content-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body;
  [[maybe_unused]] ssize_t n =
      ::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool has_whole_header(const std::string& buffer, size_t from = 0) {
  return buffer.find("\r\n\r\n", from) != std::string::npos;
}

}  // namespace

GatedConnection::GatedConnection(int socket_fd) : fd(socket_fd), since(Clock::now()) {}

GatedConnection::~GatedConnection() {
  if (fd >= 0) ::close(fd);
}

ConnectionGate::ConnectionGate(GateOptions options, Serve serve)
    : options_(options), serve_(std::move(serve)), handlers_(options.handler_threads) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  FURLONG_CHECK(wake_fd_ >= 0, "eventfd(): ", std::strerror(errno));
  poller_ = std::thread([this] { poll_loop(); });
}

ConnectionGate::~ConnectionGate() {
  stop();
}

void ConnectionGate::admit(int fd) {
  enqueue(std::make_shared<GatedConnection>(fd));
}

void ConnectionGate::stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  poller_.join();
  handlers_.shutdown();  // queued requests are closed unserved, running ones finish
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.clear();
  }
  waiting_.clear();
  ::close(wake_fd_);
}

void ConnectionGate::enqueue(Connection c) {
  if (stopping_) return;  // dropping it closes it
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    inbox_.push_back(std::move(c));
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void ConnectionGate::poll_loop() {
  std::vector<pollfd> fds;
  while (!stopping_) {
    take_inbox();
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    for (const auto& c : waiting_) fds.push_back(pollfd{c->fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now())) < 0 && errno != EINTR) {
      LOG_WARN("connection gate: poll(): ", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof(count));
    }
    const auto now = Clock::now();
    std::vector<Connection> still;
    for (size_t i = 0; i < waiting_.size(); ++i) {
      Connection& c = waiting_[i];
      Read r = fds[i + 1].revents ? read_more(*c) : Read::kWait;
      if (r == Read::kReady) {
        dispatch(std::move(c));
      } else if (r == Read::kWait && now <= deadline(*c)) {
        still.push_back(std::move(c));
      } else if (r == Read::kWait && !c->buffer.empty()) {
        reply(c->fd, 408, "Request Timeout",
              "the request header did not arrive within --header-timeout (" +
                  std::to_string(options_.header_timeout_s) + " s)");
      }
    }
    waiting_ = std::move(still);
  }
}

void ConnectionGate::take_inbox() {
  std::vector<Connection> arrived;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    arrived.swap(inbox_);
  }
  for (auto& c : arrived) wait_or_dispatch(std::move(c));
}

// A connection back from a request may hold the next request whole (pipelined); a new one
// waits, and beyond the bound the connection waiting longest is closed.
void ConnectionGate::wait_or_dispatch(Connection c) {
  if (has_whole_header(c->buffer)) return dispatch(std::move(c));
  if (waiting_.size() >= options_.max_waiting) {
    auto oldest = std::min_element(
        waiting_.begin(), waiting_.end(),
        [](const Connection& a, const Connection& b) { return a->since < b->since; });
    waiting_.erase(oldest);
  }
  waiting_.push_back(std::move(c));
}

ConnectionGate::Read ConnectionGate::read_more(GatedConnection& c) {
  char buf[8192];
  const size_t room = options_.max_header_bytes - c.buffer.size();
  ssize_t n = ::recv(c.fd, buf, std::min(sizeof(buf), room), MSG_DONTWAIT);
  if (n == 0) return Read::kClose;
  if (n < 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Read::kWait : Read::kClose;
  }
  if (c.kept_alive && c.buffer.empty()) c.since = Clock::now();  // a next request begins
  c.kept_alive = false;
  const size_t from = c.buffer.size() >= 3 ? c.buffer.size() - 3 : 0;
  c.buffer.append(buf, static_cast<size_t>(n));
  if (has_whole_header(c.buffer, from)) return Read::kReady;
  if (c.buffer.size() < options_.max_header_bytes) return Read::kWait;
  reply(c.fd, 431, "Request Header Fields Too Large",
        "the request line and headers are longer than " +
            std::to_string(options_.max_header_bytes) + " bytes");
  return Read::kClose;
}

Clock::time_point ConnectionGate::deadline(const GatedConnection& c) const {
  const bool idle = c.kept_alive && c.buffer.empty();
  const std::chrono::duration<double> limit(idle ? options_.keep_alive_timeout_s
                                                 : options_.header_timeout_s);
  return c.since + std::chrono::duration_cast<Clock::duration>(limit);
}

// Until the nearest deadline (at most 1 s: admit() and stop() wake the loop anyway).
int ConnectionGate::poll_timeout_ms(Clock::time_point now) const {
  auto wait = std::chrono::milliseconds(1000);
  for (const auto& c : waiting_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline(*c) - now) +
                std::chrono::milliseconds(1);
    wait = std::clamp(left, std::chrono::milliseconds(0), wait);
  }
  return static_cast<int>(wait.count());
}

void ConnectionGate::dispatch(Connection c) {
  handlers_.enqueue([this, c] {
    bool keep = false;
    try {
      keep = !stopping_ && serve_(*c);
    } catch (...) {
      keep = false;  // serve_ answers what it can; the connection just closes
    }
    if (!keep || stopping_) return;
    c->since = Clock::now();
    c->kept_alive = true;
    enqueue(c);
  });
}

}  // namespace furlong::engine::server
