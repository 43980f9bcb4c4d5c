// What the HTTP server needs from a rollout engine. EngineBackend adapts engine::Engine (the
// production path); tests can serve a scripted backend to exercise the HTTP layer alone.
// Every method may be called from many handler threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "engine/engine.h"

namespace furlong::tokenizer {
class ChatFormatter;
}

namespace furlong::engine::server {

class EngineBackend {
 public:
  virtual ~EngineBackend() = default;

  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  // Null when the model directory has no chat template (chat completions then fail clearly).
  virtual const tokenizer::ChatFormatter* chat_formatter() const = 0;
  virtual int64_t vocab_size() const = 0;  // ids must lie in [0, vocab_size)
  virtual int64_t context_length() const = 0;
  virtual Json model_info() const = 0;

  // As engine::Engine (see engine.h); the callbacks run on the engine's thread. on_tokens may
  // be null (no streaming).
  virtual RequestId submit(GenerateRequest request, Engine::DoneCallback on_done,
                           Engine::TokenCallback on_tokens) = 0;
  // As Engine::submit_all: every request queued at once, or none (furlong::Error).
  virtual std::vector<RequestId> submit_all(std::vector<Engine::Submission> batch) = 0;
  virtual bool abort(RequestId id) = 0;
  virtual void abort_all() = 0;
  virtual void pause_generation() = 0;
  virtual void continue_generation() = 0;
  virtual void flush_cache() = 0;
  virtual int64_t num_running() const = 0;

  virtual void init_weights_update_group(const WeightGroupSpec& spec) = 0;
  virtual void update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                               int64_t version) = 0;
  virtual void destroy_weights_update_group() = 0;
  virtual void set_weight_version(int64_t version) = 0;
  virtual int64_t weight_version() const = 0;
  virtual std::string weights_digest() const = 0;
  // As Engine::update_weights_from_disk / Engine::prompt_logprobs; backends without a model
  // (tests) fail clearly.
  virtual void update_weights_from_disk(const std::string& hf_dir, int64_t version) {
    (void)version;
    FURLONG_FAIL("this engine backend cannot load weights from disk (", hf_dir, ")");
  }
  virtual Engine::PromptLogprobs prompt_logprobs(const std::vector<int64_t>& input_ids,
                                                 double temperature, int64_t start,
                                                 int64_t top_n) const {
    (void)input_ids, (void)temperature, (void)start, (void)top_n;
    FURLONG_FAIL("this engine backend does not score prompts");
  }

  // Releasing the weights keeps a host copy when the backend was made with
  // keep_released_weights (the default), and resume_memory puts back every weight no update
  // refilled meanwhile: release + resume then generates as before (what SGLang's weights CPU
  // backup option does). On the CPU the copy is the weights themselves, so releasing them frees
  // nothing.
  virtual void release_memory(bool include_weights) = 0;
  virtual void resume_memory() = 0;
  virtual bool memory_released() const = 0;
};

// Serves `engine` (shared: the caller may keep using it). Loads the chat template from
// `model_dir` when it has one.
std::shared_ptr<EngineBackend> make_engine_backend(std::shared_ptr<Engine> engine,
                                                   const std::string& model_dir,
                                                   bool keep_released_weights = true);

}  // namespace furlong::engine::server
