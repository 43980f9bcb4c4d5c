// A minimal blocking WebSocket client (RFC 6455) for OpenEnv's session endpoint (`/ws`): one
// connection, text messages only, driven by one thread at a time. ws:// only (plain TCP).
//
// Every call is bounded by a deadline (connect + handshake, or one send, or one whole message),
// and a received message by a size: nothing waits forever and nothing grows without bound.
// Client frames are masked (as the RFC requires); server frames must not be. Pings are answered
// with pongs while a message is awaited; a close frame from the server ends the connection.
// Failures come back as WsResult with an error text (never thrown), so an episode whose
// connection breaks ends while the run goes on.
#pragma once

#include <cstdint>
#include <string>

namespace furlong::rollout {

struct WsResult {
  bool ok = false;
  bool timed_out = false;  // the deadline passed first
  bool too_large = false;  // the message was over the size bound
  std::string error;       // !ok: what went wrong
  std::string text;        // receive(): the message
};

class WebSocketClient {
 public:
  WebSocketClient() = default;
  ~WebSocketClient();
  WebSocketClient(const WebSocketClient&) = delete;
  WebSocketClient& operator=(const WebSocketClient&) = delete;

  // Connects to ws://host:port/path and completes the opening handshake (the server's
  // Sec-WebSocket-Accept is checked) within `timeout_s`.
  WsResult connect(const std::string& host, int port, const std::string& path, double timeout_s);
  // Sends one text message within `timeout_s`.
  WsResult send_text(const std::string& text, double timeout_s);
  // Receives one whole text message (fragments joined) within `timeout_s`, at most `max_bytes`.
  WsResult receive_text(double timeout_s, int64_t max_bytes);
  // Between requests: answers the pings that have arrived (servers drop a client that does not
  // answer them: uvicorn after 20 s + 20 s), without waiting for anything. A data frame is
  // left for the next receive_text.
  WsResult answer_pings();
  // Sends a close frame (best effort, short bound) and closes the socket. Idempotent.
  void close();
  bool connected() const { return fd_ >= 0; }

 private:
  enum class FrameParse { kIncomplete, kComplete, kBad, kTooLarge };
  struct Frame {
    bool fin = false;
    uint8_t opcode = 0;
    std::string payload;
    size_t size = 0;  // header + payload bytes
  };
  static FrameParse parse_frame(const std::string& buffer, uint64_t max_payload, Frame& frame,
                                std::string& error);

  int fd_ = -1;
  std::string pending_;  // bytes read past the handshake's end
};

// The Sec-WebSocket-Accept value a server must answer for `key` (base64 of SHA-1 of the key and
// the RFC's GUID).
std::string websocket_accept_for(const std::string& key);

}  // namespace furlong::rollout
