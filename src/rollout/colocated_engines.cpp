// --colocate: one engine per engine group (rollout/engine_layout.h), inside the training process
// of the group's first rank. Each engine receives the weights as tensors in its own rank (the
// backend's gather leaves the full weights on every rank; no copy through a process group); its
// KV cache (and on a GPU its weights) is released while the trainer trains and rebuilt before
// the next weight sync.
//
// Generation is driven from rank 0. dispatch() hands a round's requests for rank 0's engine to
// it all at once (Engine::submit_all), then broadcasts the others' requests to all ranks (one JSON
// message, every request with all its sampling fields, so the serving engine sees exactly what rank
// 0 built), each rank runs its share to the end on its own engine, and the outputs come back to
// rank 0 by one gather, in submission order. The other ranks wait for such messages in
// generation_phase until rank 0 sends "end". With --use-rollout-routing-replay every engine records
// routed experts and the outputs carry them across ranks (base64 of the int32 ids, every row).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstring>
#include <mutex>

#include "core/concurrency.h"
#include "core/digest.h"
#include "core/error.h"
#include "core/json_util.h"
#include "core/log.h"
#include "core/openmp_pool.h"
#include "dist/process_group.h"
#include "engine/kv_budget.h"
#include "engine/routed_experts_codec.h"
#include "models/causal_lm.h"
#include "rollout/engine_layout.h"
#include "rollout/rollout_engines.h"

namespace furlong::rollout {
namespace {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

int64_t tensor_bytes(const NamedTensors& named) {
  int64_t bytes = 0;
  for (const auto& [name, t] : named) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

// ---- the messages between rank 0 and the serving ranks ----

// A request's sampling travels as SGLang's sampling_params (engine/sampling_params.cpp, the
// codec the engine servers use too), plus the request-level top_logprobs_num.
Json sampling_to_json(const engine::SamplingParams& p) {
  return {{"params", engine::sampling_params_json(p)}, {"top_logprobs_num", p.top_logprobs_num}};
}

engine::SamplingParams sampling_from_json(const Json& j) {
  auto p = engine::parse_sampling_params(j.at("params"), "colocated request");
  p.top_logprobs_num = j.at("top_logprobs_num").get<int64_t>();
  return p;
}

Json output_to_json(const engine::GenerateOutput& o) {
  Json top = Json::array();
  for (const auto& position : o.output_top_logprobs) top.push_back(position);
  Json j = {{"ids", o.output_ids},
            {"lp", o.output_logprobs},
            {"top", std::move(top)},
            {"finish", static_cast<int>(o.finish_reason)},
            {"stop_str", o.matched_stop_string},
            {"prompt_tokens", o.prompt_tokens},
            {"version", o.weight_version},
            {"error", o.error}};
  if (o.matched_stop_token) j["stop_id"] = *o.matched_stop_token;
  if (const auto& r = o.routed_experts; !r.empty()) {  // every row (the last one too)
    j["routed"] = {{"layers", r.num_layers},
                   {"top_k", r.top_k},
                   {"ids", engine::base64_encode(r.ids.data(), r.ids.size() * sizeof(int32_t))}};
  }
  return j;
}

engine::GenerateOutput output_from_json(const Json& j) {
  engine::GenerateOutput o;
  o.output_ids = j.at("ids").get<std::vector<int64_t>>();
  o.output_logprobs = j.at("lp").get<std::vector<float>>();
  for (const auto& position : j.at("top")) o.output_top_logprobs.push_back(position);
  o.finish_reason = static_cast<engine::FinishReason>(j.at("finish").get<int>());
  o.matched_stop_string = j.at("stop_str").get<std::string>();
  o.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
  o.weight_version = j.at("version").get<int64_t>();
  o.error = j.at("error").get<std::string>();
  if (j.contains("stop_id")) o.matched_stop_token = j.at("stop_id").get<int64_t>();
  if (j.contains("routed")) {
    const auto& r = j.at("routed");
    o.routed_experts.num_layers = r.at("layers").get<int64_t>();
    o.routed_experts.top_k = r.at("top_k").get<int64_t>();
    const auto bytes = engine::base64_decode(r.at("ids").get<std::string>(), "routed experts");
    o.routed_experts.ids.resize(bytes.size() / sizeof(int32_t));
    std::memcpy(o.routed_experts.ids.data(), bytes.data(), bytes.size());
  }
  return o;
}

// Rank 0's `text` on every rank of `world`.
std::string broadcast_text(dist::Group& world, const std::string& text) {
  auto size = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  world.broadcast(size, 0);
  auto buffer = at::empty({size.item<int64_t>()}, at::kByte);
  if (world.rank() == 0) std::memcpy(buffer.data_ptr(), text.data(), text.size());
  world.broadcast(buffer, 0);
  return {static_cast<const char*>(buffer.data_ptr()), static_cast<size_t>(buffer.numel())};
}

class ColocatedEngines : public RolloutEngines {
 public:
  ColocatedEngines(const RolloutConfig& options, dist::ProcessGroups& groups)
      : world_(groups.world()),
        layout_(colocated_engine_layout(options.rollout, groups.world().size())) {
    if (layout_.engine_on_rank(world_.rank()) >= 0) {
      engine::EngineOptions eo;
      eo.device = groups.device().str();  // the rank's own device (cuda:LOCAL_RANK or cpu)
      eo.attn_implementation = options.engine.attn_implementation;
      eo.fused_kernels = options.engine.fused_kernels;
      eo.max_total_tokens = options.rollout.engine_max_total_tokens;
      eo.mem_fraction_static = options.rollout.engine_mem_fraction_static;
      eo.exact_logprobs = options.rollout.engine_exact_logprobs;
      eo.pack_shared_prompts = options.engine.pack_shared_prompts;
      eo.num_threads = options.rollout.engine_num_threads;
      eo.chunked_prefill_size = options.rollout.engine_chunked_prefill_size;
      eo.decode_log_interval = options.rollout.engine_decode_log_interval;
      eo.max_running_requests = options.rollout.engine_max_running_requests;
      eo.max_prefill_tokens = options.rollout.engine_max_prefill_tokens;
      eo.context_length = options.rollout.engine_context_length;
      eo.prefix_sharing = !options.rollout.engine_disable_radix_cache;
      eo.record_routed_experts = options.engine.record_routing;
      eo.dtype = options.engine.dtype(eo.device);  // the trainer's
      share_host_memory(eo, groups);
      engine_ = engine::Engine::load(options.engine.hf_checkpoint, eo);
    }
    threads_ = options.rollout.engine_num_threads > 0 ? options.rollout.engine_num_threads
                                                      : at::get_num_threads();
    pending_.resize(static_cast<size_t>(world_.size()));
  }

  int64_t num_engines() const override { return layout_.num_engines(); }

  void submit(engine::GenerateRequest request, Done done) override {
    submit_to(0, std::move(request), std::move(done));
  }

  void submit_to(int64_t engine, engine::GenerateRequest request, Done done) override {
    FURLONG_CHECK(world_.rank() == 0, "generation is driven from rank 0");
    FURLONG_ASSERT(engine >= 0 && engine < layout_.num_engines(), "submit_to: no engine ", engine);
    const int rank = layout_.engine_ranks[static_cast<size_t>(engine)];
    pending_[static_cast<size_t>(rank)].push_back({std::move(request), std::move(done)});
  }

  void dispatch() override {
    submit_own_share();
    bool any = false;
    for (const auto& p : pending_) any = any || !p.empty();
    if (!any) return;
    Json work = Json::array();
    for (const auto& requests : pending_) {
      Json mine = Json::array();
      for (const auto& p : requests) {
        mine.push_back({{"ids", p.request.input_ids},
                        {"sampling", sampling_to_json(p.request.sampling)},
                        {"routed", p.request.return_routed_experts}});
      }
      work.push_back(std::move(mine));
    }
    broadcast_text(world_, Json{{"kind", "generate"}, {"work", std::move(work)}}.dump());
    const auto replies = world_.all_gather_strings("");
    auto pending = std::move(pending_);
    pending_.assign(static_cast<size_t>(world_.size()), {});
    for (size_t rank = 1; rank < pending.size(); ++rank)
      deliver(rank, replies[rank], pending[rank]);
  }

  void generation_phase(bool root, const std::function<void()>& drive) override {
    // This rank's engine decodes on its scheduler thread meanwhile: with the trainer's OpenMP
    // pool gone, the scheduler's is the process's only one (core/openmp_pool.h).
    release_openmp_pool_of_this_thread();
    if (world_.size() == 1) {
      drive();
      return;
    }
    if (!root) {
      serve();
      return;
    }
    drive();
    broadcast_text(world_, Json{{"kind", "end"}}.dump());
  }

  void abort_all() override {
    if (engine_) engine_->abort_all();
  }

  void rethrow_errors() override {
    std::string error;
    std::swap(error, error_);
    if (!error.empty()) FURLONG_FAIL(error);
  }

  void release_memory() override {
    if (!engine_) return;
    // On a GPU the engine gives back its weights too (miles' default offload level). On the
    // CPU trainer and engine share host memory, and refaulting a fresh copy of the weights at
    // every sync costs more than it frees: the engine keeps them and the sync overwrites them.
    const auto& w = engine_->model().weights();
    const bool on_gpu = !w.empty() && !w.front().empty() && w.front().front().is_cuda();
    engine_->release_memory(/*include_weights=*/on_gpu);
  }

  void resume_memory() override {
    if (engine_ && engine_->memory_released()) engine_->resume_memory();
  }

  // Every rank takes the full weights the backend hands it; an engine-hosting rank copies them
  // into its engine. With check_equal every engine's digest is compared with rank 0's digest
  // of what it sent, on every rank (so all of them fail together, naming the engine).
  int64_t sync_weights(const WeightSource& weights, int64_t version, bool check_equal) override {
    int64_t bytes = 0;
    std::vector<std::pair<std::string, uint64_t>> sent;  // per-tensor digests, all buckets
    weights([&](const NamedTensors& bucket) {
      if (!engine_) return;
      engine_->update_weights_from_tensors(bucket, version);
      bytes += tensor_bytes(bucket);
      if (check_equal) {
        for (const auto& [name, t] : bucket) sent.emplace_back(name, tensor_digest(name, t));
      }
    });
    if (check_equal) check_digests(version, engine_ ? combine_tensor_digests(std::move(sent)) : "");
    return world_.rank() == 0 ? bytes : 0;
  }

  std::string describe() const override { return layout_.describe(threads_); }

 private:
  struct Pending {
    engine::GenerateRequest request;
    Done done;
  };

  // On the CPU the engines of one host share its memory: unless a size is given, each sizes
  // its weights + KV cache from an equal share of the default fraction (each would otherwise
  // claim the default fraction of the whole machine for itself).
  void share_host_memory(engine::EngineOptions& eo, dist::ProcessGroups& groups) const {
    if (!groups.device().is_cpu() || eo.mem_fraction_static > 0 || eo.max_total_tokens > 0) return;
    const auto& info = groups.info();
    const int64_t here =
        layout_.engines_on_host(world_.rank(), info.local_rank, info.local_world_size);
    if (here <= 1) return;
    eo.mem_fraction_static = engine::default_mem_fraction_static(false) / static_cast<double>(here);
    if (layout_.engine_on_rank(world_.rank()) == 0) {
      LOG_INFO("colocated: ", here, " engines share this host's memory, each sized with ",
               "--engine-mem-fraction-static ", eo.mem_fraction_static);
    }
  }

  void check_digests(int64_t version, const std::string& want_here) {
    const std::string held_here = engine_ ? engine_->weights_digest() : "";
    const auto wants = world_.all_gather_strings(want_here);
    const auto helds = world_.all_gather_strings(held_here);
    for (int rank : layout_.engine_ranks) {
      FURLONG_CHECK(helds[rank] == wants[0] && wants[rank] == wants[0],
                    "--check-weight-update-equal: the engine on rank ", rank, " holds weights ",
                    "with digest ", helds[rank], " (it was sent ", wants[rank],
                    "); rank 0 sent digest ", wants[0], " in update ", version);
    }
  }

  // Rank 0: hands rank `rank`'s reply to the callbacks of its requests, in submission order.
  // A rank that failed (or a reply that does not match) ends them as aborted, and the error is
  // raised by rethrow_errors() once the round's callbacks have all run.
  void deliver(size_t rank, const std::string& reply, std::vector<Pending>& requests) {
    if (requests.empty()) return;
    std::string failure;
    Json outputs;
    try {
      const auto j = Json::parse(reply);
      if (j.contains("error")) {
        failure = j["error"].get<std::string>();
      } else {
        outputs = j.at("outputs");
        if (outputs.size() != requests.size()) failure = "it answered a different request count";
      }
    } catch (const std::exception& e) {
      failure = std::string("its reply could not be read: ") + e.what();
    }
    if (!failure.empty() && error_.empty()) {
      error_ = "colocated engine on rank " + std::to_string(rank) + " failed: " + failure;
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      engine::GenerateOutput out;
      if (failure.empty()) {
        out = output_from_json(outputs[i]);
      } else {
        out.finish_reason = engine::FinishReason::kAbort;
        out.error = failure;
      }
      requests[i].done(std::move(out));
    }
  }

  // A serving rank: runs every round rank 0 dispatches until it sends "end".
  void serve() {
    while (true) {
      const auto message = Json::parse(broadcast_text(world_, ""));
      if (message.at("kind") == "end") return;
      std::string reply;
      try {
        const auto& share = message.at("work").at(static_cast<size_t>(world_.rank()));
        if (!served_ && !share.empty()) {
          LOG_INFO("colocated engine on rank ", world_.rank(), " serves its share (", share.size(),
                   " requests in its first round)");
          served_ = true;
        }
        reply = run_share(share);
      } catch (const std::exception& e) {
        reply = Json{{"error", e.what()}}.dump();
      }
      world_.all_gather_strings(reply);
    }
  }

  // Rank 0's requests of the round go to its engine in one submit_all, so that the engine's
  // batches (and every logit's rounding) do not depend on how fast the driver submitted them.
  void submit_own_share() {
    auto mine = std::move(pending_[0]);
    pending_[0].clear();
    if (mine.empty()) return;
    std::vector<engine::Engine::Submission> batch;
    batch.reserve(mine.size());
    for (auto& p : mine) {
      batch.push_back({std::move(p.request),
                       [done = std::move(p.done)](engine::RequestId, engine::GenerateOutput out) {
                         done(std::move(out));
                       },
                       {}});
    }
    engine_->submit_all(std::move(batch));
  }

  // This rank's requests of one round, generated to the end on its engine. Every callback has
  // run before this returns or throws (they write into this frame).
  std::string run_share(const Json& requests) {
    FURLONG_CHECK(engine_ || requests.empty(), "rank ", world_.rank(),
                  " hosts no engine but was sent requests");
    Gather<engine::GenerateOutput> results(requests.size());
    std::vector<engine::Engine::Submission> batch;
    for (size_t i = 0; i < requests.size(); ++i) {
      engine::GenerateRequest request{
          .input_ids = requests[i].at("ids").get<std::vector<int64_t>>(),
          .sampling = sampling_from_json(requests[i].at("sampling")),
          .return_routed_experts = requests[i].at("routed").get<bool>()};
      batch.push_back({std::move(request),
                       [&results, i](engine::RequestId, engine::GenerateOutput out) {
                         results.put(i, std::move(out));
                       },
                       {}});
    }
    if (!batch.empty()) engine_->submit_all(std::move(batch));  // none queued if one is rejected
    Json all = Json::array();
    for (const auto& o : results.take_all()) all.push_back(output_to_json(o));
    return Json{{"outputs", std::move(all)}}.dump();
  }

  dist::Group& world_;
  EngineLayout layout_;
  int64_t threads_ = 0;
  std::unique_ptr<engine::Engine> engine_;
  std::vector<std::vector<Pending>> pending_;  // by rank: requests waiting for dispatch()
  std::string error_;                          // of the last dispatch, raised by rethrow_errors
  bool served_ = false;                        // a serving rank logged its first round
};

}  // namespace

std::unique_ptr<RolloutEngines> make_colocated_engines(const RolloutConfig& options,
                                                       dist::ProcessGroups& groups) {
  return std::make_unique<ColocatedEngines>(options, groups);
}

}  // namespace furlong::rollout
