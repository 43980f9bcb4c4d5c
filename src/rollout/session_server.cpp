#include "rollout/session_server.h"

#include <chrono>
#include <thread>

#include "core/error.h"
#include "engine/server/api.h"
#include "engine/server/http_server.h"

namespace furlong::rollout {
namespace {

// Request bodies are whole conversations: 64 MiB holds far more than any context.
constexpr int64_t kMaxSessionRequestBytes = int64_t{64} << 20;

void send(httplib::Response& res, const SessionReply& reply) {
  res.status = reply.status;
  res.set_content(reply.body.dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

}  // namespace

SessionReply session_error(int status, const std::string& type, const std::string& message) {
  return {status, engine::server::error_body(message, type, status)};
}

struct SessionServer::Impl {
  engine::server::HttpServer http;
  std::string host;
  int port = 0;
  std::thread listener;
};

SessionServer::SessionServer(const std::string& host, int64_t handler_threads,
                             std::string model_name, ChatHandler chat)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  engine::server::GateOptions gate;
  gate.handler_threads = static_cast<size_t>(handler_threads);
  impl_->http.configure(gate, kMaxSessionRequestBytes);
  impl_->http.set_payload_max_length(static_cast<size_t>(kMaxSessionRequestBytes));
  const std::string session = R"(/sessions/([A-Za-z0-9_.-]+)/v1)";
  impl_->http.Post(
      session + "/chat/completions", [chat](const httplib::Request& req, httplib::Response& res) {
        send(res, chat(req.matches[1], req.get_header_value("Authorization"), req.body));
      });
  impl_->http.Get(session + "/models",
                  [model_name](const httplib::Request&, httplib::Response& res) {
                    send(res, {200, Json{{"object", "list"},
                                         {"data", Json::array({{{"id", model_name},
                                                                {"object", "model"},
                                                                {"owned_by", "furlong"}}})}}});
                  });
  impl_->http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404 ? "no endpoint " + req.method + " " + req.path
                             : res.status == 413
                                 ? "the request body is larger than " +
                                       std::to_string(kMaxSessionRequestBytes) + " bytes"
                                 : "HTTP error " + std::to_string(res.status);
    send(res, session_error(res.status, "invalid_request_error", what));
  });
  impl_->port = impl_->http.bind(host, 0);
  impl_->http.widen_backlog();
  impl_->listener = std::thread([this] { impl_->http.listen_after_bind(); });
  // stop() does nothing until the accept loop runs (see EngineServer::start).
  for (int i = 0; i < 5000 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

SessionServer::~SessionServer() {
  impl_->http.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
  impl_->http.stop_gate();
}

std::string SessionServer::base_url(const std::string& session_id) const {
  return "http://" + impl_->host + ":" + std::to_string(impl_->port) + "/sessions/" + session_id +
         "/v1";
}

}  // namespace furlong::rollout
