// The JSON side of the engine's HTTP API: strict parsing of request bodies (SGLang's /generate
// and OpenAI's /v1/completions and /v1/chat/completions) into engine requests, and the
// response bodies built from engine outputs. No sockets here, so all of it is unit-testable.
//
// Every parse error is an ApiError carrying the HTTP status and an OpenAI-style error type; the
// server answers {"error": {"message": ..., "type": ..., "code": status}}.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json_util.h"
#include "engine/engine.h"

namespace furlong::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace furlong::tokenizer

namespace furlong::engine::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message)
      : std::runtime_error(message), status_(status), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string type_;
};

// 400 invalid_request_error.
[[noreturn]] void bad_request(const std::string& message);
Json error_body(const std::string& message, const std::string& type, int status);
// Constant-time comparison of a given secret (an API key) with the expected one, so the key
// cannot be guessed byte by byte from response times.
bool same_secret(const std::string& given, const std::string& expected);

// Parses a request body that must be a JSON object.
Json parse_body(std::string_view body, const std::string& endpoint);
// Rejects keys of `body` outside `known`, naming the endpoint and the closest known key.
void check_known_fields(const Json& body, std::initializer_list<std::string_view> known,
                        const std::string& where);
void check_known_fields(const OrderedJson& body, std::initializer_list<std::string_view> known,
                        const std::string& where);

struct ModelLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  int64_t max_samples = 0;  // prompts x n one request may queue (0: no bound)
};

// How the output text is rendered (SGLang sampling_params keys the engine does not need).
struct TextOptions {
  bool skip_special_tokens = true;
  bool no_stop_trim = false;  // keep a matched stop string / stop token in the text
};

// One prompt of a request.
struct GenerateItem {
  GenerateRequest request;
  TextOptions text;
  std::string rid;          // client-chosen or generated; /abort_request names it
  size_t prompt_index = 0;  // which prompt of the call (items are prompt-major with n > 1)
  size_t sample_index = 0;  // which of the prompt's n samples
};

// A /generate call: one prompt, or a batch (input given as a list of prompts).
struct GenerateCall {
  std::vector<GenerateItem> items;
  bool batched = false;
  bool return_logprob = false;
  bool return_text_in_logprobs = false;
  bool stream = false;  // server-sent events (one prompt only)
  int64_t n = 1;        // samples per prompt (sampling_params.n)
  // SGLang's logprob_start_len: -1 (default) returns no prompt log-probs; s >= 0 returns
  // input_token_logprobs for prompt positions s.. (position 0's log-prob is null).
  int64_t logprob_start_len = -1;
  int64_t top_logprobs_num = 0;  // alternatives per position (output and input)
  // SGLang's return_routed_experts: meta_info.routed_experts of every output (MoE engines
  // started with --enable-return-routed-experts; the engine rejects the request otherwise).
  bool return_routed_experts = false;
  // Filled by the server when logprob_start_len >= 0: one per prompt.
  std::vector<Engine::PromptLogprobs> prompt_logprobs;
  std::vector<size_t> prompt_lengths;  // tokens of each prompt
  // The first prompt position with a computed log-prob (>= 1) and whether position 0 (null)
  // is listed, for a prompt of `size` tokens.
  int64_t prompt_logprob_from(int64_t size) const {
    return std::min(std::max<int64_t>(logprob_start_len, 1), size);
  }
};

// Strict parse of SGLang's GenerateReqInput subset: text | input_ids (one or a batch),
// sampling_params (an object, or a list with one per prompt; n samples each, prompt-major),
// return_logprob, rid, stream (one prompt, n = 1), logprob_start_len, top_logprobs_num,
// return_text_in_logprobs, return_routed_experts, and miles' return_indexer_topk (false only).
// `next_rid` names prompts that come without a rid.
GenerateCall parse_generate(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits,
                            const std::function<std::string()>& next_rid);

// The text shown for an output, trimmed per TextOptions.
std::string output_text(const GenerateItem& item, const GenerateOutput& output,
                        const tokenizer::Tokenizer& tokenizer);
// SGLang's response object: {text, output_ids, meta_info{id, finish_reason{type, matched|length},
// prompt_tokens, completion_tokens, cached_tokens, weight_version, e2e_latency,
// output_token_logprobs: [[logprob, id, text|null], ...], output_top_logprobs,
// input_token_logprobs, input_top_logprobs, routed_experts (base64 of int32
// [prompt + output - 1, L, K], engine/routed_experts_codec.h) when asked}}.
Json generate_response(const GenerateCall& call, const GenerateItem& item,
                       const GenerateOutput& output, const tokenizer::Tokenizer& tokenizer,
                       double latency_s);

// Helpers shared with the OpenAI parser (openai_api.cpp).
// Runs `fn`, turning a furlong::Error (a bad field) into a 400.
template <typename Fn>
auto as_bad_request(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    bad_request(e.what());
  }
}
// SGLang sampling_params -> engine sampling + text options (strict; errors are 400s).
std::pair<SamplingParams, TextOptions> parse_sampling(const Json& json, const std::string& where);
// The sampling of sample j of an n-sample request: with a seed, sample j draws with seed + j
// (one seed for all would make n copies).
SamplingParams sample_sampling(const SamplingParams& params, int64_t j);
// prompts x n within limits.max_samples (400 naming --max-samples-per-request otherwise), checked
// before the samples are expanded into items.
void check_sample_count(size_t prompts, int64_t n, const ModelLimits& limits,
                        const std::string& where);
// Non-empty, ids in the vocabulary, prompt + max_new_tokens within the context (400 otherwise).
void check_prompt(const std::vector<int64_t>& ids, int64_t max_new_tokens,
                  const ModelLimits& limits, const std::string& where);
// Every stop token id in the vocabulary (400 naming stop_token_ids[i] otherwise).
void check_stop_token_ids(const std::vector<int64_t>& ids, const ModelLimits& limits,
                          const std::string& where);
// A token's text for log-prob listings (may be a partial UTF-8 sequence, replaced).
std::string token_text(const tokenizer::Tokenizer& tokenizer, int64_t id);

// Weight versions on the wire have SGLang's type, a string (default "default"). furlong counts
// versions as integers from 0: version v is the string of its digits, and 0 is "default".
Json weight_version_json(int64_t version);
// An integer, a string of digits or "default" (0); >= 0. Other strings are a 400 naming `field`.
int64_t parse_weight_version(const Json& value, const std::string& field, const std::string& where);

}  // namespace furlong::engine::server
