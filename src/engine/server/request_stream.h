// One request's view of a connection, the httplib::Stream that cpp-httplib's process_request
// reads and writes: first the bytes the connection gate already read (the whole header, maybe
// more), then the socket. It never reads past what the request asks for, so the bytes of a next
// request stay for the gate.
//
// It also bounds the body, which cpp-httplib 0.11 does only for a Content-Length: a chunked
// body stops being read once its payload would pass the limit (a chunk declared past it is
// refused before its data), a Content-Length past the limit is not read (cpp-httplib answers
// 413 and used to read and discard all of it), and a request with neither header has no body
// (RFC 9112 6.3; cpp-httplib read such a POST until the client closed).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>

namespace furlong::engine::server {

class RequestStream : public httplib::Stream {
 public:
  struct Limits {
    int64_t max_body_bytes = 0;
    double read_timeout_s = 5;   // per read of the socket
    double write_timeout_s = 5;  // per write
  };
  RequestStream(int fd, std::string prefix, Limits limits);

  // Called with the parsed header, before the body is read: how the body is framed.
  void expect_body(const httplib::Request& req);
  // The body passed --max-request-bytes (then nothing more of it is read).
  bool body_too_large() const { return too_large_; }
  // The body was read to its end, so the connection can carry a next request.
  bool body_complete() const;
  // Bytes read from the socket (or given) and not consumed by this request.
  std::string take_unread();
  // Whether any byte of a response was written.
  bool wrote() const { return wrote_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  enum class Body { kUnknown, kNone, kLength, kRefused, kChunked };
  enum class Chunk { kSizeLine, kData, kDataEnd, kLastLine, kDone };

  ssize_t read_raw(char* ptr, size_t size);
  ssize_t read_chunked(char* ptr, size_t size);
  bool end_of_chunk_line();  // false: the body is refused

  int fd_;
  std::string prefix_;
  size_t prefix_used_ = 0;
  Limits limits_;
  Body body_ = Body::kUnknown;
  uint64_t length_left_ = 0;  // kLength: body bytes not yet read
  Chunk chunk_ = Chunk::kSizeLine;
  std::string line_;         // the chunk framing line being read
  uint64_t chunk_left_ = 0;  // data bytes of the current chunk not yet read
  uint64_t payload_ = 0;     // chunk data bytes declared so far
  bool chunked_complete_ = false;
  bool too_large_ = false;
  bool wrote_ = false;
};

}  // namespace furlong::engine::server
