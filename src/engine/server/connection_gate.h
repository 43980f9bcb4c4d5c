// Where connections wait for a request header without holding a handler thread (slowloris
// defence). One thread polls every waiting connection and reads what arrives; a connection is
// handed to a handler thread only once its request line and headers are complete. A header
// that does not complete within the header timeout is answered 408 and closed, an idle
// kept-alive connection is closed after the keep-alive timeout, and beyond a bound on waiting
// connections the one waiting longest is closed. So connections that trickle header bytes
// cost a descriptor and a poll entry each, and authenticated requests are still served.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace furlong::engine::server {

struct GateOptions {
  double header_timeout_s = 10;     // request line + headers, from accept or the first byte
  double keep_alive_timeout_s = 5;  // a kept-alive connection's wait for a next request
  size_t max_waiting = 512;         // connections waiting for a header
  size_t max_header_bytes = 32 << 10;
  size_t handler_threads = 256;
};

// A client connection and the bytes read from it that no request has consumed yet.
struct GatedConnection {
  explicit GatedConnection(int socket_fd);
  ~GatedConnection();  // closes the socket
  GatedConnection(const GatedConnection&) = delete;
  GatedConnection& operator=(const GatedConnection&) = delete;

  int fd;
  std::string buffer;
  std::chrono::steady_clock::time_point since;  // when this wait began
  bool kept_alive = false;                      // waiting for a request after a response
  size_t served = 0;                            // requests served on it
};

class ConnectionGate {
 public:
  // Serves one request on a handler thread (its header is in the connection's buffer); true
  // keeps the connection, which then waits here for its next request.
  using Serve = std::function<bool(GatedConnection&)>;

  ConnectionGate(GateOptions options, Serve serve);
  ~ConnectionGate();  // stop()s
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Takes a newly accepted socket (closed at once after stop()).
  void admit(int fd);
  // Closes the waiting connections and joins the threads; requests being served finish.
  void stop();

 private:
  using Connection = std::shared_ptr<GatedConnection>;
  enum class Read { kWait, kReady, kClose };

  void enqueue(Connection c);
  void poll_loop();
  void take_inbox();
  void wait_or_dispatch(Connection c);
  Read read_more(GatedConnection& c);
  // Header timeout from `since`, or the keep-alive timeout while a kept-alive one is idle.
  std::chrono::steady_clock::time_point deadline(const GatedConnection& c) const;
  int poll_timeout_ms(std::chrono::steady_clock::time_point now) const;
  void dispatch(Connection c);

  GateOptions options_;
  Serve serve_;
  int wake_fd_ = -1;  // eventfd: admit() and stop() wake the poll thread
  std::mutex inbox_mutex_;
  std::vector<Connection> inbox_;
  std::vector<Connection> waiting_;  // poll thread only
  std::atomic<bool> stopping_{false};
  httplib::ThreadPool handlers_;
  std::thread poller_;
};

}  // namespace furlong::engine::server
