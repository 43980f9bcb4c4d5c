#include "engine/server/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/log.h"

namespace furlong::engine::server {
namespace {

thread_local RequestStream* current = nullptr;

// Runs the accept loop's task at once: it only hands the socket to the gate.
class InlineTaskQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The listening socket's options: SO_REUSEADDR only (see http_server.h).
void reuse_address_only(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// Why host:port cannot be bound, found by trying it again (cpp-httplib keeps no errno).
std::string bind_error(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    return std::string("cannot resolve the host: ") + gai_strerror(rc);
  int err = 0;
  int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (fd < 0) {
    err = errno;
  } else {
    reuse_address_only(fd);
    if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0) err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (err == EADDRINUSE) {
    return "address already in use (another server, perhaps a second furlong serve, listens on "
           "port " +
           std::to_string(port) + ")";
  }
  if (err == EADDRNOTAVAIL) return "not an address of this machine";
  if (err == EACCES) return "permission denied (ports below 1024 need privileges)";
  return err != 0 ? std::strerror(err) : "in use, or not an address of this machine";
}

// After an answer to a request whose body was not read (413, 401, ...): stop sending, and
// discard what the client still sends for a moment (bounded), so that closing does not reset
// the connection before the client has read the answer.
void linger(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  char buf[4096];
  for (int i = 0; i < 16 && std::chrono::steady_clock::now() < deadline; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) return;
  }
}

// Writes all of `data` (false if the stream fails).
bool write_all(RequestStream& strm, const char* data, size_t size) {
  for (size_t off = 0, tries = 0; off < size && tries < 1000; ++tries) {
    ssize_t n = strm.write(data + off, size - off);
    if (n < 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// A fixed 503, built without the heap: memory may be what ran out.
void answer_unavailable(RequestStream& strm) {
  static const char kBody[] =
      R"({"error": {"message": "out of memory while serving this request", )"
      R"("type": "unavailable", "code": 503}})";
  char head[160];
  int n = std::snprintf(head, sizeof(head),
                        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                        "Connection: close\r\nContent-Length: %zu\r\n\r\n",
                        sizeof(kBody) - 1);
  if (n > 0 && write_all(strm, head, static_cast<size_t>(n)))
    write_all(strm, kBody, sizeof(kBody) - 1);
}

}  // namespace

HttpServer::HttpServer() {
  set_socket_options(reuse_address_only);
  new_task_queue = [] { return new InlineTaskQueue(); };
}

HttpServer::~HttpServer() {
  stop_gate();
}

void HttpServer::configure(const GateOptions& gate, int64_t max_body_bytes) {
  stream_limits_.max_body_bytes = max_body_bytes;
  stream_limits_.read_timeout_s = static_cast<double>(read_timeout_sec_);
  stream_limits_.write_timeout_s = static_cast<double>(write_timeout_sec_);
  gate_ = std::make_unique<ConnectionGate>(gate, [this](GatedConnection& c) { return serve(c); });
}

int HttpServer::bind(const std::string& host, int port) {
  if (port == 0) {
    int bound = bind_to_any_port(host);
    FURLONG_CHECK(bound > 0, "cannot bind ", host, " (any port): ", bind_error(host, 0));
    return bound;
  }
  FURLONG_CHECK(bind_to_port(host, port), "cannot bind ", host, ":", port, ": ",
                bind_error(host, port));
  return port;
}

void HttpServer::widen_backlog() {
  FURLONG_CHECK(::listen(svr_sock_, SOMAXCONN) == 0, "listen(): ", std::strerror(errno));
}

void HttpServer::stop_gate() {
  if (gate_) gate_->stop();
}

RequestStream* HttpServer::current_stream() {
  return current;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (gate_) {
    gate_->admit(sock);
  } else {
    ::close(sock);
  }
  return true;
}

// One request on a handler thread: cpp-httplib parses, routes and answers it through the
// stream; the connection stays only if its body was read whole and neither side closes.
bool HttpServer::serve(GatedConnection& c) {
  RequestStream strm(c.fd, std::move(c.buffer), stream_limits_);
  c.buffer.clear();
  current = &strm;
  const bool last = svr_sock_ == INVALID_SOCKET || ++c.served >= keep_alive_max_count_;
  bool closed = false, ok = false;
  try {
    ok = process_request(strm, last, closed,
                         [&strm](httplib::Request& req) { strm.expect_body(req); });
  } catch (const std::bad_alloc&) {
    LOG_ERROR("out of memory while serving a request: its connection is closed");
    if (!strm.wrote()) answer_unavailable(strm);
  } catch (const std::exception& e) {
    LOG_ERROR("serving a request failed: ", e.what(), "; its connection is closed");
  } catch (...) {
    LOG_ERROR("serving a request failed (unknown exception); its connection is closed");
  }
  current = nullptr;
  c.buffer = strm.take_unread();
  if (!strm.body_complete()) linger(c.fd);
  return ok && !closed && !last && strm.body_complete();
}

}  // namespace furlong::engine::server
