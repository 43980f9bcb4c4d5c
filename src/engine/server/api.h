// The JSON side of the engine's HTTP API: strict parsing of request bodies (SGLang's /generate
// and OpenAI's /v1/completions and /v1/chat/completions) into engine requests, and the
// response bodies built from engine outputs. No sockets here, so all of it is unit-testable.
//
// Every parse error is an ApiError carrying the HTTP status and an OpenAI-style error type; the
// server answers {"error": {"message": ..., "type": ..., "code": status}}.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
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
  std::string rid;  // client-chosen or generated; /abort_request names it
};

// A /generate call: one prompt, or a batch (input given as a list of prompts).
struct GenerateCall {
  std::vector<GenerateItem> items;
  bool batched = false;
  bool return_logprob = false;
  bool return_text_in_logprobs = false;
  bool stream = false;  // server-sent events (one prompt only)
};

// Strict parse of SGLang's GenerateReqInput subset: text | input_ids (one or a batch),
// sampling_params (an object, or a list with one per prompt), return_logprob, rid, stream
// (one prompt only), logprob_start_len (-1 only), top_logprobs_num (0 only),
// return_text_in_logprobs, and miles' return_routed_experts / return_indexer_topk (false only).
// `next_rid` names prompts that come without a rid.
GenerateCall parse_generate(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits,
                            const std::function<std::string()>& next_rid);

// The text shown for an output, trimmed per TextOptions.
std::string output_text(const GenerateItem& item, const GenerateOutput& output,
                        const tokenizer::Tokenizer& tokenizer);
// SGLang's response object: {text, output_ids, meta_info{id, finish_reason{type, matched|length},
// prompt_tokens, completion_tokens, cached_tokens, weight_version, e2e_latency,
// output_token_logprobs: [[logprob, id, text|null], ...] when asked}}.
Json generate_response(const GenerateCall& call, const GenerateItem& item,
                       const GenerateOutput& output, const tokenizer::Tokenizer& tokenizer,
                       double latency_s);

// OpenAI-compatible completions (one choice; n must be 1, stream false).
struct OpenAiCall {
  GenerateItem item;
  bool chat = false;
  bool logprobs = false;
};
OpenAiCall parse_completion(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits);
// The body is parsed with key order kept (chat templates see messages as given). `chat` may be
// null (no chat template): an ApiError then says so.
OpenAiCall parse_chat_completion(const OrderedJson& body, const tokenizer::Tokenizer& tokenizer,
                                 const tokenizer::ChatFormatter* chat, const ModelLimits& limits);
Json openai_response(const OpenAiCall& call, const GenerateOutput& output,
                     const tokenizer::Tokenizer& tokenizer, const std::string& model_name,
                     int64_t created_unix_s);

}  // namespace furlong::engine::server
