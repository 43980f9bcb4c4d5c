// Engine: loading, request intake, the scheduler thread, and the control operations (pause,
// weight updates, memory release). Model work happens only on the scheduler thread, inside
// one step at a time; control operations wait for the step in progress to end.
#include "engine/engine.h"
#include "engine/engine_impl.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/concurrency.h"
#include "core/device_memory.h"
#include "core/digest.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fresh_thread.h"
#include "core/log.h"
#include "dist/process_group.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/paged_forward.h"
#include "engine/sampler.h"
#include "engine/weight_sync.h"
#include "kernels/parallel.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine {
namespace {

namespace fs = std::filesystem;

// The random generator of one seeded draw: keyed on the request's seed and the position of the
// token being drawn (as SGLang's sampling_seed), so a request continued from its prompt plus
// its first k tokens with the same seed draws what the uninterrupted request drew (partial
// rollouts). A splitmix64 finalizer decorrelates neighbouring positions and seeds.
std::mt19937_64 positional_rng(uint64_t seed, size_t position) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(position) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return std::mt19937_64(z ^ (z >> 31));
}

constexpr int64_t kMaxThreads = 1 << 16;  // set_num_threads takes an int

// eos ids: the tokenizer's eos token plus generation_config.json's eos_token_id (int or list).
std::vector<int64_t> eos_token_ids(const fs::path& dir, const tokenizer::Tokenizer& tok) {
  std::vector<int64_t> ids;
  if (auto eos = tok.eos_token_id()) ids.push_back(*eos);
  auto path = dir / "generation_config.json";
  if (fs::exists(path)) {
    Json gen = read_json_file(path);
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const Json& e = gen["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<int64_t>());
      if (e.is_array()) {
        for (const auto& id : json_as<std::vector<int64_t>>(e, "eos_token_id", path.string())) {
          ids.push_back(id);
        }
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

c10::Device choose_device(const std::string& name) {
  if (name.empty()) return at::hasCUDA() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  try {
    return c10::Device(name);
  } catch (const std::exception&) {
    FURLONG_FAIL("engine device: '", name, "' is not a device name (cpu, cuda, cuda:0, ...)");
  }
}

}  // namespace

const std::vector<std::string>& prepack_weights_choices() {
  static const std::vector<std::string> names = {"auto", "on", "off"};  // enum order
  return names;
}

PrepackWeights parse_prepack_weights(const std::string& name) {
  const auto& names = prepack_weights_choices();
  const auto it = std::find(names.begin(), names.end(), name);
  FURLONG_CHECK(it != names.end(), "--prepack-weights must be auto, on or off, got '", name, "'");
  return static_cast<PrepackWeights>(it - names.begin());
}

const std::string& prepack_weights_name(PrepackWeights mode) {
  return prepack_weights_choices().at(static_cast<size_t>(mode));
}

// ---------------------------------------------------------------------------------------------
// Loading and accessors

// The KV cache's size from the memory left after the weights (engine/kv_budget.h).
KvBudget Engine::Impl::plan_cache_memory() {
  const auto& cfg = model->config();
  KvBudgetInput in;
  for (const auto& unit : model->weights()) {
    for (const auto& w : unit) in.weight_bytes += static_cast<int64_t>(w.nbytes());
  }
  in.weight_bytes += packed_weights.bytes();  // the packed copies are weights too
  if (options.test_memory_bytes > 0) {        // as if the device had this much, all free at start
    in.memory = {options.test_memory_bytes,
                 std::max<int64_t>(options.test_memory_bytes - in.weight_bytes, 0)};
  } else {
    in.memory = device_memory(device);
  }
  mem_fraction_static = options.mem_fraction_static > 0
                            ? options.mem_fraction_static
                            : default_mem_fraction_static(device.is_cuda());
  in.mem_fraction_static = mem_fraction_static;
  in.requested_tokens = options.max_total_tokens;
  // Only the softmax-attention layers keep K/V; each running sequence holds its DeltaNet
  // state beside the blocks (hybrid models).
  const auto& la = cfg.linear_attention;
  const auto kv_layers = cfg.num_hidden_layers - static_cast<int64_t>(la.layers.size());
  in.bytes_per_token =
      KvCache::bytes_per_token(kv_layers, cfg.num_key_value_heads, cfg.head_dim, dtype);
  // Each running sequence also holds a spare recurrent state the decode step writes into.
  linear_state_bytes = la.state_bytes_per_sequence(static_cast<int64_t>(c10::elementSize(dtype))) +
                       la.recurrent_state_bytes_per_sequence();
  in.reserved_bytes = linear_state_bytes * options.max_running_requests;
  if (options.record_routed_experts) {  // the routing pool shares the cache's slots
    in.bytes_per_token +=
        KvCache::routing_bytes_per_token(cfg.num_hidden_layers, cfg.moe.experts_per_token);
  }
  in.block_size = options.kv_block_size;
  // No sequence reserves more than the context: more than this many tokens is never used.
  const int64_t per_request = (context_length + in.block_size - 1) / in.block_size * in.block_size;
  in.max_useful_tokens = per_request > INT64_MAX / options.max_running_requests
                             ? INT64_MAX / 2
                             : per_request * options.max_running_requests;
  in.dtype = dtype_name(dtype);
  auto budget = plan_kv_cache(in);
  cache_bytes = budget.bytes;
  return budget;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Engine> Engine::load(const std::string& hf_dir, const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->model_path = hf_dir;
  FURLONG_CHECK(options.kv_block_size > 0, "engine: kv_block_size must be positive, got ",
                options.kv_block_size);
  FURLONG_CHECK(options.max_total_tokens == 0 || options.max_total_tokens >= options.kv_block_size,
                "engine: --max-total-tokens must be 0 (size from memory) or hold at least one KV "
                "block (",
                options.kv_block_size, " tokens), got ", options.max_total_tokens);
  FURLONG_CHECK(options.mem_fraction_static >= 0 && options.mem_fraction_static <= 1,
                "engine: --mem-fraction-static must be in [0, 1] (0 = the device default), got ",
                options.mem_fraction_static);
  FURLONG_CHECK(options.test_memory_bytes >= 0, "engine: test_memory_bytes must be >= 0");
  FURLONG_CHECK(options.max_running_requests > 0,
                "engine: max_running_requests must be positive, got ",
                options.max_running_requests);
  FURLONG_CHECK(options.max_prefill_tokens > 0, "engine: max_prefill_tokens must be positive");
  FURLONG_CHECK(options.context_length >= 0,
                "engine: --context-length must be > 0, or 0 for the model's "
                "max_position_embeddings; got ",
                options.context_length);
  FURLONG_CHECK(options.num_threads >= 0 && options.num_threads <= kMaxThreads,
                "engine: num_threads must be in [0, ", kMaxThreads, "], got ", options.num_threads);
  if (options.num_threads > 0) at::set_num_threads(static_cast<int>(options.num_threads));
  impl->device = choose_device(options.device);
  models::LoadOptions load;
  load.auto_dtype = options.dtype == "auto";
  if (!options.dtype.empty() && !load.auto_dtype) {
    load.dtype = parse_dtype(options.dtype, "engine dtype");
  }
  load.device = impl->device;
  // The model's loading and the cache's allocation run parallel regions: on a thread that
  // exits, so that the scheduler's OpenMP pool is the engine's only one (core/fresh_thread.h).
  run_on_fresh_thread([&] {
    auto on_device = impl->device_guard();
    impl->load_model_and_cache(hf_dir, load);
  });
  Impl* raw = impl.get();
  impl->scheduler = std::thread([raw] { raw->scheduler_loop(); });
  const auto& cfg = impl->model->config();
  LOG_INFO("engine: loaded ", cfg.architecture, " from ", hf_dir, " (", dtype_name(impl->dtype),
           ", ", impl->device.str(), ")");
  LOG_INFO("engine: KV cache ", impl->cache_budget.num_blocks * options.kv_block_size, " tokens (",
           impl->cache_budget.num_blocks, " blocks of ", options.kv_block_size, ", ",
           format_gb(impl->cache_budget.bytes), ", ",
           impl->cache_budget.automatic ? "sized from --mem-fraction-static" : "--max-total-tokens",
           options.record_routed_experts ? ", with the routed-experts record" : "", ")");
  if (impl->linear_state_bytes > 0) {
    LOG_INFO("engine: DeltaNet state ", format_gb(impl->linear_state_bytes),
             " per running sequence, ",
             format_gb(impl->linear_state_bytes * options.max_running_requests), " for ",
             options.max_running_requests, " (--max-running-requests), reserved before the cache");
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

void Engine::Impl::load_model_and_cache(const std::string& hf_dir,
                                        const models::LoadOptions& load) {
  {
    c10::InferenceMode guard;
    model = models::load_hf_model(hf_dir, load);
  }
  model->set_requires_grad(false);
  dtype = model->weights()[0][0].scalar_type();
  tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_directory(hf_dir));
  eos_ids = eos_token_ids(hf_dir, *tok);
  forward.attn = models::parse_attn_impl(options.attn_implementation, "engine attention");
  forward.fused_kernels = options.fused_kernels;
  const auto& cfg = model->config();
  FURLONG_CHECK(!options.record_routed_experts || cfg.moe.enabled(),
                "engine: recording routed experts (--enable-return-routed-experts, rollout "
                "routing replay) needs a mixture-of-experts model; ",
                cfg.architecture, " from ", hf_dir, " has no routed experts");
  context_length =
      options.context_length > 0 ? options.context_length : cfg.max_position_embeddings;
  FURLONG_CHECK(options.prepack_weights != PrepackWeights::kOn || !device.is_cpu() ||
                    kernels::packed_linear_available(),
                "engine: --prepack-weights on needs oneDNN's prepacking ops "
                "(mkldnn::_reorder_linear_weight), which this libtorch lacks or has disabled; "
                "use auto or off");
  pack_weights = choose_packing();
  pack_all_weights();
  cache_budget = plan_cache_memory();
  cache = std::make_unique<KvCache>(
      cfg.num_hidden_layers, cache_budget.num_blocks, options.kv_block_size,
      cfg.num_key_value_heads, cfg.head_dim, at::TensorOptions().dtype(dtype).device(device),
      options.record_routed_experts ? cfg.moe.experts_per_token : 0, cfg.linear_attention.layers);
}

// The GEMM weights of the engine's steps that packing would copy: every layer's and the head's
// (an untied embedding is only looked up, never multiplied).
std::vector<at::Tensor> Engine::Impl::packable_weights() const {
  const auto& w = model->weights();
  std::vector<at::Tensor> out;
  for (size_t u = 0; u < w.size(); ++u) {
    if (u == models::CausalLM::kEmbedUnit) continue;
    for (const auto& t : w[u]) {
      if (kernels::packed_linear_wants(t)) out.push_back(t);
    }
  }
  // A tied head is the embedding's tensor; an untied one is in the final unit, above.
  const auto& head = model->head_weight(w[models::CausalLM::kEmbedUnit], w[model->final_unit()]);
  if (model->config().tie_word_embeddings && kernels::packed_linear_wants(head)) {
    out.push_back(head);
  }
  return out;
}

// --prepack-weights: "on" packs where oneDNN is present; "auto" where it pays off (bf16 on AMX)
// and the weights with their packed copies take at most half of the memory that
// --mem-fraction-static gives weights and KV cache together, so the cache keeps the other half.
bool Engine::Impl::choose_packing() const {
  if (options.prepack_weights == PrepackWeights::kOff || !device.is_cpu()) return false;
  if (options.prepack_weights == PrepackWeights::kOn) return true;
  if (!kernels::packed_linear_pays_off(dtype, device)) return false;
  int64_t weight_bytes = 0, packed_bytes = 0;
  for (const auto& unit : model->weights()) {
    for (const auto& w : unit) weight_bytes += static_cast<int64_t>(w.nbytes());
  }
  for (const auto& w : packable_weights()) packed_bytes += static_cast<int64_t>(w.nbytes());
  const double total =
      static_cast<double>(options.test_memory_bytes > 0 ? options.test_memory_bytes
                                                        : device_memory(device).total_bytes);
  const double fraction = options.mem_fraction_static > 0 ? options.mem_fraction_static
                                                          : default_mem_fraction_static(false);
  if (static_cast<double>(weight_bytes + packed_bytes) <= 0.5 * fraction * total) return true;
  LOG_INFO("engine: weights not prepacked (--prepack-weights auto): their packed copies (",
           format_gb(packed_bytes), ") would leave the KV cache less than half of the ",
           format_gb(static_cast<int64_t>(fraction * total)),
           " --mem-fraction-static gives; "
           "--prepack-weights on packs anyway");
  return false;
}

void Engine::Impl::pack_all_weights() {
  packed_weights.clear();
  if (!pack_weights) return;
  for (const auto& w : packable_weights()) packed_weights.pack(w);
  LOG_INFO("engine: ", packed_weights.count(), " weights also kept in oneDNN's GEMM layout (",
           format_gb(packed_weights.bytes()), "; --prepack-weights ",
           prepack_weights_name(options.prepack_weights), ")");
}

Engine::~Engine() {
  if (!impl_) return;
  abort_all();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->scheduler.joinable()) impl_->scheduler.join();
}

const models::CausalLM& Engine::model() const {
  return *impl_->model;
}
const tokenizer::Tokenizer& Engine::tokenizer() const {
  return *impl_->tok;
}
const EngineOptions& Engine::options() const {
  return impl_->options;
}
int64_t Engine::context_length() const {
  return impl_->context_length;
}

Json Engine::model_info() const {
  const auto& cfg = impl_->model->config();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return Json{{"model_path", impl_->model_path},
              {"architecture", cfg.architecture},
              {"dtype", dtype_name(impl_->dtype)},
              {"device", impl_->device.str()},
              {"weight_version", impl_->weight_version},
              {"context_length", impl_->context_length},
              {"vocab_size", cfg.vocab_size},
              {"num_hidden_layers", cfg.num_hidden_layers},
              {"eos_token_ids", impl_->eos_ids},
              {"kv_block_size", impl_->options.kv_block_size},
              {"max_total_tokens", impl_->cache->capacity_tokens()},
              {"kv_cache_bytes", impl_->cache_bytes},
              {"linear_state_bytes_per_sequence", impl_->linear_state_bytes},
              {"packed_weight_bytes", impl_->packed_weights.bytes()},
              {"record_routed_experts", impl_->options.record_routed_experts},
              {"num_experts_per_tok", cfg.moe.experts_per_token},
              {"mem_fraction_static", impl_->mem_fraction_static},
              {"prefix_sharing", impl_->options.prefix_sharing},
              {"prefix_shared_tokens", impl_->prefix_shared_tokens},
              {"chunked_prefill_size", impl_->options.chunked_prefill_size},
              {"max_running_requests", impl_->options.max_running_requests}};
}

// ---------------------------------------------------------------------------------------------
// Requests

void Engine::Impl::validate(const GenerateRequest& r) const {
  {
    std::lock_guard<std::mutex> lock(mu);
    FURLONG_CHECK(!memory_released,
                  "generate: the engine's memory is released; call resume_memory first");
    check_weights_present();
  }
  FURLONG_CHECK(!r.input_ids.empty(), "generate: the prompt (input_ids) is empty");
  if (r.return_routed_experts) {
    FURLONG_CHECK(model->config().moe.enabled(), "generate: return_routed_experts asks for the ",
                  "routed experts of an MoE model, but ", model->config().architecture,
                  " has none");
    FURLONG_CHECK(options.record_routed_experts,
                  "generate: return_routed_experts needs an engine that records routing; start "
                  "it with record_routed_experts (furlong serve --enable-return-routed-experts, "
                  "or --use-rollout-routing-replay in training)");
  }
  const int64_t vocab = model->config().vocab_size;
  for (size_t i = 0; i < r.input_ids.size(); ++i) {
    FURLONG_CHECK(r.input_ids[i] >= 0 && r.input_ids[i] < vocab, "generate: input_ids[", i,
                  "] = ", r.input_ids[i], " is outside the vocabulary [0, ", vocab, ")");
  }
  const auto& p = r.sampling;
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    FURLONG_CHECK(p.stop_token_ids[i] >= 0 && p.stop_token_ids[i] < vocab,
                  "generate: stop_token_ids[", i, "] = ", p.stop_token_ids[i],
                  " is outside the vocabulary [0, ", vocab, ")");
  }
  FURLONG_CHECK(p.temperature >= 0, "generate: temperature must be >= 0, got ", p.temperature);
  FURLONG_CHECK(p.top_p > 0 && p.top_p <= 1, "generate: top_p must be in (0, 1], got ", p.top_p);
  FURLONG_CHECK(p.min_p >= 0 && p.min_p < 1, "generate: min_p must be in [0, 1), got ", p.min_p);
  FURLONG_CHECK(p.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ",
                p.max_new_tokens);
  // Checked without forming prompt + max_new_tokens first: near 2^63 the sum overflows.
  const auto prompt_tokens = static_cast<int64_t>(r.input_ids.size());
  FURLONG_CHECK(
      prompt_tokens <= context_length && p.max_new_tokens <= context_length - prompt_tokens,
      "generate: prompt (", prompt_tokens, " tokens) + max_new_tokens (", p.max_new_tokens,
      ") exceeds the context length ", context_length);
  const int64_t total = prompt_tokens + p.max_new_tokens;
  const int64_t capacity = cache->num_blocks() * cache->block_size();
  FURLONG_CHECK(cache->blocks_for(total) <= cache->num_blocks(),
                "generate: prompt + "
                "max_new_tokens = ",
                total, " tokens exceeds the KV cache (", capacity,
                " tokens; raise --max-total-tokens or --mem-fraction-static)");
}

RequestId Engine::submit(GenerateRequest request, DoneCallback on_done, TokenCallback on_tokens) {
  std::vector<Submission> one;
  one.push_back({std::move(request), std::move(on_done), std::move(on_tokens)});
  return submit_all(std::move(one)).front();
}

std::shared_ptr<Sequence> Engine::Impl::make_sequence(Submission submission) const {
  auto s = std::make_shared<Sequence>();
  GenerateRequest& request = submission.request;
  s->sampling = std::move(request.sampling);
  s->on_done = std::move(submission.on_done);
  s->on_tokens = std::move(submission.on_tokens);
  s->tokens = std::move(request.input_ids);
  s->prompt_len = static_cast<int64_t>(s->tokens.size());
  s->return_routed_experts = request.return_routed_experts;
  s->out.prompt_tokens = s->prompt_len;
  s->rng.seed(s->sampling.seed ? *s->sampling.seed : std::random_device{}());
  for (const auto& stop : s->sampling.stop)
    s->max_stop_len = std::max(s->max_stop_len, stop.size());
  if (!s->sampling.stop.empty()) s->decoder = std::make_unique<tokenizer::StreamDecoder>(*tok);
  return s;
}

std::vector<RequestId> Engine::submit_all(std::vector<Submission> batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    try {
      impl_->validate(batch[i].request);
    } catch (const Error& e) {
      if (batch.size() == 1) throw;
      FURLONG_FAIL("request ", i, " of ", batch.size(), " (none was queued): ", e.what());
    }
  }
  std::vector<std::shared_ptr<Sequence>> seqs;
  seqs.reserve(batch.size());
  for (auto& b : batch) seqs.push_back(impl_->make_sequence(std::move(b)));
  std::vector<RequestId> ids;
  ids.reserve(seqs.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& s : seqs) {
    s->id = impl_->next_id++;
    ids.push_back(s->id);
    impl_->live[s->id] = s;
    impl_->waiting.push_back(std::move(s));
  }
  impl_->cv.notify_all();
  return ids;
}

bool Engine::abort(RequestId id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->live.count(id) || impl_->abort_requested.count(id)) return false;
  impl_->abort_requested.insert(id);
  impl_->cv.notify_all();
  return true;
}

void Engine::abort_all() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [id, s] : impl_->live) impl_->abort_requested.insert(id);
  impl_->cv.notify_all();
}

std::vector<GenerateOutput> Engine::generate(
    std::vector<GenerateRequest> requests,
    const std::function<void(int64_t done, int64_t total)>& progress) {
  const int64_t total = static_cast<int64_t>(requests.size());
  Gather<GenerateOutput> results(requests.size());
  FirstError error;
  int64_t done = 0;  // callbacks run one at a time, on the scheduler thread
  std::vector<Submission> batch;
  batch.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    batch.push_back({std::move(requests[i]),
                     [&, i](RequestId id, GenerateOutput out) {
                       if (auto why = impl_->error_of(id); !why.empty()) error.record(why);
                       if (progress) progress(++done, total);
                       results.put(i, std::move(out));  // last: take_all may return after it
                     },
                     {}});
  }
  submit_all(std::move(batch));
  auto outputs = results.take_all();
  FURLONG_CHECK(error.empty(), "generate: an engine step failed: ", error.message());
  return outputs;
}

void Engine::pause_generation() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->paused = true;
  impl_->cv.notify_all();
  impl_->idle_cv.wait(lock, [&] { return !impl_->busy(); });
}

void Engine::continue_generation() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->paused = false;
  impl_->cv.notify_all();
}

void Engine::flush_cache() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->idle_cv.wait(lock, [&] { return !impl_->busy(); });
  FURLONG_CHECK(impl_->live.empty(), "flush_cache: ", impl_->live.size(),
                " requests are queued or running; abort them or wait for them to finish");
  // No prefix is cached beyond the requests that own it, so there is nothing else to drop.
}

int64_t Engine::num_running() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->live.size());
}

// The scheduler (scheduler_loop, admission, prefix sharing, chunked prefill, steps) is in
// engine_schedule.cpp; below: the forward pass, sampling and log-probs of one step.

std::pair<std::vector<int64_t>, std::vector<float>> Engine::Impl::forward_and_sample(
    const std::vector<std::shared_ptr<Sequence>>& seqs) {
  std::vector<StepSequence> steps;
  std::vector<std::mt19937_64> rngs_before;
  for (const auto& s : seqs) {
    int64_t n = static_cast<int64_t>(s->tokens.size()) - s->num_cached;
    steps.push_back(
        {s->tokens.data() + s->num_cached, n, s->num_cached, s->slots, &s->linear_state});
    rngs_before.push_back(s->rng);
  }
  try {
    StagedLinearStates staged;
    auto hidden_BD = paged_forward(*model, *cache, steps, forward, &packed_weights, &staged);
    auto logits_BV = lm_head_logits(*model, hidden_BD, &packed_weights);
    std::vector<at::Tensor> penalized_V(seqs.size());
    auto chosen = choose_tokens(seqs, logits_BV, penalized_V);
    auto logprobs = step_logprobs(seqs, logits_BV, chosen);
    // Penalized rows report the distribution they were drawn from (SGLang's convention).
    std::vector<TopLogprobs> tops(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& p = seqs[i]->sampling;
      const auto row = static_cast<int64_t>(i);
      if (p.penalized()) {
        logprobs[i] = models::logprobs_from_logits(penalized_V[i].unsqueeze(0),
                                                   at::tensor({chosen[i]}, at::kLong),
                                                   p.temperature == 0.0 ? 1.0 : p.temperature)
                          .item<float>();
      }
      if (p.top_logprobs_num > 0) {
        tops[i] = top_logprobs(p.penalized() ? penalized_V[i] : logits_BV[row], p.temperature,
                               p.top_logprobs_num);
      }
    }
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->pending_top = std::move(tops[i]);
    if (staged.commit) staged.commit();  // nothing below throws: the step has succeeded
    return {chosen, logprobs};
  } catch (...) {
    // A retry must draw the same tokens: give every sequence its generator back.
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->rng = rngs_before[i];
    throw;
  }
}

// One token per sequence, the rows in parallel: a row's draw reads only its own logits and
// generator, so how the rows are split over threads changes nothing. Greedy rows without
// penalties take the argmax of the logits as they are (bf16 or fp32); the others draw from an
// fp32 CPU copy of their row, which a penalized row changes and keeps in penalized_V (its
// log-probs and top log-probs are those of the distribution it was drawn from).
std::vector<int64_t> Engine::Impl::choose_tokens(const std::vector<std::shared_ptr<Sequence>>& seqs,
                                                 const at::Tensor& logits_BV,
                                                 std::vector<at::Tensor>& penalized_V) {
  // Off the CPU, one transfer of the whole batch in fp32.
  const auto host_BV =
      logits_BV.is_cpu() ? logits_BV : logits_BV.to(at::kFloat).to(at::kCPU).contiguous();
  std::vector<int64_t> chosen(seqs.size());
  // kernels::parallel_for: this file is built without -fopenmp, where at::parallel_for is serial.
  kernels::parallel_for(0, static_cast<int64_t>(seqs.size()), 1, [&](int64_t b0, int64_t b1) {
    c10::InferenceMode guard;  // OpenMP workers do not inherit the scheduler's mode
    for (int64_t i = b0; i < b1; ++i) {
      auto& s = *seqs[static_cast<size_t>(i)];
      const bool penalized = s.sampling.penalized();
      auto row_V = host_BV[i];
      if (penalized || s.sampling.temperature != 0.0) {
        // A copy where penalties will change it (host_BV may alias logits_BV).
        row_V = row_V.to(at::kFloat, /*non_blocking=*/false, /*copy=*/penalized).contiguous();
      }
      if (penalized) {
        std::vector<int64_t> stop_ids = eos_ids;
        if (s.sampling.min_new_tokens > 0)
          stop_ids.insert(stop_ids.end(), s.sampling.stop_token_ids.begin(),
                          s.sampling.stop_token_ids.end());
        apply_penalties(row_V, s.sampling, s.generated_counts,
                        static_cast<int64_t>(s.out.output_ids.size()), stop_ids);
        penalized_V[static_cast<size_t>(i)] = row_V;
      }
      if (s.sampling.seed) {
        auto rng = positional_rng(*s.sampling.seed, s.tokens.size());
        chosen[static_cast<size_t>(i)] = sample_token(row_V, s.sampling, rng);
      } else {
        chosen[static_cast<size_t>(i)] = sample_token(row_V, s.sampling, s.rng);
      }
    }
  });
  return chosen;
}

// Log-probs: the trainer's arithmetic on the same logits, one call per temperature.
std::vector<float> Engine::Impl::step_logprobs(const std::vector<std::shared_ptr<Sequence>>& seqs,
                                               const at::Tensor& logits_BV,
                                               const std::vector<int64_t>& chosen) {
  std::vector<float> logprobs(seqs.size());
  std::vector<bool> done_row(seqs.size(), false);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (done_row[i]) continue;
    double t = seqs[i]->sampling.temperature;
    std::vector<int64_t> rows;
    for (size_t j = i; j < seqs.size(); ++j) {
      if (!done_row[j] && seqs[j]->sampling.temperature == t) {
        rows.push_back(static_cast<int64_t>(j));
        done_row[j] = true;
      }
    }
    std::vector<int64_t> targets;
    for (auto r : rows) targets.push_back(chosen[r]);
    // Every row at one temperature (the usual batch): the logits as they are, not a copy.
    const bool all_rows = rows.size() == seqs.size();
    auto logits_RV =
        all_rows ? logits_BV
                 : logits_BV.index_select(0, at::tensor(rows, at::kLong).to(logits_BV.device()));
    auto lp =
        models::logprobs_from_logits(
            logits_RV, at::tensor(targets, at::kLong).to(logits_BV.device()), t == 0.0 ? 1.0 : t)
            .to(at::kCPU);
    for (size_t k = 0; k < rows.size(); ++k) logprobs[rows[k]] = lp[k].item<float>();
  }
  return logprobs;
}

void Engine::Impl::recompute_isolating_failures(
    const std::vector<std::shared_ptr<Sequence>>& seqs) {
  try {
    recompute_logprobs(seqs);
  } catch (const std::exception& e) {
    if (seqs.size() > 1) {
      for (const auto& s : seqs) recompute_isolating_failures({s});
      return;
    }
    // Finished already: it is delivered in this step, ended with the error.
    LOG_ERROR("engine: request ", seqs[0]->id, " failed and is ended alone: ", e.what());
    seqs[0]->error = e.what();
    seqs[0]->out.finish_reason = FinishReason::kAbort;
  }
}

// The trainer's computation over the finished sequences, packed as documents: forward_hidden,
// then token_logprobs of each output token with the request's temperature. A request that
// returns its routed experts (rollout routing replay) is recomputed with exactly those experts,
// as the trainer will replay them, so that its reported log-probs are the trainer's under R3.
void Engine::Impl::recompute_logprobs(const std::vector<std::shared_ptr<Sequence>>& seqs) {
  std::vector<double> temperatures;
  for (const auto& s : seqs) {
    double t = s->sampling.temperature == 0.0 ? 1.0 : s->sampling.temperature;
    if (std::find(temperatures.begin(), temperatures.end(), t) == temperatures.end()) {
      temperatures.push_back(t);
    }
  }
  const auto& w = model->weights();
  const auto& head = model->head_weight(w[models::CausalLM::kEmbedUnit], w[model->final_unit()]);
  const bool share =
      options.pack_shared_prompts && model->supports_shared_prefixes() && !cache->records_routing();
  for (double t : temperatures) {
    std::vector<Sequence*> group;
    std::vector<const std::vector<int64_t>*> tokens;
    std::vector<int64_t> prompts, rows, targets;
    for (const auto& s : seqs) {
      double st = s->sampling.temperature == 0.0 ? 1.0 : s->sampling.temperature;
      if (st != t) continue;
      group.push_back(s.get());
      tokens.push_back(&s->tokens);
      prompts.push_back(s->prompt_len);
    }
    auto packed = models::pack_sequences(tokens, prompts, share);
    for (size_t g = 0; g < group.size(); ++g) {
      const auto& s = *group[g];
      for (int64_t i = s.prompt_len; i < static_cast<int64_t>(s.tokens.size()); ++i) {
        rows.push_back(packed.row(g, i - 1));
        targets.push_back(s.tokens[static_cast<size_t>(i)]);
      }
    }
    auto batch = packed.batch.to(device);
    auto hidden_PD = model->forward_hidden(batch, recompute_options(group));
    models::LogProbOptions lo;
    lo.temperature = t;
    lo.with_entropy = false;
    auto lp =
        models::token_logprobs(hidden_PD.index_select(0, at::tensor(rows, at::kLong).to(device)),
                               head, at::tensor(targets, at::kLong).to(device), lo)
            .logprobs_T.to(at::kCPU)
            .contiguous();
    const float* values = lp.data_ptr<float>();
    for (auto* s : group) {
      std::copy(values, values + s->out.output_logprobs.size(), s->out.output_logprobs.begin());
      values += s->out.output_logprobs.size();
    }
  }
}

models::ForwardOptions Engine::Impl::recompute_options(const std::vector<Sequence*>& group) const {
  models::ForwardOptions options = forward;
  if (!cache->records_routing()) return options;
  bool any = false;
  std::vector<at::Tensor> parts;
  for (const auto* s : group) {
    if (s->return_routed_experts) {
      parts.push_back(routing_rows(*s));
      any = true;
    } else {  // free routing, as a trainer without replay computes it
      const auto& pool = cache->routing();
      parts.push_back(at::full({static_cast<int64_t>(s->tokens.size()), pool.size(1), pool.size(2)},
                               -1, pool.options()));
    }
  }
  if (!any) return options;
  options.moe = std::make_shared<models::MoeTrace>();
  options.moe->replay_PLK = at::cat(parts, 0);
  return options;
}

void Engine::Impl::append_token(Sequence& s, int64_t token, float logprob) {
  s.tokens.push_back(token);
  s.out.output_ids.push_back(token);
  s.out.output_logprobs.push_back(logprob);
  if (s.sampling.top_logprobs_num > 0)
    s.out.output_top_logprobs.push_back(std::move(s.pending_top));
  s.pending_top.clear();
  if (s.sampling.penalized()) ++s.generated_counts[token];
  s.out.weight_version = weight_version;
  if (s.on_tokens) s.on_tokens(s.id, {token}, {logprob});
  const auto& p = s.sampling;
  std::optional<FinishReason> reason;
  if ((!p.ignore_eos && std::binary_search(eos_ids.begin(), eos_ids.end(), token)) ||
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
          p.stop_token_ids.end()) {
    s.out.matched_stop_token = token;
    reason = FinishReason::kStop;
  }
  if (!reason && s.decoder) {
    size_t before = s.text.size();
    s.text += s.decoder->push(token);
    size_t from = before >= s.max_stop_len ? before - s.max_stop_len + 1 : 0;
    for (const auto& stop : p.stop) {
      if (s.text.find(stop, from) != std::string::npos) {
        s.out.matched_stop_string = stop;
        reason = FinishReason::kStop;
        break;
      }
    }
  }
  const int64_t generated = static_cast<int64_t>(s.out.output_ids.size());
  if (!reason &&
      (generated >= p.max_new_tokens || static_cast<int64_t>(s.tokens.size()) >= context_length)) {
    reason = FinishReason::kLength;
  }
  if (reason) {
    s.out.finish_reason = *reason;
    s.finished = true;
  }
}

at::Tensor Engine::Impl::routing_rows(const Sequence& s) const {
  const auto& pool = cache->routing();
  const auto rows = static_cast<int64_t>(s.tokens.size());
  const int64_t ran = std::min({s.num_cached, rows, s.slots.defined() ? s.slots.numel() : 0});
  auto ids_TLK = at::full({rows, pool.size(1), pool.size(2)}, -1, pool.options());
  if (ran > 0) {
    ids_TLK.narrow(0, 0, ran).copy_(
        pool.index_select(0, s.slots.narrow(0, 0, ran).to(pool.device())));
  }
  return ids_TLK;
}

void Engine::Impl::collect_routing(Sequence& s) {
  if (!s.return_routed_experts || !cache->records_routing()) return;
  auto ids_TLK = routing_rows(s).to(at::kCPU).contiguous();
  RoutedExperts& r = s.out.routed_experts;
  r.num_layers = ids_TLK.size(1);
  r.top_k = ids_TLK.size(2);
  r.ids.assign(ids_TLK.data_ptr<int32_t>(), ids_TLK.data_ptr<int32_t>() + ids_TLK.numel());
}

void Engine::Impl::finish(const std::shared_ptr<Sequence>& s, FinishReason reason) {
  s->out.finish_reason = reason;
  s->out.weight_version = weight_version;
}

}  // namespace furlong::engine
