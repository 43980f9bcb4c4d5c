// The HTTP endpoint agent harnesses call during their sessions (--agent-harness-url,
// docs/agents.md "Agent harnesses"): OpenAI's chat completions under a per-session base URL,
//   POST <base>/sessions/<id>/v1/chat/completions
//   GET  <base>/sessions/<id>/v1/models
// Each request is handed to a handler with the session id and the Authorization header; the
// server itself knows nothing of sessions. It listens on the host it is given (loopback by
// default) on a port the kernel picks, until it is destroyed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/json_util.h"

namespace furlong::rollout {

struct SessionReply {
  int status = 200;
  Json body;  // an OpenAI error object {"error": {...}} for a status other than 200
};

// An OpenAI-shaped error reply.
SessionReply session_error(int status, const std::string& type, const std::string& message);

class SessionServer {
 public:
  // handler(session id, Authorization header, body): the chat-completion answer. Runs on the
  // server's handler threads (up to `handler_threads` at once); must not throw.
  using ChatHandler =
      std::function<SessionReply(const std::string&, const std::string&, const std::string&)>;
  SessionServer(const std::string& host, int64_t handler_threads, std::string model_name,
                ChatHandler chat);
  ~SessionServer();  // stops serving; requests in flight get their answer first
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  // http://host:port/sessions/<id>/v1: what OpenAI clients take as base_url.
  std::string base_url(const std::string& session_id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace furlong::rollout
