#include "scripted_backend.h"

#include <utility>

namespace furlong::engine::server::testing {

GenerateOutput scripted_output(const std::vector<int64_t>& prompt, int64_t n, int64_t vocab,
                               FinishReason reason) {
  GenerateOutput out;
  for (int64_t i = 0; i < n; ++i) {
    out.output_ids.push_back((prompt.back() + i + 1) % vocab);
    out.output_logprobs.push_back(-static_cast<float>(i + 1) / 8);
  }
  out.finish_reason = reason;
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  return out;
}

ScriptedBackend::ScriptedBackend(const std::filesystem::path& tokenizer_dir, int64_t context_length,
                                 std::chrono::milliseconds step)
    : tokenizer_(tokenizer::Tokenizer::from_directory(tokenizer_dir)),
      chat_(tokenizer_dir),
      context_length_(context_length),
      step_(step),
      worker_([this] { run(); }) {}

ScriptedBackend::~ScriptedBackend() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

Json ScriptedBackend::model_info() const {
  return Json{{"model_path", "scripted"}, {"context_length", context_length_}};
}

RequestId ScriptedBackend::submit(GenerateRequest request, Engine::DoneCallback on_done,
                                  Engine::TokenCallback on_tokens) {
  FURLONG_CHECK(!released_, "generation needs memory: call resume_memory first");
  std::lock_guard<std::mutex> lock(mutex_);
  RequestId id = next_id_++;
  jobs_.emplace(id, Job{std::move(request), std::move(on_done), std::move(on_tokens), 0});
  int64_t running = static_cast<int64_t>(jobs_.size());
  if (running > max_running_seen) max_running_seen = running;
  wake_.notify_all();
  return id;
}

std::vector<RequestId> ScriptedBackend::submit_all(std::vector<Engine::Submission> batch) {
  std::vector<RequestId> ids;
  for (auto& b : batch)
    ids.push_back(submit(std::move(b.request), std::move(b.on_done), std::move(b.on_tokens)));
  return ids;
}

void ScriptedBackend::finish(std::unique_lock<std::mutex>& lock, RequestId id,
                             FinishReason reason) {
  auto node = jobs_.extract(id);
  if (node.empty()) return;  // aborted while the lock was released
  Job& job = node.mapped();
  auto out = scripted_output(job.request.input_ids, job.produced, vocab_size(), reason);
  out.weight_version = version_;
  lock.unlock();
  job.on_done(id, std::move(out));
  lock.lock();
}

bool ScriptedBackend::abort(RequestId id) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!jobs_.count(id)) return false;
  finish(lock, id, FinishReason::kAbort);
  return true;
}

void ScriptedBackend::abort_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!jobs_.empty()) finish(lock, jobs_.begin()->first, FinishReason::kAbort);
}

void ScriptedBackend::pause_generation() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_ = true;
}

void ScriptedBackend::continue_generation() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_ = false;
  wake_.notify_all();
}

void ScriptedBackend::flush_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  FURLONG_CHECK(jobs_.empty(), "cannot flush the cache: ", jobs_.size(), " requests running");
}

int64_t ScriptedBackend::num_running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(jobs_.size());
}

void ScriptedBackend::init_weights_update_group(const WeightGroupSpec& spec) {
  last_group = spec;
}

void ScriptedBackend::update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                                      int64_t version) {
  last_metas = metas;
  if (version >= 0) version_ = version;
}

void ScriptedBackend::release_memory(bool) {
  FURLONG_CHECK(num_running() == 0, "cannot release memory while requests run");
  released_ = true;
}

void ScriptedBackend::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, step_, [&] { return stop_; });
    if (stop_ || paused_) continue;
    std::vector<RequestId> done;
    for (auto& [id, job] : jobs_) {
      ++job.produced;
      if (job.on_tokens) {
        auto out = scripted_output(job.request.input_ids, job.produced, vocab_size(),
                                   FinishReason::kLength);
        job.on_tokens(id, {out.output_ids.back()}, {out.output_logprobs.back()});
      }
      if (job.produced >= job.request.sampling.max_new_tokens) done.push_back(id);
    }
    for (RequestId id : done) finish(lock, id, FinishReason::kLength);
  }
}

}  // namespace furlong::engine::server::testing
