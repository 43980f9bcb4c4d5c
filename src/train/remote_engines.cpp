// Disaggregated rollout: engine servers (`furlong serve`) driven over HTTP, as miles drives
// SGLang. Rank 0 starts --rollout-num-engines servers as child processes (or uses
// --rollout-engine-urls), spreads requests over them round-robin from a pool of worker threads,
// and, for weight sync, forms a process group {rank 0, engine 1, ..., engine E} through the
// engines' /init_weights_update_group and broadcasts each tensor while every engine receives
// it through /update_weights_from_distributed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/digest.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/launcher.h"
#include "engine/server/client.h"
#include "engine/server/remote_weights.h"
#include "engine/weight_sync.h"
#include "train/rollout_engines.h"

namespace furlong::train {
namespace {

using engine::server::EngineClient;

// A `furlong serve` child process; SIGTERM (then SIGKILL) when destroyed.
class ServerProcess {
 public:
  ServerProcess(const TrainOptions& o, int port, int index) : port_(port) {
    std::vector<std::string> args = {
        std::filesystem::read_symlink("/proc/self/exe").string(),
        "serve",
        "--hf-checkpoint",
        o.model.hf_checkpoint,
        "--host",
        "127.0.0.1",
        "--port",
        std::to_string(port),
        "--max-total-tokens",
        std::to_string(o.rollout.engine_max_total_tokens),
        "--attn-implementation",
        o.model.attn_implementation,
        o.rollout.engine_exact_logprobs ? "--exact-logprobs" : "--no-exact-logprobs"};
    if (o.rollout.engine_num_threads > 0) {
      args.push_back("--num-threads");
      args.push_back(std::to_string(o.rollout.engine_num_threads));
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The server is not a training rank: it must not see the trainer's rendezvous variables.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      static const std::vector<std::string> kDrop = {
          "RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
          "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"};
      if (std::find(kDrop.begin(), kDrop.end(), key) != kDrop.end()) continue;
      if (key.rfind("TORCHELASTIC_", 0) == 0) continue;
      env.push_back(kv);
    }
    std::vector<char*> envp;
    for (auto& kv : env) envp.push_back(kv.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    FURLONG_CHECK(pid_ >= 0, "cannot start engine server ", index, ": fork failed");
    if (pid_ == 0) {
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    LOG_INFO("started engine server ", index, " (pid ", pid_, ") on 127.0.0.1:", port);
  }
  ~ServerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  // Non-empty when the process has exited.
  std::string exit_status() const {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return "";
    return WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                             : "signal " + std::to_string(WTERMSIG(status));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int port_;
  pid_t pid_ = -1;
};

Json sampling_json(const engine::SamplingParams& p) {
  Json j = {{"temperature", p.temperature},
            {"top_p", p.top_p},
            {"top_k", p.top_k},
            {"min_p", p.min_p},
            {"max_new_tokens", p.max_new_tokens},
            {"ignore_eos", p.ignore_eos}};
  if (!p.stop.empty()) j["stop"] = p.stop;
  if (!p.stop_token_ids.empty()) j["stop_token_ids"] = p.stop_token_ids;
  if (p.seed) j["sampling_seed"] = *p.seed;
  return j;
}

engine::FinishReason parse_finish(const std::string& name) {
  if (name == "stop") return engine::FinishReason::kStop;
  if (name == "length") return engine::FinishReason::kLength;
  return engine::FinishReason::kAbort;
}

class RemoteEngines : public RolloutEngines {
 public:
  RemoteEngines(const TrainOptions& options, int rank) : options_(options) {
    if (rank != 0) return;
    auto urls = options.rollout.rollout_engine_urls;
    if (urls.empty()) {
      FURLONG_CHECK(options.rollout.rollout_num_engines >= 1, "--rollout-num-engines must be >= 1");
      for (int i = 0; i < options.rollout.rollout_num_engines; ++i) {
        servers_.push_back(
            std::make_unique<ServerProcess>(options, dist::pick_free_port("127.0.0.1"), i));
        urls.push_back(servers_.back()->url());
      }
    }
    for (const auto& url : urls) clients_.push_back(std::make_unique<EngineClient>(url));
    for (size_t i = 0; i < clients_.size(); ++i) wait_healthy(i);
    const int workers = 64 * static_cast<int>(clients_.size());
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
  }

  ~RemoteEngines() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    // Engines leave the weight group before its store (held by group_) goes away, and are
    // stopped before it too, so nobody talks to a closed store on the way out.
    if (group_) {
      for (auto& c : clients_) {
        try {
          c->destroy_weights_update_group(kGroupName);
        } catch (const std::exception& e) {
          LOG_WARN("engine ", c->base_url(), ": leaving the weight group failed: ", e.what());
        }
      }
    }
    servers_.clear();
    group_.reset();
  }

  void submit(engine::GenerateRequest request, Done done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({std::move(request), std::move(done)});
    }
    cv_.notify_one();
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
      }
    }
  }

  int64_t sync_weights(TrainBackend& backend, int64_t version, bool check_equal) override {
    int64_t bytes = 0;
    std::vector<std::pair<std::string, uint64_t>> sent;  // per-tensor digests, all buckets
    backend.update_weights([&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
      if (clients_.empty()) return;
      if (bytes == 0) {
        wait_idle();
        if (!group_) join_group();
      }
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

  void wait_healthy(size_t i) {
    const double deadline_s = options_.rollout.engine_startup_timeout;
    auto t0 = std::chrono::steady_clock::now();
    while (!clients_[i]->health()) {
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

  void join_group() {
    engine::WeightGroupSpec spec;
    spec.master_addr = "127.0.0.1";
    spec.master_port = dist::pick_free_port("127.0.0.1");
    spec.group_name = kGroupName;
    spec.timeout_seconds = options_.rollout.engine_startup_timeout;
    group_ = engine::server::connect_remote_engines(engine_list(), spec);
    LOG_INFO("weight-sync group formed with ", clients_.size(), " engine(s) on port ",
             spec.master_port);
  }

  // One bucket: every engine is told what comes while this process broadcasts the tensors.
  void send_bucket(const std::vector<std::pair<std::string, at::Tensor>>& bucket, int64_t version) {
    try {
      engine::server::update_remote_weights(engine_list(), group_->world(), bucket, version,
                                            kGroupName);
    } catch (const std::exception& e) {
      FURLONG_FAIL("weight sync (version ", version, ") to ", describe(),
                   " failed; an engine may have died: ", e.what());
    }
  }

  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && in_flight_ == 0; });
  }

  void worker() {
    while (true) {
      Job job;
      size_t engine_index = 0;
      bool aborted = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_ && queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        ++in_flight_;
        engine_index = next_engine_++ % clients_.size();
        aborted = aborting_;
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
          aborting_ = true;  // the rest of this rollout is moot
        }
      }
      job.done(std::move(out));
      {
        std::lock_guard<std::mutex> lock(mu_);
        --in_flight_;
      }
      idle_cv_.notify_all();
    }
  }

  engine::GenerateOutput run(EngineClient& client, const engine::GenerateRequest& request,
                             size_t engine_index) {
    engine::GenerateOutput out;
    out.prompt_tokens = static_cast<int64_t>(request.input_ids.size());
    try {
      auto r = client.generate(request.input_ids, sampling_json(request.sampling), true);
      out.output_ids = r.output_ids;
      out.output_logprobs = r.output_logprobs;
      out.finish_reason = parse_finish(r.finish_reason);
      out.weight_version = r.weight_version;
    } catch (const Error& e) {
      // A dead engine is fatal for the run (miles without fault tolerance); say which.
      FURLONG_FAIL(engine_failure(engine_index, "a generate request", e));
    }
    return out;
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

  const TrainOptions& options_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<EngineClient>> clients_;
  std::unique_ptr<dist::ProcessGroups> group_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> queue_;
  std::vector<std::thread> threads_;
  size_t next_engine_ = 0;
  int64_t in_flight_ = 0;
  bool stopping_ = false;
  bool aborting_ = false;
  std::string error_;  // the first failure of a worker, raised on the driver thread
};

}  // namespace

std::unique_ptr<RolloutEngines> make_remote_engines(const TrainOptions& options, int rank) {
  return std::make_unique<RemoteEngines>(options, rank);
}

}  // namespace furlong::train
