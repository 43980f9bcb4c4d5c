// Disaggregated rollout: engine servers (`furlong serve`) driven over HTTP, as miles drives
// SGLang. Rank 0 starts --rollout-num-engines servers as child processes (or uses
// --rollout-engine-urls), spreads requests over them round-robin from a pool of worker threads,
// and, for weight sync, forms a process group {rank 0, engine 1, ..., engine E} through the
// engines' /init_weights_update_group and broadcasts each tensor while every engine receives
// it through /update_weights_from_distributed. The group's rendezvous is on this host, at the
// address engines on other hosts reach it by (weight_sync_address()); a spawned server gets a
// CUDA device of its own where there are enough (engine_device()).
// With --use-rollout-routing-replay, spawned servers run with --enable-return-routed-experts
// (servers given by URL must be started so), every request asks for return_routed_experts, and
// SGLang's meta_info.routed_experts (base64 int32 [prompt + output - 1, L, K], L and K from the
// checkpoint's config.json) is decoded with the last row of -1 appended.
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/concurrency.h"
#include "core/digest.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/child_process.h"
#include "dist/launch_env.h"
#include "dist/launcher.h"
#include "dist/net_addr.h"
#include "engine/routed_experts_codec.h"
#include "engine/server/client.h"
#include "engine/server/remote_weights.h"
#include "engine/weight_sync.h"
#include "models/hf_model.h"
#include "models/registry.h"
#include "rollout/engine_layout.h"
#include "rollout/engine_server_process.h"
#include "rollout/rollout_engines.h"

namespace furlong::rollout {

dist::ChildOptions engine_server_child_options(const RolloutConfig& o, int port,
                                               const std::string& device) {
  dist::ChildOptions c;
  c.argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
            "serve",
            "--hf-checkpoint",
            o.engine.hf_checkpoint,
            "--host",
            "127.0.0.1",
            "--port",
            std::to_string(port),
            "--max-total-tokens",
            std::to_string(o.rollout.engine_max_total_tokens),
            "--attn-implementation",
            o.engine.attn_implementation,
            o.rollout.engine_exact_logprobs ? "--exact-logprobs" : "--no-exact-logprobs",
            o.engine.pack_shared_prompts ? "--pack-shared-prompts" : "--no-pack-shared-prompts"};
  // The trainer's compute dtype, so engine and trainer log-probs share their arithmetic.
  c.argv.push_back("--dtype");
  c.argv.push_back(o.engine.dtype(""));
  if (o.rollout.engine_mem_fraction_static > 0) {
    c.argv.push_back("--mem-fraction-static");
    c.argv.push_back(std::to_string(o.rollout.engine_mem_fraction_static));
  }
  if (o.rollout.engine_num_threads > 0) {
    c.argv.push_back("--num-threads");
    c.argv.push_back(std::to_string(o.rollout.engine_num_threads));
  }
  for (const auto& [flag, value] :
       {std::pair{"--chunked-prefill-size", o.rollout.engine_chunked_prefill_size},
        std::pair{"--decode-log-interval", o.rollout.engine_decode_log_interval},
        std::pair{"--max-running-requests", o.rollout.engine_max_running_requests},
        std::pair{"--max-prefill-tokens", o.rollout.engine_max_prefill_tokens},
        std::pair{"--context-length", o.rollout.engine_context_length}}) {
    c.argv.push_back(flag);
    c.argv.push_back(std::to_string(value));
  }
  if (o.rollout.engine_disable_radix_cache) c.argv.push_back("--no-prefix-sharing");
  if (o.engine.record_routing) c.argv.push_back("--enable-return-routed-experts");
  // The server is not a training rank: it must not see the trainer's rendezvous variables.
  static const std::vector<std::string> kDrop = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"};
  c.env.emplace();
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (std::find(kDrop.begin(), kDrop.end(), key) != kDrop.end()) continue;
    if (key.rfind("TORCHELASTIC_", 0) == 0) continue;
    if (!device.empty() && key == "CUDA_VISIBLE_DEVICES") continue;
    c.env->push_back(std::move(kv));
  }
  if (!device.empty()) {
    c.env->push_back("CUDA_VISIBLE_DEVICES=" + device);
    c.argv.push_back("--device");
    c.argv.push_back("cuda:0");
  }
  c.kill_grace = std::chrono::seconds(5);
  // A trainer that is SIGKILLed takes its servers along (they would hold the model and their
  // ports, reparented to PID 1). The kernel signals when the thread that started the child
  // ends: RemoteEngines is built on the trainer's main thread.
  c.die_with_parent = true;
  return c;
}

namespace {

using engine::server::EngineClient;

// A `furlong serve` child process (output: the trainer's), stopped when destroyed: SIGTERM,
// then SIGKILL after 5 s (dist::ChildProcess, which never signals a server it already reaped);
// killed by the kernel when the trainer dies (engine_server_child_options).
class ServerProcess {
 public:
  ServerProcess(const RolloutConfig& o, int port, int index)
      : port_(port),
        device_(engine_device(index)),
        child_(engine_server_child_options(o, port, device_)) {
    LOG_INFO("started engine server ", index, " (pid ", child_.pid(), ") on 127.0.0.1:", port, ", ",
             device_.empty() ? "on the CPU (no CUDA device)" : "CUDA device " + device_);
  }
  // Non-empty once the process has ended ("exit code 1", "signal 9 (Killed)").
  std::string exit_status() {
    auto status = child_.try_wait();
    return status ? status->describe() : "";
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  // The CUDA device (as CUDA_VISIBLE_DEVICES names it) of spawned engine `index`: the visible
  // devices after the ones this node's training ranks use (cuda:<local rank>), one per engine,
  // wrapping round (with a warning) when there are fewer; "" without CUDA.
  static std::string engine_device(int index) {
    const int count = at::hasCUDA() ? at::detail::getCUDAHooks().getNumGPUs() : 0;
    const int trainers = dist::rendezvous_from_env().local_world_size;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    auto d = dist::engine_cuda_device(index, trainers, count,
                                      visible ? std::optional<std::string>(visible) : std::nullopt);
    if (d.shared) {
      LOG_WARN("engine server ", index, ": ", count, " CUDA device(s) visible and ", trainers,
               " used by training ranks on this node; it shares device ", d.device,
               " (start fewer engines or give the node more devices)");
    }
    return d.device;
  }

  int port_;
  std::string device_;
  dist::ChildProcess child_;
};

engine::FinishReason parse_finish(const std::string& name) {
  if (name == "stop") return engine::FinishReason::kStop;
  if (name == "length") return engine::FinishReason::kLength;
  return engine::FinishReason::kAbort;
}

class RemoteEngines : public RolloutEngines {
 public:
  RemoteEngines(const RolloutConfig& options, int rank) : options_(options) {
    if (rank != 0) return;
    if (options.engine.record_routing) {
      const std::string where = options.engine.hf_checkpoint + "/config.json";
      const auto model =
          models::create_model(models::read_hf_config(options.engine.hf_checkpoint), where);
      routing_layers_ = model->config().num_hidden_layers;
      routing_top_k_ = model->config().moe.experts_per_token;
    }
    auto urls = options.rollout.rollout_engine_urls;
    if (urls.empty()) {
      // --rollout-num-gpus / --rollout-num-gpus-per-engine when given (rollout/engine_layout.h)
      const int64_t count = disaggregated_num_engines(options.rollout);
      FURLONG_CHECK(count >= 1, "--rollout-num-engines must be >= 1");
      for (int i = 0; i < count; ++i) {
        servers_.push_back(
            std::make_unique<ServerProcess>(options, dist::pick_free_port("127.0.0.1"), i));
        urls.push_back(servers_.back()->url());
      }
    }
    const double request_timeout = options.rollout.rollout_engine_request_timeout;
    FURLONG_CHECK(request_timeout >= 0, "--rollout-engine-request-timeout must be >= 0 seconds ",
                  "(0 = no bound), got ", request_timeout);
    engine::server::ClientOptions client_options;
    client_options.read_timeout_s = request_timeout;
    for (const auto& url : urls)
      clients_.push_back(std::make_unique<EngineClient>(url, client_options));
    for (size_t i = 0; i < clients_.size(); ++i) wait_healthy(i);
    pool_ = std::make_unique<WorkerPool>(64 * static_cast<int64_t>(clients_.size()));
    reporter_ = std::thread([this] { report_long_waits(); });
  }

  ~RemoteEngines() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    report_cv_.notify_all();
    pool_.reset();                               // runs the requests still queued, then joins
    if (reporter_.joinable()) reporter_.join();  // not started on ranks other than 0
    // Engines leave the weight group before its store (held by group_) goes away, and are
    // stopped before it too, so nobody talks to a closed store on the way out.
    // An engine that already failed a request is not asked (a stalled one would hold the
    // shutdown for another request bound).
    if (group_) {
      for (size_t i = 0; i < clients_.size(); ++i) {
        if (failed_engines_.count(i)) continue;
        try {
          clients_[i]->destroy_weights_update_group(kGroupName);
        } catch (const std::exception& e) {
          LOG_WARN("engine ", clients_[i]->base_url(),
                   ": leaving the weight group failed: ", e.what());
        }
      }
    }
    servers_.clear();
    group_.reset();
  }

  void submit(engine::GenerateRequest request, Done done) override {
    FURLONG_CHECK(pool_ != nullptr, "remote engines: only rank 0 sends generate requests");
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++queued_;
    }
    auto job = std::make_shared<Job>(Job{std::move(request), std::move(done)});
    pool_->post([this, job] { serve(std::move(*job)); });
  }

  void abort_all() override {
    {
      // Requests not yet sent end as aborted without reaching a server; with none in
      // flight there is nothing for a server to abort, so none is contacted.
      std::lock_guard<std::mutex> lock(mu_);
      aborting_ = true;
      if (in_flight_ == 0) return;
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      try {
        clients_[i]->abort_all();
      } catch (const std::exception& e) {
        // Raised later by rethrow_errors(), after any earlier (root-cause) failure.
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.empty()) error_ = engine_failure(i, "an abort request", e);
        failed_engines_.insert(i);
      }
    }
  }

  void end_abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) aborting_ = false;  // after a failure the run ends at rethrow_errors()
  }

  int64_t sync_weights(const WeightSource& weights, int64_t version, bool check_equal) override {
    int64_t bytes = 0;
    std::vector<std::pair<std::string, uint64_t>> sent;  // per-tensor digests, all buckets
    SyncWait wait(*this, version);  // report_long_waits() names a sync that takes long
    weights([&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
      if (clients_.empty()) return;
      if (bytes == 0) {
        wait_idle();
        if (!group_) {
          wait.stage("forming the weight group (the engines join it)");
          join_group();
        }
      }
      wait.stage("broadcasting the weights to the engines");
      send_bucket(bucket, version);
      for (const auto& [name, t] : bucket) {
        bytes += static_cast<int64_t>(t.nbytes());
        if (check_equal) sent.emplace_back(name, tensor_digest(name, t));
      }
    });
    if (!clients_.empty() && check_equal) {
      const auto want = combine_tensor_digests(std::move(sent));
      for (auto& c : clients_) {
        auto held = c->get_weights_digest();
        FURLONG_CHECK(held == want, "--check-weight-update-equal: engine ", c->base_url(),
                      " holds weights with digest ", held, ", the trainer sent ", want, " (update ",
                      version, ")");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    aborting_ = false;
    return bytes;
  }

  void rethrow_errors() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.empty()) FURLONG_FAIL(error_);
  }

  std::string describe() const override {
    std::string out = std::to_string(clients_.size()) + " engine server(s):";
    for (const auto& c : clients_) out += " " + c->base_url();
    return out;
  }

 private:
  static constexpr const char* kGroupName = "weight_sync";
  struct Job {
    engine::GenerateRequest request;
    Done done;
  };
  // One request sent to an engine and not answered yet.
  struct Waiting {
    size_t engine_index;
    std::chrono::steady_clock::time_point since;
  };

  // What a weight sync in progress is waiting for, for report_long_waits(): the stage (the
  // rendezvous, or one bucket's broadcast) and when it began; cleared when the sync ends,
  // whichever way.
  struct SyncState {
    int64_t version = 0;
    std::string stage;
    std::chrono::steady_clock::time_point since;
  };
  class SyncWait {
   public:
    SyncWait(RemoteEngines& engines, int64_t version) : engines_(engines), version_(version) {}
    ~SyncWait() {
      std::lock_guard<std::mutex> lock(engines_.mu_);
      engines_.sync_.reset();
    }
    SyncWait(const SyncWait&) = delete;
    SyncWait& operator=(const SyncWait&) = delete;
    void stage(const std::string& what) {
      std::lock_guard<std::mutex> lock(engines_.mu_);
      engines_.sync_ = SyncState{version_, what, std::chrono::steady_clock::now()};
    }

   private:
    RemoteEngines& engines_;
    int64_t version_;
  };

  // A /health probe that gives up quickly.
  static engine::server::ClientOptions probe_options() {
    engine::server::ClientOptions quick;
    quick.connect_timeout_s = 1.0;
    quick.read_timeout_s = 5.0;
    quick.max_retries = 0;
    return quick;
  }

  void wait_healthy(size_t i) {
    const double deadline_s = options_.rollout.engine_startup_timeout;
    auto t0 = std::chrono::steady_clock::now();
    // Each probe is bounded, so a stopped engine cannot hold start-up past the deadline.
    EngineClient probe(clients_[i]->base_url(), probe_options());
    while (!probe.health()) {
      if (i < servers_.size()) {
        auto status = servers_[i]->exit_status();
        FURLONG_CHECK(status.empty(), "engine server ", clients_[i]->base_url(),
                      " exited during start-up (", status, "); see its output above");
      }
      FURLONG_CHECK(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < deadline_s,
          "engine ", clients_[i]->base_url(), " did not answer /health within ", deadline_s,
          " s (is it running? --engine-startup-timeout sets the wait)");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  std::vector<const EngineClient*> engine_list() const {
    std::vector<const EngineClient*> out;
    for (const auto& c : clients_) out.push_back(c.get());
    return out;
  }

  // The group's collectives (each weight broadcast) are bounded like requests, so that an
  // engine stalled during a sync ends the run as soon as one stalled during generation.
  double group_timeout_s() const {
    const double request_bound = options_.rollout.rollout_engine_request_timeout;
    return request_bound > 0 ? std::min(options_.rollout.engine_startup_timeout, request_bound)
                             : options_.rollout.engine_startup_timeout;
  }

  void join_group() {
    engine::WeightGroupSpec spec;
    spec.master_addr = weight_sync_address();
    spec.master_port = dist::pick_free_port(spec.master_addr);
    spec.group_name = kGroupName;
    spec.timeout_seconds = group_timeout_s();
    for (const auto& c : clients_) leave_stale_group(*c);
    group_ = engine::server::connect_remote_engines(engine_list(), spec);
    LOG_INFO("weight-sync group formed with ", clients_.size(), " engine(s) at ", spec.master_addr,
             ":", spec.master_port);
  }

  // An engine refuses a second weight group, and the group of a trainer that was killed stays
  // in the engine (nobody told it to leave): a restarted trainer could never rejoin. So every
  // engine leaves whatever group it holds before this trainer forms its own (an engine serves
  // one trainer). An engine with no group answers this too; one that fails here says why when
  // it is asked to join.
  static void leave_stale_group(const EngineClient& c) {
    try {
      c.destroy_weights_update_group(kGroupName);
    } catch (const std::exception& e) {
      LOG_DEBUG("engine ", c.base_url(), ": leaving an earlier weight group: ", e.what());
    }
  }

  // The host part of "http://host:port/...".
  static std::string url_host(const std::string& url) {
    size_t start = url.find("://");
    start = start == std::string::npos ? 0 : start + 3;
    if (start < url.size() && url[start] == '[') {
      return url.substr(start + 1, url.find(']', start) - start - 1);
    }
    return url.substr(start, url.find_first_of(":/", start) - start);
  }

  // Where the engines reach this trainer for the weight-sync rendezvous: --rollout-master-addr,
  // else MILES_HOST_IP (as miles names this host's address), else the interface
  // GLOO_SOCKET_IFNAME names, else this host's address on the route to the first engine not on
  // loopback; loopback when every engine is.
  std::string weight_sync_address() const {
    if (!options_.rollout_master_addr.empty()) {
      return options_.rollout_master_addr;
    }
    if (const char* ip = std::getenv("MILES_HOST_IP"); ip != nullptr && *ip) return ip;
    for (const auto& c : clients_) {
      const std::string host = url_host(c->base_url());
      if (dist::is_loopback_address(host)) continue;
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
        const std::string first(ifname);
        return dist::interface_address(first.substr(0, first.find(',')));
      }
      return dist::local_address_towards(host);
    }
    return "127.0.0.1";
  }

  // One bucket: every engine is told what comes while this process broadcasts the tensors.
  void send_bucket(const std::vector<std::pair<std::string, at::Tensor>>& bucket, int64_t version) {
    try {
      engine::server::update_remote_weights(engine_list(), group_->world(), bucket, version,
                                            kGroupName);
    } catch (const std::exception& e) {
      {
        // The group is broken for all of them: none is asked to leave it on the way out.
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < clients_.size(); ++i) failed_engines_.insert(i);
      }
      FURLONG_FAIL("weight sync (version ", version, ") to ", describe(),
                   " failed; an engine may have died: ", e.what());
    }
  }

  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return queued_ == 0 && in_flight_ == 0; });
  }

  // One request, on a pool thread: sent to the next engine in round-robin order (or ended as
  // aborted without reaching one), then handed to its callback.
  void serve(Job job) {
    size_t engine_index = 0;
    bool aborted = false;
    std::list<Waiting>::iterator wait_slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --queued_;
      ++in_flight_;
      engine_index = next_engine_++ % clients_.size();
      aborted = aborting_;
      waiting_.push_back({engine_index, std::chrono::steady_clock::now()});
      wait_slot = std::prev(waiting_.end());
    }
    engine::GenerateOutput out;
    out.prompt_tokens = static_cast<int64_t>(job.request.input_ids.size());
    out.finish_reason = engine::FinishReason::kAbort;
    if (!aborted) {
      try {
        out = run(*clients_[engine_index], job.request, engine_index);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.empty()) error_ = e.what();
        failed_engines_.insert(engine_index);
        aborting_ = true;  // the rest of this rollout is moot
      }
    }
    job.done(std::move(out));
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      waiting_.erase(wait_slot);
    }
    idle_cv_.notify_all();
  }

  engine::GenerateOutput run(EngineClient& client, const engine::GenerateRequest& request,
                             size_t engine_index) {
    engine::GenerateOutput out;
    out.prompt_tokens = static_cast<int64_t>(request.input_ids.size());
    try {
      auto r = client.generate(request.input_ids, engine::sampling_params_json(request.sampling),
                               true, "", request.return_routed_experts);
      if (request.return_routed_experts) {
        const auto tokens = static_cast<int64_t>(request.input_ids.size() + r.output_ids.size());
        FURLONG_CHECK(!r.routed_experts_base64.empty() || tokens <= 1, "engine ", client.base_url(),
                      " returned no meta_info.routed_experts; start it with ",
                      "--enable-return-routed-experts (furlong serve and SGLang)");
        out.routed_experts =
            engine::routed_experts_from_sglang(r.routed_experts_base64, tokens, routing_layers_,
                                               routing_top_k_, client.base_url() + " /generate");
      }
      out.output_ids = r.output_ids;
      out.output_logprobs = r.output_logprobs;
      out.finish_reason = parse_finish(r.finish_reason);
      out.weight_version = r.weight_version;
    } catch (const engine::server::TimeoutError& e) {
      FURLONG_FAIL(engine_failure(engine_index, "a generate request", e),
                   "; --rollout-engine-request-timeout sets the bound");
    } catch (const Error& e) {
      // A dead engine is fatal for the run (miles without fault tolerance); say which.
      FURLONG_FAIL(engine_failure(engine_index, "a generate request", e));
    }
    return out;
  }

  // How often report_long_waits() looks: every 30 s, or a quarter of a shorter bound.
  std::chrono::milliseconds report_interval() const {
    double bound = options_.rollout.rollout_engine_request_timeout;
    double seconds = bound > 0 ? std::clamp(bound / 4, 1.0, 30.0) : 30.0;
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }

  // A background thread: every report_interval(), one line per engine whose oldest unanswered
  // request has waited that long, naming the engine, the wait, and whether /health answers, so
  // a stalled engine is visible long before the request bound ends the run.
  void report_long_waits() {
    const auto interval = report_interval();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      report_cv_.wait_for(lock, interval);
      if (stopping_) return;
      const auto now = std::chrono::steady_clock::now();
      const std::optional<SyncState> sync = sync_;
      std::vector<std::pair<int64_t, double>> per_engine(clients_.size(), {0, 0.0});
      for (const auto& w : waiting_) {
        auto& [count, oldest] = per_engine[w.engine_index];
        ++count;
        oldest = std::max(oldest, std::chrono::duration<double>(now - w.since).count());
      }
      lock.unlock();
      for (size_t i = 0; i < per_engine.size(); ++i) {
        const auto [count, oldest] = per_engine[i];
        if (count == 0 || oldest < std::chrono::duration<double>(interval).count()) continue;
        report_wait(i, count, oldest);
      }
      const double synced_s = sync ? std::chrono::duration<double>(now - sync->since).count() : 0;
      if (sync && synced_s >= std::chrono::duration<double>(interval).count()) {
        report_sync_wait(*sync, synced_s);
      }
      lock.lock();
    }
  }

  void report_wait(size_t engine_index, int64_t count, double oldest_s) const {
    const double bound = options_.rollout.rollout_engine_request_timeout;
    EngineClient probe(clients_[engine_index]->base_url(), probe_options());
    const bool healthy = probe.health();
    LOG_WARN("engine ", clients_[engine_index]->base_url(), ": ", count,
             " request(s) unanswered, the oldest for ", static_cast<int64_t>(oldest_s), " s",
             bound > 0 ? " (the run fails at " + std::to_string(static_cast<int64_t>(bound)) +
                             " s, --rollout-engine-request-timeout)"
                       : std::string(),
             healthy ? "; /health answers" : "; /health does not answer either (stopped or hung?)");
  }

  // A weight sync that has waited an interval: what for, how long, the bound, and which engines
  // answer /health (an engine stopped mid-broadcast holds the sync until the bound).
  void report_sync_wait(const SyncState& sync, double waited_s) const {
    std::string health;
    for (const auto& c : clients_) {
      EngineClient probe(c->base_url(), probe_options());
      health +=
          "; " + c->base_url() +
          (probe.health() ? " answers /health" : " does not answer /health (stopped or hung?)");
    }
    LOG_WARN(
        "weight sync (version ", sync.version, "): waiting for ", static_cast<int64_t>(waited_s),
        " s, ", sync.stage, " (the run fails at ", static_cast<int64_t>(group_timeout_s()),
        " s: --engine-startup-timeout, or --rollout-engine-request-timeout when shorter)", health);
  }

  // "engine URL failed WHAT (the server process ended: STATUS): CAUSE", the one shape of
  // every error that names an engine, so a user sees which server to look at.
  std::string engine_failure(size_t engine_index, const std::string& what,
                             const std::exception& cause) const {
    std::string status =
        engine_index < servers_.size() ? servers_[engine_index]->exit_status() : "";
    return "engine " + clients_[engine_index]->base_url() + " failed " + what +
           (status.empty() ? "" : " (the server process ended: " + status + ")") + ": " +
           cause.what();
  }

  const RolloutConfig options_;  // a copy: callers pass temporaries (train::rollout_config)
  // --use-rollout-routing-replay: the layers and top-k of SGLang's routed-experts buffer.
  int64_t routing_layers_ = 0, routing_top_k_ = 0;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<EngineClient>> clients_;
  std::unique_ptr<dist::ProcessGroups> group_;
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::condition_variable report_cv_;  // wakes report_long_waits() to stop
  std::list<Waiting> waiting_;
  std::optional<SyncState> sync_;     // the weight sync in progress, if any
  std::unique_ptr<WorkerPool> pool_;  // sends the requests: 64 threads per engine
  std::thread reporter_;              // report_long_waits()
  size_t next_engine_ = 0;
  int64_t queued_ = 0;     // submitted, not yet started by a pool thread
  int64_t in_flight_ = 0;  // started, callback not yet returned
  bool stopping_ = false;
  bool aborting_ = false;
  std::string error_;                // the first failure of a worker, raised on the driver thread
  std::set<size_t> failed_engines_;  // engines that failed a request (not contacted on exit)
};

}  // namespace

std::unique_ptr<RolloutEngines> make_remote_engines(const RolloutConfig& options, int rank) {
  return std::make_unique<RemoteEngines>(options, rank);
}

}  // namespace furlong::rollout
