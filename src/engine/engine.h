// The rollout engine: batched generation over the same model code the trainer runs, with a
// paged KV cache, continuous batching, sampling with per-token log-probs, in-place weight
// updates (from tensors in process, or broadcast over a process group) and memory release.
//
// Threading: an Engine owns one scheduler thread that runs all model work. Every public method
// is thread-safe; submit() may be called from many threads (the HTTP server's handlers) and
// the scheduler batches whatever is waiting. Results come back through callbacks that run on
// the scheduler thread (keep them short) or through the blocking generate().
//
// Log-probs: output_logprobs[i] = log softmax(logits / T)[output_ids[i]] in fp32, where T is
// the request's temperature (T = 0, greedy, uses T = 1). Top-k / top-p / min-p filtering
// changes which token is drawn, never the reported log-prob. This is the quantity the trainer
// recomputes with --rollout-temperature T (miles' convention).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_util.h"
#include "core/routed_experts.h"

namespace furlong::tokenizer {
class Tokenizer;
}
namespace furlong::models {
class CausalLM;
}

namespace furlong::engine {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = -1;        // <= 0: off
  double min_p = 0.0;        // [0, 1)
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_token_ids;  // in addition to the tokenizer's eos ids
  std::vector<std::string> stop;        // stop strings (matched on the decoded text)
  bool ignore_eos = false;
  // Each draw depends on the seed and the drawn token's position only, whatever the batch, so
  // continuing prompt + the first k output tokens with the same seed reproduces the rest of the
  // output (SGLang's sampling_seed). The logits are not batch-invariant in every kernel (the
  // GEMM path depends on the rows in the step: kernels/inference_linear.h), so a request run in
  // another batch can differ where a last-bit logit change moves a draw across a token boundary;
  // the same requests queued together (submit_all, generate) give the same output in every run.
  std::optional<uint64_t> seed;
  // Text-output options (SGLang's): they change the decoded text, never the ids.
  bool skip_special_tokens = true;  // drop special tokens from decoded text
  bool no_stop_trim = false;        // keep a matched stop string at the end of the text
  // SGLang's penalties, applied to the logits before temperature and sampling (all off by
  // default; off leaves tokens and log-probs bit-identical). Counts are over generated tokens.
  double frequency_penalty = 0.0;   // [-2, 2]: logit -= frequency_penalty * count(token)
  double presence_penalty = 0.0;    // [-2, 2]: logit -= presence_penalty * (count(token) > 0)
  double repetition_penalty = 1.0;  // (0, 2]: seen logit < 0 ? logit * p : logit / p
  int64_t min_new_tokens = 0;       // [0, max_new_tokens]: eos / stop ids masked until reached
  int64_t top_logprobs_num = 0;     // >= 0: top alternatives reported per output token
  bool penalized() const {
    return frequency_penalty != 0.0 || presence_penalty != 0.0 || repetition_penalty != 1.0 ||
           min_new_tokens > 0;
  }
};

// The most likely tokens of one position, best first: (token id, log-prob).
using TopLogprobs = std::vector<std::pair<int64_t, float>>;

// Strict parse of SGLang-style sampling_params JSON (temperature, top_p, top_k, min_p,
// max_new_tokens, stop, stop_token_ids, ignore_eos, seed (alias sampling_seed),
// skip_special_tokens, no_stop_trim). Unknown keys, wrong types and out-of-range values raise
// furlong::Error naming `where` and the key.
SamplingParams parse_sampling_params(const Json& json, const std::string& where);
// The inverse, the one codec of SamplingParams (engine servers, colocated engines): every field
// parse_sampling_params reads (the seed as sampling_seed), so that parsing it back gives the same
// params. Penalties and the text switches appear only when not at their defaults, so a default
// request's payload is SGLang's usual one. top_logprobs_num is a request-level field in SGLang's
// API and is not part of it.
Json sampling_params_json(const SamplingParams& params);

enum class FinishReason { kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason reason);  // "stop" | "length" | "abort"

struct GenerateRequest {
  std::vector<int64_t> input_ids;
  SamplingParams sampling;
  // Rollout routing replay (SGLang's return_routed_experts): the output carries the expert ids
  // every MoE layer chose for every prompt and output token (GenerateOutput::routed_experts).
  // Needs an MoE model and an engine started with EngineOptions::record_routed_experts;
  // submit() raises furlong::Error otherwise.
  bool return_routed_experts = false;
};

struct GenerateOutput {
  std::vector<int64_t> output_ids;     // generated tokens (a matched stop token included)
  std::vector<float> output_logprobs;  // one per output id (see above)
  // With SamplingParams::top_logprobs_num > 0: one entry per output id, from the same
  // distribution as output_logprobs (empty otherwise).
  std::vector<TopLogprobs> output_top_logprobs;
  FinishReason finish_reason = FinishReason::kLength;
  std::optional<int64_t> matched_stop_token;
  std::string matched_stop_string;  // when a stop string ended generation
  int64_t prompt_tokens = 0;
  int64_t weight_version = 0;  // the weights every token was generated with
  // Why the engine ended this request when a step failed for it (finish reason abort); empty
  // otherwise. A failure is charged to the request it belongs to: the others go on.
  std::string error;
  // With GenerateRequest::return_routed_experts: [prompt + output tokens, L, K] expert ids
  // (core/routed_experts.h). Row t is the routing of token t as the engine ran it (for prompt
  // tokens shared with another request: when their KV slots were filled); -1 in dense layers'
  // columns and in rows of tokens that never ran through the model (always the last token,
  // and the unrun tail of an aborted request). Empty otherwise.
  RoutedExperts routed_experts;
};

using RequestId = int64_t;

// --prepack-weights: whether bf16 weights are also kept in oneDNN's GEMM layout (below).
enum class PrepackWeights { kAuto, kOn, kOff };
const std::vector<std::string>& prepack_weights_choices();  // "auto", "on", "off"
PrepackWeights parse_prepack_weights(const std::string& name);
const std::string& prepack_weights_name(PrepackWeights mode);

struct EngineOptions {
  // "auto": the checkpoint's torch_dtype where the device computes it natively, else float32
  // (core/dtype.h, resolve_auto_dtype); "" = the checkpoint's torch_dtype as it is.
  std::string dtype = "auto";
  std::string device;                        // "" = cuda if available, else cpu
  std::string attn_implementation = "sdpa";  // the trainer's --attn-implementation names
  bool fused_kernels = true;
  // bf16 weights of 1M elements and more also kept in oneDNN's GEMM layout, for the GEMMs of 8
  // rows and more (kernels/packed_linear.h): "auto" = on a CPU whose oneDNN runs bf16 on AMX
  // tiles (there oneDNN no longer re-lays the weight out per call), while the weights and their
  // copies take at most half of what mem_fraction_static gives weights and cache; "on" =
  // wherever oneDNN is present;
  // "off". Costs a second copy of those weights' bytes (counted before the KV cache is sized)
  // and a repack of every weight an update writes.
  PrepackWeights prepack_weights = PrepackWeights::kAuto;
  int64_t kv_block_size = 16;  // tokens per KV-cache block
  // KV-cache capacity in tokens over all running sequences; 0 = sized from the memory
  // (engine/kv_budget.h). An explicit value must fit in the memory free after the weights.
  int64_t max_total_tokens = 0;
  // SGLang's --mem-fraction-static: the share of the device's memory the weights and the KV
  // cache may take together; 0 = the device default (0.7 on CPU, 0.85 on CUDA).
  double mem_fraction_static = 0;
  // Test only: size as if the device had this many bytes, all free before the weights (> 0).
  int64_t test_memory_bytes = 0;
  int64_t max_running_requests = 256;
  int64_t max_prefill_tokens = 8192;  // prompt tokens prefilled per scheduler step
  // Prompts longer than this are prefilled in chunks of this many tokens, one chunk per step,
  // beside the decodes (SGLang's --chunked-prefill-size); 0 or less = never chunk.
  int64_t chunked_prefill_size = 8192;
  // Requests admitted with the same prompt ids share its KV blocks and one prefill (the n
  // samples of a GRPO prompt); tokens equal unshared ones, log-probs to rounding (exact_logprobs:
  // bit for bit). See engine_schedule.cpp.
  bool prefix_sharing = true;
  int64_t context_length = 0;  // 0 = the model's max_position_embeddings
  int64_t num_threads = 0;     // 0 = libtorch's default
  // Report log-probs bit-identical to the trainer's recomputation: when a request finishes, its
  // prompt + output is run once more through the trainer's full-sequence forward
  // (CausalLM::forward_hidden + token_logprobs) and those values replace the decode-time ones
  // (tokens are still drawn from the decode-time logits; streamed TokenCallback values stay the
  // decode-time ones). Costs one prefill of prompt + output per request (on CPU about as much
  // again as decoding: the lm_head runs over every output token a second time). Aborted
  // requests keep their decode-time log-probs. Off: decode-time values (fp32 within ~2e-6 of
  // the trainer's, bf16 within ~0.02; see tests/engine/engine_generate_test.cpp).
  bool exact_logprobs = false;
  // The exact log-prob pass holds a prompt once for all the requests finishing together that
  // share it (models::pack_sequences, the trainer's --pack-shared-prompts packing). Applies
  // where the model supports it and routing is not recorded (R3 replays per-request rows).
  bool pack_shared_prompts = true;
  // SGLang's --decode-log-interval: every this many decode steps the engine logs one info line
  // (running and queued requests, tokens/s since the last line, KV-cache use); 0 = never.
  int64_t decode_log_interval = 40;
  // SGLang's --enable-return-routed-experts (rollout routing replay): keeps, beside the KV
  // cache, the top-k expert ids of every MoE layer for every KV slot (int32 [slots, L, K],
  // L * K * 4 bytes per token, counted in the KV-cache sizing), filled by every forward step,
  // so that requests can ask for GenerateRequest::return_routed_experts. MoE models only
  // (Engine::load raises on a dense model).
  bool record_routed_experts = false;
};

// One tensor of a weight update over a process group (what the trainer broadcasts, in order).
struct WeightMeta {
  std::string name;   // HF name
  std::string dtype;  // "bfloat16" | "float16" | "float32"
  std::vector<int64_t> shape;
};

struct WeightGroupSpec {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int rank_offset = 1;  // this engine's rank in the group (the trainer source is rank 0)
  int world_size = 2;
  std::string group_name = "weight_sync";
  std::string backend = "auto";  // gloo | nccl | auto
  // How long to wait for every member to join, and for each broadcast to complete.
  double timeout_seconds = 600.0;
};

class Engine {
 public:
  // Loads a HF model directory (config.json, safetensors, tokenizer files).
  static std::unique_ptr<Engine> load(const std::string& hf_dir, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const models::CausalLM& model() const;
  const tokenizer::Tokenizer& tokenizer() const;
  const EngineOptions& options() const;
  int64_t context_length() const;
  Json model_info() const;  // model_path, architecture, dtype, weight_version, context_length...

  // ---- generation ----
  using DoneCallback = std::function<void(RequestId, GenerateOutput)>;
  // Called with each batch of newly generated tokens (streaming); may be null.
  using TokenCallback = std::function<void(RequestId, const std::vector<int64_t>& new_ids,
                                           const std::vector<float>& new_logprobs)>;
  // Validates (prompt non-empty, ids in vocab, prompt + max_new_tokens <= context_length;
  // furlong::Error otherwise) and queues the request.
  RequestId submit(GenerateRequest request, DoneCallback on_done, TokenCallback on_tokens = {});
  struct Submission {
    GenerateRequest request;
    DoneCallback on_done;
    TokenCallback on_tokens;  // may be null
  };
  // Validates every request (furlong::Error naming the first bad one; then none is queued) and
  // queues them all at once, in order: the scheduler's next step sees the whole batch. So the
  // steps it forms, and with them every logit's rounding, depend only on the requests, not on
  // how fast a submitting loop ran against the scheduler thread. Returns the ids in order.
  std::vector<RequestId> submit_all(std::vector<Submission> batch);
  // Ends a queued or running request now; its callback gets the partial output with
  // finish_reason abort. False if the id is unknown or already finished.
  bool abort(RequestId id);
  void abort_all();
  // Blocking convenience: submits all, waits, returns outputs in input order.
  std::vector<GenerateOutput> generate(
      std::vector<GenerateRequest> requests,
      const std::function<void(int64_t done, int64_t total)>& progress = {});

  // pause: the scheduler stops taking steps (running requests keep their state) until
  // continue_generation(). flush_cache: drops cached prefixes; fails if requests are running.
  void pause_generation();
  void continue_generation();
  void flush_cache();
  int64_t num_running() const;  // queued + running

  // ---- weight updates (generation paused and KV cache flushed around them) ----
  // Copies full tensors (HF names, any subset of the model's parameters, shapes must match;
  // cast to the engine dtype) into the model. Sets weight_version to `version` when >= 0.
  void update_weights_from_tensors(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                   int64_t version = -1);
  // Joins a process group in which rank 0 is the trainer; then each call receives, by
  // broadcast from rank 0, the listed tensors in order (size-bounded buckets chosen by the
  // sender; the receiver takes one tensor per broadcast).
  void init_weights_update_group(const WeightGroupSpec& spec);
  void update_weights_from_distributed(const std::vector<WeightMeta>& metas, int64_t version);
  void destroy_weights_update_group();
  // Loads the safetensors weights of a HF directory (same architecture and shapes) into the
  // model. Everything is read and checked before any weight changes: a bad path, another
  // architecture or a shape mismatch raises furlong::Error and leaves the served weights as
  // they were. Sets weight_version to `version` when >= 0.
  void update_weights_from_disk(const std::string& hf_dir, int64_t version = -1);
  // Copies into the model only those of `named` whose weights are released and not refilled
  // since (the host copy a server kept across release/resume); the others are left alone.
  void refill_released_weights(const std::vector<std::pair<std::string, at::Tensor>>& named);
  int64_t weight_version() const;
  // Log-probs of a prompt's own tokens under the current weights, at temperature T (0 = 1),
  // as output_logprobs are: logprobs[i] is token i's given tokens 0..i-1, for i in
  // [start, size) with start >= 1; top[i - start] holds the top_n alternatives when top_n > 0.
  // Runs one full-sequence forward with the scheduler held between steps.
  struct PromptLogprobs {
    std::vector<float> logprobs;
    std::vector<TopLogprobs> top;
  };
  PromptLogprobs prompt_logprobs(const std::vector<int64_t>& input_ids, double temperature,
                                 int64_t start, int64_t top_n) const;
  // Digest of every parameter's bytes in the engine dtype, in HF-name order (core/digest.h),
  // equal to what the trainer computes over the weights it sent.
  std::string weights_digest() const;

  // ---- memory hand-off (colocated) ----
  // Drops the KV cache (and the weights when include_weights) after aborting nothing: fails
  // if requests are running. resume_memory rebuilds the cache; dropped weights must then be
  // refilled by a weight update before generating (generation fails clearly otherwise).
  void release_memory(bool include_weights);
  void resume_memory();
  bool memory_released() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace furlong::engine
