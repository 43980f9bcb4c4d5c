// The JSON side of the OpenAI-compatible endpoints, /v1/completions and /v1/chat/completions:
// strict parsing into engine requests and the response bodies (whole, or streamed chunks) in the
// shapes the `openai` Python package parses. No sockets here.
//
// Fields OpenAI defines are accepted at every value the engine honours (frequency_penalty and
// presence_penalty at any value in [-2, 2], response_format text, an empty logit_bias, user,
// ...); a value it cannot honour (json_schema, tools, image parts, ...) is a 400 naming the
// field and the value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/server/api.h"

namespace furlong::engine::server {

struct OpenAiCall {
  bool chat = false;
  // prompt-major: choice index i * n + j is prompt i's sample j (OpenAI's order).
  std::vector<GenerateItem> items;
  std::vector<std::string> prompt_texts;  // each prompt's text (echo)
  int64_t n = 1;
  bool logprobs = false;     // completions: logprobs given; chat: logprobs true
  int64_t top_logprobs = 0;  // alternatives per token
  bool echo = false;         // completions: the prompt is prepended (and scored with logprobs)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Filled by the server for echo + logprobs: each prompt's own log-probs (from position 1).
  std::vector<Engine::PromptLogprobs> prompt_logprobs;
};

OpenAiCall parse_completion(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits);
// The body is parsed with key order kept (chat templates see messages as given). `chat` may be
// null (no chat template): an ApiError then says so.
OpenAiCall parse_chat_completion(const OrderedJson& body, const tokenizer::Tokenizer& tokenizer,
                                 const tokenizer::ChatFormatter* chat, const ModelLimits& limits);

// Names shared by a response and all of its chunks.
struct OpenAiIds {
  std::string id;  // cmpl-... / chatcmpl-...
  std::string model;
  int64_t created = 0;
};

// The whole response (stream false): one choice per item.
Json openai_response(const OpenAiCall& call, const std::vector<GenerateOutput>& outputs,
                     const tokenizer::Tokenizer& tokenizer, const OpenAiIds& ids);

// One streamed chunk for choice `index`: new text, the new tokens' log-probs (when asked),
// and the finish reason on the last one ("" before). `first` adds chat's role delta.
struct ChunkPart {
  size_t index = 0;
  std::string text;
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  std::string finish_reason;
  bool first = false;
};
Json openai_chunk(const OpenAiCall& call, const ChunkPart& part,
                  const tokenizer::Tokenizer& tokenizer, const OpenAiIds& ids);
// The final usage chunk (stream_options.include_usage): no choices, the usage totals.
Json openai_usage_chunk(const OpenAiCall& call, const std::vector<GenerateOutput>& outputs,
                        const OpenAiIds& ids);

// A chat choice's "logprobs" object ({"content": [{token, logprob, bytes, top_logprobs: []}]})
// over generated tokens and their log-probs.
Json chat_token_logprobs(const std::vector<int64_t>& ids, const std::vector<float>& logprobs,
                         const tokenizer::Tokenizer& tokenizer);

}  // namespace furlong::engine::server
