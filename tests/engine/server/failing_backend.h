// An EngineBackend that forwards to another and throws std::bad_alloc from chosen calls, to
// test that an allocation failure ends a request, never the server.
#pragma once

#include <atomic>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "engine/server/backend.h"

namespace furlong::engine::server::testing {

class FailingBackend final : public EngineBackend {
 public:
  explicit FailingBackend(std::shared_ptr<EngineBackend> inner) : inner_(std::move(inner)) {}

  std::atomic<bool> fail_submit{false};          // submit and submit_all
  std::atomic<bool> fail_weight_version{false};  // weight_version (streamed partial events)

  const tokenizer::Tokenizer& tokenizer() const override { return inner_->tokenizer(); }
  const tokenizer::ChatFormatter* chat_formatter() const override {
    return inner_->chat_formatter();
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t context_length() const override { return inner_->context_length(); }
  Json model_info() const override { return inner_->model_info(); }
  RequestId submit(GenerateRequest request, Engine::DoneCallback on_done,
                   Engine::TokenCallback on_tokens) override {
    if (fail_submit) throw std::bad_alloc();
    return inner_->submit(std::move(request), std::move(on_done), std::move(on_tokens));
  }
  std::vector<RequestId> submit_all(std::vector<Engine::Submission> batch) override {
    if (fail_submit) throw std::bad_alloc();
    return inner_->submit_all(std::move(batch));
  }
  bool abort(RequestId id) override { return inner_->abort(id); }
  void abort_all() override { inner_->abort_all(); }
  void pause_generation() override { inner_->pause_generation(); }
  void continue_generation() override { inner_->continue_generation(); }
  void flush_cache() override { inner_->flush_cache(); }
  int64_t num_running() const override { return inner_->num_running(); }
  void init_weights_update_group(const WeightGroupSpec& spec) override {
    inner_->init_weights_update_group(spec);
  }
  void update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                       int64_t version) override {
    inner_->update_weights_from_distributed(metas, version);
  }
  void destroy_weights_update_group() override { inner_->destroy_weights_update_group(); }
  void set_weight_version(int64_t version) override { inner_->set_weight_version(version); }
  int64_t weight_version() const override {
    if (fail_weight_version) throw std::bad_alloc();
    return inner_->weight_version();
  }
  std::string weights_digest() const override { return inner_->weights_digest(); }
  void release_memory(bool include_weights) override { inner_->release_memory(include_weights); }
  void resume_memory() override { inner_->resume_memory(); }
  bool memory_released() const override { return inner_->memory_released(); }

 private:
  std::shared_ptr<EngineBackend> inner_;
};

}  // namespace furlong::engine::server::testing
