#include "rollout/websocket.h"

#include <netdb.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "engine/routed_experts_codec.h"

namespace furlong::rollout {
namespace {

using Clock = std::chrono::steady_clock;

WsResult ws_ok(std::string text = {}) {
  WsResult r;
  r.ok = true;
  r.text = std::move(text);
  return r;
}

WsResult ws_error(std::string error, bool timed_out = false, bool too_large = false) {
  WsResult r;
  r.error = std::move(error);
  r.timed_out = timed_out;
  r.too_large = too_large;
  return r;
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Milliseconds left until `deadline` (0 once it passed), for poll(); rounded up, so a poll
// that times out has reached the deadline.
int millis_left(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

uint32_t rotl(uint32_t x, int n) {
  return (x << n) | (x >> (32 - n));
}

// SHA-1 (FIPS 180-4) of `data`: only for the handshake's accept value, not for security.
std::array<uint8_t, 20> sha1(const std::string& data) {
  uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
  std::string m = data;
  const uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  for (size_t block = 0; block < m.size(); block += 64) {
    uint32_t w[80];
    for (int t = 0; t < 16; ++t) {
      const auto* p = reinterpret_cast<const uint8_t*>(m.data() + block + 4 * t);
      w[t] = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    }
    for (int t = 16; t < 80; ++t) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; ++t) {
      uint32_t f = 0, k = 0;
      if (t < 20) {
        f = (b & c) | (~b & d), k = 0x5A827999u;
      } else if (t < 40) {
        f = b ^ c ^ d, k = 0x6ED9EBA1u;
      } else if (t < 60) {
        f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
      } else {
        f = b ^ c ^ d, k = 0xCA62C1D6u;
      }
      const uint32_t next = rotl(a, 5) + f + e + k + w[t];
      e = d, d = c, c = rotl(b, 30), b = a, a = next;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  std::array<uint8_t, 20> out{};
  for (int i = 0; i < 20; ++i) out[i] = static_cast<uint8_t>(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

// Writes all of `bytes` before `deadline`.
WsResult write_all(int fd, const std::string& bytes, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    pollfd p{fd, POLLOUT, 0};
    const int rc = ::poll(&p, 1, millis_left(deadline));
    if (rc == 0) return ws_error("the send did not finish in time", true);
    if (rc < 0 && errno == EINTR) continue;
    const ssize_t n =
        rc < 0 ? -1 : ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ws_error(std::string("send failed: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
  return ws_ok();
}

// Reads at least one byte into `buffer` before `deadline`.
WsResult read_some(int fd, std::string& buffer, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, millis_left(deadline));
    if (rc == 0) return ws_error("no answer in time", true);
    if (rc < 0 && errno == EINTR) continue;
    char chunk[16384];
    const ssize_t n = rc < 0 ? -1 : ::recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return ws_error("the server closed the connection");
    if (n < 0) return ws_error(std::string("receive failed: ") + std::strerror(errno));
    buffer.append(chunk, static_cast<size_t>(n));
    return ws_ok();
  }
}

// One frame: FIN + opcode, masked payload (client to server).
std::string client_frame(uint8_t opcode, const std::string& payload) {
  std::string frame;
  frame.push_back(static_cast<char>(0x80 | opcode));
  const uint64_t n = payload.size();
  if (n < 126) {
    frame.push_back(static_cast<char>(0x80 | n));
  } else if (n < 65536) {
    frame.push_back(static_cast<char>(0x80 | 126));
    for (int i = 1; i >= 0; --i) frame.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  } else {
    frame.push_back(static_cast<char>(0x80 | 127));
    for (int i = 7; i >= 0; --i) frame.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  }
  static thread_local std::mt19937 rng(std::random_device{}());
  std::array<char, 4> mask{};
  for (auto& m : mask) m = static_cast<char>(rng() & 0xff);
  frame.append(mask.data(), 4);
  for (size_t i = 0; i < payload.size(); ++i) frame.push_back(payload[i] ^ mask[i % 4]);
  return frame;
}

// A non-blocking connect to one address, finished (or not) before `deadline`.
int connect_one(const addrinfo* a, Clock::time_point deadline, std::string& error) {
  int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) {
    error = std::string("socket failed: ") + std::strerror(errno);
    return -1;
  }
  if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
    error = std::string("connect failed: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int rc = 0;
  while ((rc = ::poll(&p, 1, millis_left(deadline))) < 0 && errno == EINTR) {
  }
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  if (rc <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) {
    error = rc == 0 ? "connect timed out"
                    : std::string("connect failed: ") + std::strerror(so_error ? so_error : errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

// Tries each address of host:port in turn (localhost may be ::1 first, the server on
// 127.0.0.1), all before `deadline`.
int open_socket(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (const addrinfo* a = found; a != nullptr && fd < 0 && Clock::now() < deadline;
       a = a->ai_next) {
    fd = connect_one(a, deadline, error);
  }
  ::freeaddrinfo(found);
  if (fd < 0 && error.empty()) error = "connect timed out";
  return fd;
}

// The value of header `name` (case-insensitive) in an HTTP head, or "".
std::string header_value(const std::string& head, const std::string& name) {
  size_t at = 0;
  while ((at = head.find("\r\n", at)) != std::string::npos) {
    at += 2;
    const size_t colon = head.find(':', at);
    const size_t end = head.find("\r\n", at);
    if (colon == std::string::npos || colon > end) continue;
    if (strncasecmp(head.c_str() + at, name.c_str(), name.size()) == 0 &&
        colon - at == name.size()) {
      size_t v = colon + 1;
      while (v < end && head[v] == ' ') ++v;
      return head.substr(v, end - v);
    }
  }
  return "";
}

}  // namespace

std::string websocket_accept_for(const std::string& key) {
  const auto digest = sha1(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
  return engine::base64_encode(digest.data(), digest.size());
}

WebSocketClient::~WebSocketClient() {
  close();
}

WsResult WebSocketClient::connect(const std::string& host, int port, const std::string& path,
                                  double timeout_s) {
  close();
  const auto deadline = deadline_after(timeout_s);
  std::string error;
  fd_ = open_socket(host, port, deadline, error);
  if (fd_ < 0) return ws_error(error, error == "connect timed out");
  static thread_local std::mt19937 rng(std::random_device{}());
  std::array<uint8_t, 16> nonce{};
  for (auto& b : nonce) b = static_cast<uint8_t>(rng() & 0xff);
  const std::string key = engine::base64_encode(nonce.data(), nonce.size());
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + host + ":" +
                              std::to_string(port) +
                              "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Key: " +
                              key + "\r\nSec-WebSocket-Version: 13\r\n\r\n";
  WsResult r = write_all(fd_, request, deadline);
  std::string head;
  while (r.ok && head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > 65536) r = ws_error("the handshake answer's head is over 64 KiB");
    if (r.ok) r = read_some(fd_, head, deadline);
  }
  if (r.ok) {
    const size_t end = head.find("\r\n\r\n") + 4;
    pending_ = head.substr(end);
    head.resize(end);
    const std::string status = head.substr(0, head.find("\r\n"));
    if (status.find(" 101") == std::string::npos) {
      r = ws_error("the server refused the WebSocket upgrade: " + status);
    } else if (header_value(head, "Sec-WebSocket-Accept") != websocket_accept_for(key)) {
      r = ws_error("the server's Sec-WebSocket-Accept does not match the key");
    }
  }
  if (!r.ok) close();
  return r;
}

WsResult WebSocketClient::send_text(const std::string& text, double timeout_s) {
  if (fd_ < 0) return ws_error("not connected");
  WsResult r = write_all(fd_, client_frame(0x1, text), deadline_after(timeout_s));
  if (!r.ok) close();
  return r;
}

// One frame at the head of `buffer`: kIncomplete until all its bytes are there, kBad with
// `error` for a frame no server may send (masked, reserved bits, a 64-bit length with the top
// bit set, a control frame over 125 bytes or fragmented) or one over `max_payload`.
WebSocketClient::FrameParse WebSocketClient::parse_frame(const std::string& buffer,
                                                         uint64_t max_payload, Frame& frame,
                                                         std::string& error) {
  if (buffer.size() < 2) return FrameParse::kIncomplete;
  const auto b0 = static_cast<uint8_t>(buffer[0]), b1 = static_cast<uint8_t>(buffer[1]);
  frame.fin = (b0 & 0x80) != 0;
  frame.opcode = b0 & 0x0f;
  if (b0 & 0x70) error = "a frame with reserved bits set";
  if (b1 & 0x80) error = "the server sent a masked frame";
  uint64_t length = b1 & 0x7f;
  const size_t extra = length == 126 ? 2 : length == 127 ? 8 : 0;
  if (error.empty() && buffer.size() < 2 + extra) return FrameParse::kIncomplete;
  if (error.empty() && extra) {
    length = 0;
    for (size_t i = 0; i < extra; ++i) length = (length << 8) | static_cast<uint8_t>(buffer[2 + i]);
    if (length >> 63) error = "a frame length with its top bit set";
  }
  const bool control = frame.opcode >= 0x8;
  if (error.empty() && control && (length > 125 || !frame.fin)) error = "a malformed control frame";
  if (!error.empty()) return FrameParse::kBad;
  if (length > max_payload) {
    error = "too large";
    return FrameParse::kTooLarge;
  }
  const size_t header = 2 + extra;
  if (buffer.size() - header < length) return FrameParse::kIncomplete;
  frame.payload = buffer.substr(header, length);
  frame.size = header + length;
  return FrameParse::kComplete;
}

WsResult WebSocketClient::receive_text(double timeout_s, int64_t max_bytes) {
  if (fd_ < 0) return ws_error("not connected");
  const auto deadline = deadline_after(timeout_s);
  std::string message;
  bool in_message = false;  // a fragmented message has begun
  auto fail = [&](WsResult r) {
    close();
    return r;
  };
  const auto cap = static_cast<uint64_t>(std::max<int64_t>(max_bytes, 0));
  for (;;) {
    Frame frame;
    std::string error;
    // A control frame may come between fragments; data frames count against the bound.
    const uint64_t room = std::max<uint64_t>(125, cap - std::min<uint64_t>(cap, message.size()));
    FrameParse parsed = parse_frame(pending_, room, frame, error);
    while (parsed == FrameParse::kIncomplete) {
      if (auto r = read_some(fd_, pending_, deadline); !r.ok) return fail(r);
      parsed = parse_frame(pending_, room, frame, error);
    }
    if (parsed == FrameParse::kBad) return fail(ws_error(error));
    const bool data = frame.opcode < 0x8;
    if (parsed == FrameParse::kTooLarge ||
        (data && frame.payload.size() > cap - std::min<uint64_t>(cap, message.size()))) {
      return fail(ws_error("a message over " + std::to_string(max_bytes) + " bytes", false, true));
    }
    pending_.erase(0, frame.size);
    if (frame.opcode == 0x8) return fail(ws_error("the server closed the session"));
    if (frame.opcode == 0x9) {  // ping: answer, keep waiting
      if (auto r = write_all(fd_, client_frame(0xA, frame.payload), deadline); !r.ok)
        return fail(r);
      continue;
    }
    if (frame.opcode == 0xA) continue;  // an unsolicited pong
    if (frame.opcode == 0x2)
      return fail(ws_error("the server sent a binary message, not JSON text"));
    if (frame.opcode != 0x1 && frame.opcode != 0x0) {
      return fail(ws_error("unknown frame opcode " + std::to_string(frame.opcode)));
    }
    if ((frame.opcode == 0x0) != in_message) {
      return fail(ws_error(in_message ? "a new message inside a fragmented one"
                                      : "a continuation frame outside a message"));
    }
    message += frame.payload;
    in_message = !frame.fin;
    if (frame.fin) return ws_ok(std::move(message));
  }
}

WsResult WebSocketClient::answer_pings() {
  if (fd_ < 0) return ws_error("not connected");
  for (;;) {  // what has arrived, without waiting
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    if (auto r = read_some(fd_, pending_, Clock::now()); !r.ok) {
      close();
      return r;
    }
  }
  for (;;) {
    Frame frame;
    std::string error;
    if (parse_frame(pending_, 125, frame, error) != FrameParse::kComplete) break;
    if (frame.opcode == 0x9) {
      pending_.erase(0, frame.size);
      if (auto r = write_all(fd_, client_frame(0xA, frame.payload), deadline_after(1.0)); !r.ok) {
        close();
        return r;
      }
    } else if (frame.opcode == 0xA) {
      pending_.erase(0, frame.size);
    } else {
      break;  // a data or close frame: the next receive_text reads it
    }
  }
  return ws_ok();
}

void WebSocketClient::close() {
  if (fd_ < 0) return;
  write_all(fd_, client_frame(0x8, std::string("\x03\xe8", 2)), deadline_after(0.2));
  ::close(fd_);
  fd_ = -1;
  pending_.clear();
}

}  // namespace furlong::rollout
