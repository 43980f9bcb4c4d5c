// Private to src/engine: the engine's state, shared by engine.cpp (requests, scheduler) and
// engine_control.cpp (weight updates, digests, memory release).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/fresh_thread.h"
#include "dist/process_group.h"
#include "engine/engine.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/paged_forward.h"
#include "kernels/packed_linear.h"
#include "models/causal_lm.h"
#include "models/hf_model.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine {

// One request from submission to its callback.
struct Sequence {
  RequestId id = 0;
  SamplingParams sampling;
  Engine::DoneCallback on_done;
  Engine::TokenCallback on_tokens;
  std::vector<int64_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  bool return_routed_experts = false;  // fill out.routed_experts when it ends
  int64_t num_cached = 0;              // leading tokens whose K/V are in the cache
  bool finished = false;  // set by append_token (eos, stop, length); step() then releases it
  std::vector<int64_t> blocks;
  at::Tensor slots;  // cache slot of every position the reservation covers (host int64)
  GenerateOutput out;
  std::mt19937_64 rng;
  std::unique_ptr<tokenizer::StreamDecoder> decoder;  // only with stop strings
  std::string text;                                   // decoded output (only with stop strings)
  size_t max_stop_len = 0;
  std::string error;  // why the engine ended it, when a step failed (finish reason abort)
  // Generated-token counts, kept only when sampling.penalized() (the penalties read them).
  std::unordered_map<int64_t, int64_t> generated_counts;
  // Gated DeltaNet models: the conv windows and recurrent states after num_cached tokens.
  LinearState linear_state;
  // Top log-probs of the token forward_and_sample just drew (top_logprobs_num > 0);
  // append_token moves them into out.output_top_logprobs.
  TopLogprobs pending_top;
};

struct Engine::Impl {
  EngineOptions options;
  std::string model_path;
  std::unique_ptr<models::CausalLM> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::vector<int64_t> eos_ids;
  c10::Device device = c10::kCPU;
  c10::ScalarType dtype = at::kFloat;
  models::ForwardOptions forward;
  // options.prepack_weights resolved at load; then every weight write packs again (copy_weights).
  bool pack_weights = false;
  kernels::PackedWeights packed_weights;
  std::vector<at::Tensor> packable_weights() const;  // (engine.cpp)
  bool choose_packing() const;
  void pack_all_weights();
  int64_t context_length = 0;
  std::unique_ptr<KvCache> cache;
  int64_t cache_bytes = 0;         // of the K/V pools (model_info)
  int64_t linear_state_bytes = 0;  // one running sequence's DeltaNet state (hybrid models)
  double mem_fraction_static = 0;  // the fraction used (the option or the device default)
  KvBudget plan_cache_memory();    // at load, after the weights (engine.cpp)
  // Loads the model, tokenizer and KV cache (Engine::load runs it on a fresh thread).
  void load_model_and_cache(const std::string& hf_dir, const models::LoadOptions& load);
  KvBudget cache_budget;  // what plan_cache_memory chose
  std::unique_ptr<dist::ProcessGroups> weight_group;

  // ---- shared state (guarded by mu) ----
  mutable std::mutex mu;
  std::condition_variable cv;       // wakes the scheduler
  std::condition_variable idle_cv;  // signals the end of a step
  std::deque<std::shared_ptr<Sequence>> waiting;
  std::vector<std::shared_ptr<Sequence>> running;  // scheduler-owned, read under mu
  std::unordered_map<RequestId, std::shared_ptr<Sequence>> live;
  std::unordered_set<RequestId> abort_requested;
  std::unordered_map<RequestId, std::string> step_errors;  // set while its callback runs
  RequestId next_id = 1;
  bool paused = false;
  int control_holds = 0;  // weight updates / memory operations in progress
  bool in_step = false;
  // Finished requests whose exact log-probs are not computed yet (exact_pending below): the
  // scheduler computes and delivers them before it sleeps, so waiting for !busy() also waits
  // for them (a weight update must not come between a request's tokens and its log-probs).
  bool has_exact_pending = false;
  bool busy() const { return in_step || has_exact_pending; }
  bool stopping = false;
  bool weights_released = false;
  bool memory_released = false;
  int64_t weight_version = 0;
  std::thread scheduler;

  void scheduler_loop();
  bool can_step() const {
    return !paused && control_holds == 0 && !memory_released &&
           (!waiting.empty() || !running.empty());
  }
  // Finishes aborted requests; returns the finished ones (callbacks run outside the lock).
  std::vector<std::shared_ptr<Sequence>> take_aborts();
  void admit();
  std::vector<std::shared_ptr<Sequence>> step();

  // ---- prefix sharing and chunked prefill (engine_schedule.cpp; scheduler thread only) ----
  struct PrefixGroup {  // requests admitted with one prompt, until the leader has prefilled it
    std::shared_ptr<Sequence> leader;
    std::vector<std::shared_ptr<Sequence>> followers;
    int64_t weight_version = 0;  // at admission: never shared across weight versions
  };
  std::unordered_map<RequestId, PrefixGroup> prefix_groups;  // by leader id
  std::unordered_map<RequestId, RequestId> leader_of;        // pending follower -> its leader
  int64_t prefix_shared_tokens = 0;  // prompt tokens followers did not prefill (model_info)
  // The decode log line (options.decode_log_interval): steps and tokens since the last line.
  struct DecodeLog {
    int64_t steps = 0;
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  } decode_log;
  void log_decode_stats(int64_t tokens_this_step);
  struct StepPlan {
    std::vector<std::shared_ptr<Sequence>> batch;  // sampled this step (followers behind leaders)
    std::vector<std::pair<std::shared_ptr<Sequence>, int64_t>> chunks;  // (sequence, tokens)
  };
  StepPlan plan_step();
  bool reserve(const std::shared_ptr<Sequence>& s);
  PrefixGroup* group_to_join(const Sequence& s);
  void repair_prefix_groups();
  void prefill_chunks(const std::vector<std::pair<std::shared_ptr<Sequence>, int64_t>>& chunks);
  void fail_with_followers(Sequence& s, const std::string& why);
  std::vector<std::vector<std::shared_ptr<Sequence>>> sharing_units(
      const std::vector<std::shared_ptr<Sequence>>& seqs) const;
  std::pair<std::vector<int64_t>, std::vector<float>> forward_with_followers(
      const std::vector<std::shared_ptr<Sequence>>& seqs);
  void finish_sharing(const std::vector<std::shared_ptr<Sequence>>& seqs,
                      std::vector<std::pair<Sequence*, at::Tensor>>& riding);

  // Runs `seqs` through one forward pass and appends their next tokens. When the pass fails,
  // each sequence (with the followers riding on its prefill) is retried alone, so a failure
  // ends only the sequences it belongs to.
  void advance_isolating_failures(const std::vector<std::shared_ptr<Sequence>>& seqs);
  // The forward pass and sampling of advance(): throws with no sequence changed.
  std::pair<std::vector<int64_t>, std::vector<float>> forward_and_sample(
      const std::vector<std::shared_ptr<Sequence>>& seqs);
  // Draws each sequence's next token from its row of logits_BV (engine.cpp).
  std::vector<int64_t> choose_tokens(const std::vector<std::shared_ptr<Sequence>>& seqs,
                                     const at::Tensor& logits_BV,
                                     std::vector<at::Tensor>& penalized_V);
  std::vector<float> step_logprobs(const std::vector<std::shared_ptr<Sequence>>& seqs,
                                   const at::Tensor& logits_BV, const std::vector<int64_t>& chosen);
  void recompute_isolating_failures(const std::vector<std::shared_ptr<Sequence>>& seqs);
  // exact_logprobs: requests that finish are scored together in as few passes as latency
  // allows, so each shared prompt is computed once and the GEMMs have many rows. They wait
  // until nothing else is running or queued, the scheduler is paused or held, they hold
  // kExactBatchTokens tokens, or the oldest has waited kExactMaxWaitSteps steps; then
  // flush_exact_pending scores and returns them. Scheduler thread only (has_exact_pending
  // mirrors it under mu). Requests that return routed experts are scored at once instead:
  // their replay rows are read from the KV cache's routing pool before their blocks are freed.
  static constexpr int64_t kExactMaxWaitSteps = 8;
  static constexpr int64_t kExactBatchTokens = 8192;
  std::vector<std::shared_ptr<Sequence>> exact_pending;
  int64_t exact_pending_tokens = 0, exact_pending_steps = 0;
  std::vector<std::shared_ptr<Sequence>> flush_exact_pending();
  // Ends `s` alone with `why` (finish reason abort, GenerateOutput::error); the next loop
  // iteration delivers it. Called without mu held.
  void fail_sequence(Sequence& s, const std::string& why);
  void append_token(Sequence& s, int64_t token, float logprob);
  void recompute_logprobs(const std::vector<std::shared_ptr<Sequence>>& seqs);
  // The forward options of recompute_logprobs over `group` (packed in that order): the
  // requests that return routed experts replay them.
  models::ForwardOptions recompute_options(const std::vector<Sequence*>& group) const;
  void finish(const std::shared_ptr<Sequence>& s, FinishReason reason);
  // With s.return_routed_experts: out.routed_experts from the routing pool at s's slots, for
  // the positions that ran (the first num_cached), -1 after. Call before its blocks are freed.
  void collect_routing(Sequence& s);
  // The routing pool's rows at s's slots, int32 [tokens, L, K]: the positions that ran (the
  // first num_cached), -1 after. Requires a pool that records routing.
  at::Tensor routing_rows(const Sequence& s) const;
  void validate(const GenerateRequest& request) const;
  // A queued sequence for a validated submission (no id yet; the callbacks move in).
  std::shared_ptr<Sequence> make_sequence(Engine::Submission submission) const;
  void check_weights_present() const;
  // The error that ended request `id` (only valid inside its done callback), "" if none.
  std::string error_of(RequestId id) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = step_errors.find(id);
    return it == step_errors.end() ? std::string() : it->second;
  }

  // Makes the engine's device current on this thread for the guard's life (CUDA: the device
  // cuda:i that kernels, streams and NCCL calls without a tensor argument use; CPU: nothing).
  // Every thread the engine computes on holds one: a new thread starts on cuda:0.
  c10::OptionalDeviceGuard device_guard() const {
    return c10::OptionalDeviceGuard(device.is_cpu() ? std::nullopt
                                                    : std::optional<c10::Device>(device));
  }

  // Runs `fn` with the scheduler held between steps (no step runs meanwhile).
  template <typename Fn>
  auto with_scheduler_held(Fn&& fn) {
    std::unique_lock<std::mutex> lock(mu);
    ++control_holds;
    cv.notify_all();
    idle_cv.wait(lock, [&] { return !busy(); });
    lock.unlock();
    struct Release {
      Impl* impl;
      ~Release() {
        std::lock_guard<std::mutex> g(impl->mu);
        --impl->control_holds;
        impl->cv.notify_all();
      }
    } release{this};
    // On a thread that exits: the caller's thread (an HTTP handler, the trainer) then keeps no
    // OpenMP pool that would slow the scheduler's parallel regions (core/fresh_thread.h).
    return run_on_fresh_thread([&] {
      c10::InferenceMode guard;
      auto on_device = device_guard();
      return fn();
    });
  }
  void copy_weights(const std::vector<std::pair<std::string, at::Tensor>>& named);
};

}  // namespace furlong::engine
