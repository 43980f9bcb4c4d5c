// cpp-httplib's Server with furlong's connection handling (what cpp-httplib 0.11 lacks):
// - it binds without SO_REUSEPORT (cpp-httplib's default on Linux), so a second server on a
//   port in use fails to bind instead of silently taking half of its connections; SO_REUSEADDR
//   stays, so a restart binds while old connections sit in TIME_WAIT;
// - connections wait for their request header in a ConnectionGate, not on a handler thread;
// - requests are read through a RequestStream, which bounds every body framing;
// - an exception that escapes a request (say std::bad_alloc while a response streams) closes
//   that connection (after a 503 if nothing was sent yet) instead of terminating the process.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/server/connection_gate.h"
#include "engine/server/request_stream.h"

namespace furlong::engine::server {

class HttpServer : public httplib::Server {
 public:
  HttpServer();
  ~HttpServer() override;

  // Before bind(): how connections wait and how bodies are bounded.
  void configure(const GateOptions& gate, int64_t max_body_bytes);
  // Binds host:port (0: any free port) and returns the port; furlong::Error naming the address
  // and the reason ("address already in use", ...) if it cannot.
  int bind(const std::string& host, int port);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of connections (32 rollout workers
  // at once) overflows it, and the kernel then drops handshakes (1 s retransmits) or whole
  // requests. listen() again on the bound socket raises the backlog to the system's maximum.
  void widen_backlog();
  // Stops accepting (httplib::Server::stop) and then closes waiting connections and joins the
  // handler threads; call after the listening thread has returned.
  void stop_gate();

  // The stream of the request this thread is serving (null outside one): the error and
  // pre-routing handlers see through it whether the body passed the limit or was read whole.
  static RequestStream* current_stream();

 private:
  bool process_and_close_socket(socket_t sock) override;  // hands the socket to the gate
  bool serve(GatedConnection& c);

  RequestStream::Limits stream_limits_;
  std::unique_ptr<ConnectionGate> gate_;
};

}  // namespace furlong::engine::server
