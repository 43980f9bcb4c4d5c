// Small helpers for furlong's HTTP clients of user services (the remote reward server, the
// agent environment): one timeout for connect, read and write, and a bounded excerpt of a
// response body for error messages.
#pragma once

#include <httplib.h>

#include <ctime>
#include <string>

#include "core/strings.h"

namespace furlong::reward {

// Connect, read and write timeouts of `client`, all `seconds` (fractional seconds kept).
inline void set_http_timeouts(httplib::Client& client, double seconds) {
  auto sec = static_cast<time_t>(seconds);
  auto usec = static_cast<time_t>((seconds - double(sec)) * 1e6);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
}

// The first 200 bytes of `body`, with "..." when cut, as valid UTF-8 (a peer's bytes end up in
// messages and JSON records; an invalid sequence, or one the cut splits, becomes U+FFFD).
inline std::string body_excerpt(const std::string& body) {
  constexpr size_t kMax = 200;
  return body.size() <= kMax ? valid_utf8(body) : valid_utf8(body.substr(0, kMax)) + "...";
}

}  // namespace furlong::reward
