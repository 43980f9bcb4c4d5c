// An httplib server on an ephemeral 127.0.0.1 port that answers every POST with a test's
// handler, running until destroyed (the env side of the agent tests).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace furlong::testing {

class ScriptedServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  explicit ScriptedServer(Handler handler) {
    server_.Post(R"(/.*)", [this, handler](const httplib::Request& req, httplib::Response& res) {
      ++requests;
      handler(req, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // The socket listens from bind_to_any_port on; this only waits for the accept loop.
    for (int i = 0; i < 500 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~ScriptedServer() {
    server_.stop();
    thread_.join();
  }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::atomic<int> requests{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace furlong::testing
