// EngineBackend over engine::Engine: a thin forwarding layer plus the chat template.
#include <memory>
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
  RealEngineBackend(std::shared_ptr<Engine> engine, const std::string& model_dir)
      : engine_(std::move(engine)) {
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

  void release_memory(bool include_weights) override { engine_->release_memory(include_weights); }
  void resume_memory() override { engine_->resume_memory(); }
  bool memory_released() const override { return engine_->memory_released(); }

 private:
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<tokenizer::ChatFormatter> chat_;
};

}  // namespace

std::shared_ptr<EngineBackend> make_engine_backend(std::shared_ptr<Engine> engine,
                                                   const std::string& model_dir) {
  FURLONG_CHECK(engine != nullptr, "make_engine_backend: no engine");
  return std::make_shared<RealEngineBackend>(std::move(engine), model_dir);
}

}  // namespace furlong::engine::server
