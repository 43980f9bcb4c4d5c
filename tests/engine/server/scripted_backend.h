// A scripted EngineBackend for testing the HTTP layer without a model: request r's i-th output
// token is (last prompt id + i + 1) mod vocab with log-prob -(i + 1) / 8, one token per
// `step` for every running request (on a worker thread, like the engine's scheduler), so
// abort, pause and disconnects can be observed mid-generation.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/server/backend.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server::testing {

// The output the script produces for a prompt after n tokens.
GenerateOutput scripted_output(const std::vector<int64_t>& prompt, int64_t n, int64_t vocab,
                               FinishReason reason);

class ScriptedBackend final : public EngineBackend {
 public:
  ScriptedBackend(const std::filesystem::path& tokenizer_dir, int64_t context_length,
                  std::chrono::milliseconds step);
  ~ScriptedBackend() override;

  const tokenizer::Tokenizer& tokenizer() const override { return tokenizer_; }
  const tokenizer::ChatFormatter* chat_formatter() const override { return &chat_; }
  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  int64_t context_length() const override { return context_length_; }
  Json model_info() const override;

  RequestId submit(GenerateRequest request, Engine::DoneCallback on_done,
                   Engine::TokenCallback on_tokens) override;
  std::vector<RequestId> submit_all(std::vector<Engine::Submission> batch) override;
  bool abort(RequestId id) override;
  void abort_all() override;
  void pause_generation() override;
  void continue_generation() override;
  void flush_cache() override;
  int64_t num_running() const override;

  void init_weights_update_group(const WeightGroupSpec& spec) override;
  void update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                       int64_t version) override;
  void destroy_weights_update_group() override {}
  void set_weight_version(int64_t version) override { version_ = version; }
  int64_t weight_version() const override { return version_; }
  std::string weights_digest() const override { return "digest-v" + std::to_string(version_); }

  void release_memory(bool include_weights) override;
  void resume_memory() override { released_ = false; }
  bool memory_released() const override { return released_; }

  // Observations for tests.
  WeightGroupSpec last_group;
  std::vector<WeightMeta> last_metas;
  std::atomic<int64_t> max_running_seen{0};

 private:
  struct Job {
    GenerateRequest request;
    Engine::DoneCallback on_done;
    Engine::TokenCallback on_tokens;
    int64_t produced = 0;
  };
  void run();
  void finish(std::unique_lock<std::mutex>& lock, RequestId id, FinishReason reason);

  tokenizer::Tokenizer tokenizer_;
  tokenizer::ChatFormatter chat_;
  int64_t context_length_;
  std::chrono::milliseconds step_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<RequestId, Job> jobs_;
  RequestId next_id_ = 1;
  bool paused_ = false;
  bool stop_ = false;
  std::atomic<bool> released_{false};
  std::atomic<int64_t> version_{0};
  std::thread worker_;
};

}  // namespace furlong::engine::server::testing
