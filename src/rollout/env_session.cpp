#include "rollout/env_session.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "rollout/websocket.h"

namespace furlong::rollout {
namespace {

EnvClientOptions client_options(const AgentOptions& a, const std::string& url) {
  return {.url = url,
          .timeout_s = a.agent_env_timeout,
          .max_retries = static_cast<int>(a.agent_env_max_retries),
          .max_response_bytes = a.agent_env_max_response_bytes};
}

// A failed call: the transport's reply and what went wrong.
EnvAnswer failed(EnvReply reply, std::string error) {
  EnvAnswer a;
  a.reply = std::move(reply);
  a.error = std::move(error);
  return a;
}

// furlong's own protocol (env_client.h).
class FurlongSession : public EnvSession {
 public:
  explicit FurlongSession(const EnvClient& client) : client_(client) {}

  EnvAnswer start(const rl::Sample& s, uint64_t) override {
    const Json payload = {{"sample", sample_payload(s)}};
    EnvReply reply = client_.post("start", payload);
    std::string error = reply.error;
    if (reply.ok) {
      if (auto id = parse_start_reply(reply.body, error)) episode_id_ = *id;
    }
    if (episode_id_.empty()) return failed(std::move(reply), std::move(error));
    EnvAnswer a;
    a.reply = std::move(reply);
    return a;
  }

  EnvAnswer step(int64_t turn, const Json& message, const std::string& text) override {
    const Json payload = {{"episode_id", episode_id_},
                          {"turn", turn},
                          {"message", message},
                          {"text", text},
                          {"finish_reason", "stop"}};
    EnvReply reply = client_.post("step", payload);
    std::string error = reply.error;
    std::optional<StepReply> step;
    if (reply.ok) step = parse_step_reply(reply.body, error);
    if (!step) return failed(std::move(reply), std::move(error));
    EnvAnswer a;
    a.reply = std::move(reply);
    a.step = std::move(*step);
    return a;
  }

  EnvAnswer finish(const std::string& reason) override {
    EnvReply reply = client_.post("finish", {{"episode_id", episode_id_}, {"reason", reason}});
    std::string error = reply.error;
    std::optional<double> reward;
    if (reply.ok) reward = parse_finish_reply(reply.body, error);
    if (!error.empty()) return failed(std::move(reply), std::move(error));
    EnvAnswer a;
    a.reply = std::move(reply);
    a.step.reward = reward;
    return a;
  }

  bool parses_tool_calls() const override { return true; }
  bool steps_truncated_turns() const override { return false; }

 private:
  const EnvClient& client_;
  std::string episode_id_;
};

// The reset payload of an OpenEnv episode: the group's seed, an episode id, and the sample's
// metadata["env_reset"] object (dataset-given reset arguments) on top.
std::string openenv_episode_id(const rl::Sample& s) {
  return "furlong-" + std::to_string(s.index);
}

Json openenv_reset_data(const rl::Sample& s, uint64_t seed) {
  Json data = {{"seed", seed & 0x7fffffffu}, {"episode_id", openenv_episode_id(s)}};
  if (auto it = s.metadata.find("env_reset"); it != s.metadata.end() && it->is_object()) {
    for (const auto& [k, v] : it->items()) data[k] = v;
  }
  return data;
}

// The parts OpenEnv's two forms share: the observation and reward mapping.
class OpenEnvSessionBase : public EnvSession {
 public:
  explicit OpenEnvSessionBase(const AgentOptions& a) : options_(a) {}
  bool parses_tool_calls() const override { return false; }
  bool steps_truncated_turns() const override { return true; }
  EnvAnswer finish(const std::string&) override {
    close();
    return {};  // OpenEnv has no final reward for an episode the agent ends
  }

 protected:
  virtual void close() {}
  // The answer of a reset or step whose result object is `data`.
  EnvAnswer answer(EnvReply reply, const Json& data, const std::string& where, bool reset) {
    std::string error;
    std::optional<double> total = reset ? std::optional<double>() : total_;
    auto step = parse_openenv_result(data, options_.agent_env_observation_key.value_or(""), total,
                                     where, error);
    if (!step) return failed(std::move(reply), std::move(error));
    if (!reset) total_ = total;
    EnvAnswer a;
    a.reply = std::move(reply);
    a.step = std::move(*step);
    if (reset) a.step.reward.reset();  // the return counts the steps' rewards
    if (!reset) a.step.reward = total_;
    return a;
  }
  Json action(const std::string& text) const { return {{options_.agent_env_action_key, text}}; }

  AgentOptions options_;
  std::optional<double> total_;  // the sum of the non-null step rewards so far
};

class OpenEnvHttpSession : public OpenEnvSessionBase {
 public:
  OpenEnvHttpSession(const AgentOptions& a, const EnvClient& client)
      : OpenEnvSessionBase(a), client_(client) {}

  EnvAnswer start(const rl::Sample& s, uint64_t seed) override {
    const Json data = openenv_reset_data(s, seed);
    episode_id_ = data["episode_id"].is_string() ? data["episode_id"].get<std::string>()
                                                 : openenv_episode_id(s);
    EnvReply reply = client_.post("reset", data);
    if (!reply.ok) return failed(reply, reply.error);
    const Json body = reply.body;
    return answer(std::move(reply), body, "/reset", /*reset=*/true);
  }

  EnvAnswer step(int64_t, const Json&, const std::string& text) override {
    // Not retried: a repeated step would act twice.
    EnvReply reply = client_.post("step", {{"action", action(text)}, {"episode_id", episode_id_}},
                                  /*max_retries=*/0);
    if (!reply.ok) return failed(reply, reply.error);
    const Json body = reply.body;
    return answer(std::move(reply), body, "/step", /*reset=*/false);
  }

 private:
  const EnvClient& client_;
  std::string episode_id_;
};

}  // namespace

// The open WebSocket sessions of a factory, whose pings a keepalive thread answers between
// requests (a session's requests and the keepalive never use its connection at once).
class WsKeepalive {
 public:
  WsKeepalive() : thread_([this] { loop(); }) {}
  ~WsKeepalive() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void add(std::mutex* in_use, WebSocketClient* ws) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[ws] = in_use;
  }
  void remove(WebSocketClient* ws) {  // after this, the keepalive no longer touches `ws`
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(ws);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::seconds(2), [&] { return stop_; })) {
      for (auto& [ws, in_use] : sessions_) {
        std::unique_lock<std::mutex> busy(*in_use, std::try_to_lock);
        if (busy.owns_lock() && ws->connected()) ws->answer_pings();
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<WebSocketClient*, std::mutex*> sessions_;
  std::thread thread_;
};

namespace {

class OpenEnvWsSession : public OpenEnvSessionBase {
 public:
  OpenEnvWsSession(const AgentOptions& a, std::string host, int port, std::string path,
                   WsKeepalive& keepalive)
      : OpenEnvSessionBase(a),
        host_(std::move(host)),
        port_(port),
        path_(std::move(path)),
        keepalive_(keepalive) {
    keepalive_.add(&in_use_, &ws_);
  }
  ~OpenEnvWsSession() override {
    keepalive_.remove(&ws_);
    close();
  }

  EnvAnswer start(const rl::Sample& s, uint64_t seed) override {
    const std::string message = Json{{"type", "reset"}, {"data", openenv_reset_data(s, seed)}}.dump(
        -1, ' ', false, Json::error_handler_t::replace);
    const int attempts = 1 + static_cast<int>(options_.agent_env_max_retries);
    EnvAnswer last;
    for (int k = 1; k <= attempts; ++k) {
      if (k > 1) {  // EnvClient's backoff: 0.2 s doubling, at most 4 s
        std::this_thread::sleep_for(
            std::chrono::duration<double>(std::min(4.0, 0.2 * std::pow(2.0, k - 2))));
      }
      std::lock_guard<std::mutex> lock(in_use_);
      const auto t0 = std::chrono::steady_clock::now();
      WsResult r = ws_.connect(host_, port_, path_, options_.agent_env_timeout);
      if (r.ok) r = exchange(message, t0);  // one bound for the whole attempt
      if (r.ok) {
        last = answer_of(r, "reset");
        last.reply.attempts = k;
        return last;  // an env that answered is not asked again, whatever it said
      }
      last = failed(reply_of(r, k), where() + ": " + r.error);
      if (r.too_large) return last;  // the same reset gets the same answer
      if (k < attempts) LOG_WARN(last.error, "; retrying");
    }
    last.error += " (after " + std::to_string(attempts) + " attempt(s))";
    return last;
  }

  EnvAnswer step(int64_t, const Json&, const std::string& text) override {
    const std::string message = Json{{"type", "step"}, {"data", action(text)}}.dump(
        -1, ' ', false, Json::error_handler_t::replace);
    std::lock_guard<std::mutex> lock(in_use_);
    WsResult r = exchange(message, std::chrono::steady_clock::now());
    if (!r.ok) return failed(reply_of(r, 1), where() + ": " + r.error);
    return answer_of(r, "step");
  }

 protected:
  void close() override {
    std::lock_guard<std::mutex> lock(in_use_);
    if (!ws_.connected()) return;
    ws_.send_text(R"({"type":"close"})", 1.0);  // the server closes without an answer
    ws_.close();
  }

 private:
  std::string where() const {
    return "agent env ws://" + host_ + ":" + std::to_string(port_) + path_;
  }
  double seconds_left(std::chrono::steady_clock::time_point t0) const {
    const double used =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::max(1e-3, options_.agent_env_timeout - used);
  }
  // One request and its answer, within --agent-env-timeout of `t0` as a whole.
  WsResult exchange(const std::string& message, std::chrono::steady_clock::time_point t0) {
    WsResult r = ws_.send_text(message, seconds_left(t0));
    if (r.ok) r = ws_.receive_text(seconds_left(t0), options_.agent_env_max_response_bytes);
    if (r.timed_out) r.error = "no answer within --agent-env-timeout";
    if (r.too_large) r.error += " (--agent-env-max-response-bytes)";
    return r;
  }
  static EnvReply reply_of(const WsResult& r, int attempts) {
    EnvReply reply;
    reply.ok = r.ok;
    reply.timed_out = r.timed_out;
    reply.too_large = r.too_large;
    reply.attempts = attempts;
    reply.error = r.error;
    return reply;
  }
  // The answer message of a reset or step: an observation, or the env's error.
  EnvAnswer answer_of(const WsResult& r, const std::string& request) {
    const std::string at = where() + " (" + request + ")";
    Json message;
    try {
      message = parse_json(r.text, "the answer");
    } catch (const std::exception&) {
      return failed(reply_of(r, 1), at + ": the answer is not JSON: " + json_excerpt(Json(r.text)));
    }
    const std::string type =
        message.is_object() && message.contains("type") && message["type"].is_string()
            ? message["type"].get<std::string>()
            : "";
    if (type == "error") {
      const Json data = message.value("data", Json::object());
      return failed(reply_of(r, 1), at + ": the env answered an error: " + json_excerpt(data));
    }
    if (type != "observation" || !message.contains("data")) {
      return failed(reply_of(r, 1),
                    at + ": expected {\"type\": \"observation\", \"data\": ...}, got " +
                        json_excerpt(message));
    }
    return answer(reply_of(r, 1), message["data"], at, request == "reset");
  }

  std::string host_;
  int port_ = 0;
  std::string path_;
  WsKeepalive& keepalive_;
  std::mutex in_use_;  // held by a request (and by the keepalive while it answers pings)
  WebSocketClient ws_;
};

// host, port and path of an http:// or ws:// URL (already checked by EnvClient's rules).
void split_url(const std::string& url, std::string& host, int& port, std::string& path) {
  const size_t scheme_end = url.find("://") + 3;
  const size_t slash = url.find('/', scheme_end);
  const std::string authority = url.substr(scheme_end, slash - scheme_end);
  const size_t colon = authority.rfind(':');
  host = authority.substr(0, colon);
  port = colon == std::string::npos ? 80 : std::stoi(authority.substr(colon + 1));
  path = slash == std::string::npos ? "" : url.substr(slash);
  while (path.ends_with('/')) path.pop_back();
}

}  // namespace

std::optional<std::string> openenv_observation_text(const Json& observation, const std::string& key,
                                                    std::string& error) {
  if (!observation.is_object()) {
    error = "\"observation\" must be a JSON object, got " + json_excerpt(observation);
    return std::nullopt;
  }
  if (key.empty()) return observation.dump(-1, ' ', false, Json::error_handler_t::replace);
  auto it = observation.find(key);
  if (it == observation.end() || !it->is_string()) {
    error = "the observation has no string field \"" + key +
            "\" (--agent-env-observation-key): " + json_excerpt(observation);
    return std::nullopt;
  }
  return it->get<std::string>();
}

std::optional<StepReply> parse_openenv_result(const Json& data, const std::string& observation_key,
                                              std::optional<double>& total,
                                              const std::string& where, std::string& error) {
  if (!data.is_object()) {
    error = where + ": expected {observation, reward, done}, got " + json_excerpt(data);
    return std::nullopt;
  }
  StepReply reply;
  auto done = data.find("done");
  if (done == data.end() || !done->is_boolean()) {
    error = where + ": \"done\" must be true or false, got " +
            (done == data.end() ? std::string("nothing") : json_excerpt(*done));
    return std::nullopt;
  }
  reply.done = done->get<bool>();
  std::string reward_error;
  const auto reward = env_reward_field(data, where.c_str(), reward_error);
  if (!reward_error.empty()) {
    error = std::move(reward_error);
    return std::nullopt;
  }
  if (reward) {
    total = total.value_or(0.0) + *reward;
    if (!(std::abs(*total) <= kMaxEnvReward)) {
      error = where + ": the episode's summed reward leaves +-" + json_excerpt(Json(kMaxEnvReward));
      return std::nullopt;
    }
  }
  reply.reward = total;
  const Json observation = data.value("observation", Json(nullptr));
  if (!reply.done) {
    std::string why;
    auto text = openenv_observation_text(observation, observation_key, why);
    if (!text) {
      error = where + ": " + why;
      return std::nullopt;
    }
    reply.observation.push_back({{"role", "user"}, {"content", *text}});
  }
  return reply;
}

EnvSessionFactory::EnvSessionFactory(const AgentOptions& a) : options_(a) {
  const std::string url = a.agent_env_url.value_or("");
  const std::string& protocol = a.agent_env_protocol;
  FURLONG_CHECK(protocol == "furlong" || protocol == "openenv" || protocol == "openenv-http",
                "--agent-env-protocol must be furlong, openenv or openenv-http, got '", protocol,
                "'");
  FURLONG_CHECK(protocol == "furlong" || !a.agent_env_action_key.empty(),
                "--agent-env-action-key must name the action's text field, got ''");
  if (protocol == "openenv") {
    // OpenEnv's clients take the server's http(s):// URL and talk to its /ws; ws:// works too.
    FURLONG_CHECK(url.starts_with("ws://") || url.starts_with("http://"), "--agent-env-url '", url,
                  "': --agent-env-protocol openenv needs ws://host[:port][/path] or "
                  "http://host[:port][/path] (wss/https are not supported)");
    const std::string as_http = url.starts_with("ws://") ? "http://" + url.substr(5) : url;
    EnvClient check(client_options(a, as_http));  // the URL's form, with its error texts
    split_url(as_http, ws_host_, ws_port_, ws_path_);
    ws_path_ += "/ws";
    keepalive_ = std::make_unique<WsKeepalive>();
  } else {
    http_ = std::make_unique<EnvClient>(client_options(a, url));
  }
}

EnvSessionFactory::~EnvSessionFactory() = default;

std::unique_ptr<EnvSession> EnvSessionFactory::open() const {
  if (options_.agent_env_protocol == "openenv") {
    return std::make_unique<OpenEnvWsSession>(options_, ws_host_, ws_port_, ws_path_, *keepalive_);
  }
  if (options_.agent_env_protocol == "openenv-http") {
    return std::make_unique<OpenEnvHttpSession>(options_, *http_);
  }
  return std::make_unique<FurlongSession>(*http_);
}

Json sample_payload(const rl::Sample& s) {
  return {{"index", s.index},
          {"group_index", s.group_index},
          {"prompt", s.prompt},
          {"label", s.label.empty() ? Json(nullptr) : Json(s.label)},
          {"metadata", s.metadata}};
}

}  // namespace furlong::rollout
