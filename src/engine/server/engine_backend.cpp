// EngineBackend over engine::Engine: a thin forwarding layer plus the chat template.
#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/log.h"
#include "engine/server/backend.h"
#include "models/causal_lm.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server {
namespace {

class RealEngineBackend final : public EngineBackend {
 public:
  RealEngineBackend(std::shared_ptr<Engine> engine, const std::string& model_dir,
                    bool keep_released_weights)
      : engine_(std::move(engine)), keep_released_weights_(keep_released_weights) {
    try {
      chat_ = std::make_unique<tokenizer::ChatFormatter>(model_dir);
    } catch (const Error& e) {
      LOG_WARN("no chat template in ", model_dir, " (/v1/chat/completions disabled): ", e.what());
    }
  }

  const tokenizer::Tokenizer& tokenizer() const override { return engine_->tokenizer(); }
  const tokenizer::ChatFormatter* chat_formatter() const override { return chat_.get(); }
  int64_t vocab_size() const override { return engine_->model().config().vocab_size; }
  int64_t context_length() const override { return engine_->context_length(); }
  Json model_info() const override { return engine_->model_info(); }

  RequestId submit(GenerateRequest request, Engine::DoneCallback on_done,
                   Engine::TokenCallback on_tokens) override {
    return engine_->submit(std::move(request), std::move(on_done), std::move(on_tokens));
  }
  std::vector<RequestId> submit_all(std::vector<Engine::Submission> batch) override {
    return engine_->submit_all(std::move(batch));
  }
  bool abort(RequestId id) override { return engine_->abort(id); }
  void abort_all() override { engine_->abort_all(); }
  void pause_generation() override { engine_->pause_generation(); }
  void continue_generation() override { engine_->continue_generation(); }
  void flush_cache() override { engine_->flush_cache(); }
  int64_t num_running() const override { return engine_->num_running(); }

  void init_weights_update_group(const WeightGroupSpec& spec) override {
    engine_->init_weights_update_group(spec);
  }
  void update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                       int64_t version) override {
    engine_->update_weights_from_distributed(metas, version);
  }
  void destroy_weights_update_group() override { engine_->destroy_weights_update_group(); }
  // An empty in-process update changes no tensor and only sets the version.
  void set_weight_version(int64_t version) override {
    engine_->update_weights_from_tensors({}, version);
  }
  int64_t weight_version() const override { return engine_->weight_version(); }
  std::string weights_digest() const override { return engine_->weights_digest(); }
  void update_weights_from_disk(const std::string& hf_dir, int64_t version) override {
    engine_->update_weights_from_disk(hf_dir, version);
  }
  Engine::PromptLogprobs prompt_logprobs(const std::vector<int64_t>& input_ids, double temperature,
                                         int64_t start, int64_t top_n) const override {
    return engine_->prompt_logprobs(input_ids, temperature, start, top_n);
  }

  void release_memory(bool include_weights) override {
    std::lock_guard<std::mutex> lock(backup_mutex_);
    if (include_weights && keep_released_weights_) {
      // Handles on the CPU (the storage stays alive), host copies on an accelerator.
      backup_.clear();
      for (auto& [name, t] : engine_->model().named_weights()) {
        if (t.defined()) backup_.emplace_back(name, t.device().is_cpu() ? t : t.to(at::kCPU));
      }
    }
    try {
      engine_->release_memory(include_weights);
    } catch (...) {
      backup_.clear();
      throw;
    }
  }
  void resume_memory() override {
    std::lock_guard<std::mutex> lock(backup_mutex_);
    engine_->resume_memory();
    if (!backup_.empty()) engine_->refill_released_weights(backup_);
    backup_.clear();
  }
  bool memory_released() const override { return engine_->memory_released(); }

 private:
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<tokenizer::ChatFormatter> chat_;
  const bool keep_released_weights_;
  std::mutex backup_mutex_;
  std::vector<std::pair<std::string, at::Tensor>> backup_;  // weights kept across a release
};

}  // namespace

std::shared_ptr<EngineBackend> make_engine_backend(std::shared_ptr<Engine> engine,
                                                   const std::string& model_dir,
                                                   bool keep_released_weights) {
  FURLONG_CHECK(engine != nullptr, "make_engine_backend: no engine");
  return std::make_shared<RealEngineBackend>(std::move(engine), model_dir, keep_released_weights);
}

}  // namespace furlong::engine::server
