// OpenAI-compatible request parsing and response bodies (see openai_api.h).
#include "engine/server/openai_api.h"

#include <string>
#include <utility>
#include <vector>

#include "core/strings.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server {
namespace {

constexpr int64_t kMaxChoices = 128;
constexpr int64_t kMaxTopLogprobs = 20;  // OpenAI's bound

template <typename J>
Json plain(const J& value, const std::string& where) {
  return parse_json(value.dump(), where);
}

// A top-log-probs count (completions' `logprobs`, chat's `top_logprobs`): [0, 20], as OpenAI.
int64_t top_logprobs_count(const Json& value, const char* field, const std::string& where) {
  auto count = as_bad_request([&] { return json_as<int64_t>(value, field, where); });
  if (count < 0 || count > kMaxTopLogprobs) {
    bad_request(where + ": '" + field + "' must be in [0, " + std::to_string(kMaxTopLogprobs) +
                "], got " + std::to_string(count));
  }
  return count;
}

// The field's value as plain JSON, or null when absent.
template <typename J>
Json field_of(const J& body, const char* field, const std::string& where) {
  auto it = body.find(field);
  return it == body.end() ? Json(nullptr) : plain(*it, where);
}

[[noreturn]] void not_served(const std::string& where, const std::string& field, const Json& value,
                             const std::string& why) {
  bad_request(where + ": '" + field + "' = " + json_excerpt(value) + " is not served (" + why +
              ")");
}

// Standard fields accepted only at the values the engine honours.
template <typename J>
void check_honoured(const J& body, const std::string& where) {
  Json v = field_of(body, "logit_bias", where);
  if (!v.is_null() && !(v.is_object() && v.empty()))
    not_served(where, "logit_bias", v, "no biases");
  v = field_of(body, "response_format", where);
  if (!v.is_null() && v != Json{{"type", "text"}}) {
    not_served(where, "response_format", v, "only {\"type\": \"text\"}: no constrained decoding");
  }
  v = field_of(body, "tools", where);
  if (!v.is_null() && !(v.is_array() && v.empty())) not_served(where, "tools", v, "no tool calls");
  v = field_of(body, "tool_choice", where);
  if (!v.is_null() && v != "none" && v != "auto") not_served(where, "tool_choice", v, "no tools");
  v = field_of(body, "functions", where);
  if (!v.is_null()) not_served(where, "functions", v, "no tool calls");
  v = field_of(body, "suffix", where);
  if (!v.is_null() && v != "") not_served(where, "suffix", v, "no insertion");
  v = field_of(body, "store", where);
  if (!v.is_null() && v != false) not_served(where, "store", v, "nothing is stored");
  v = field_of(body, "service_tier", where);
  if (!v.is_null() && v != "auto" && v != "default")
    not_served(where, "service_tier", v, "one tier");
  v = field_of(body, "modalities", where);
  if (!v.is_null() && v != Json::array({"text"})) not_served(where, "modalities", v, "text only");
  for (const char* field : {"reasoning_effort", "audio", "prediction", "web_search_options"}) {
    v = field_of(body, field, where);
    if (!v.is_null()) not_served(where, field, v, "not a feature of this engine");
  }
  v = field_of(body, "parallel_tool_calls", where);
  if (!v.is_null() && !v.is_boolean())
    bad_request(where + ": 'parallel_tool_calls' must be a bool");
  v = field_of(body, "metadata", where);
  if (!v.is_null() && !v.is_object()) bad_request(where + ": 'metadata' must be an object");
  v = field_of(body, "user", where);
  if (!v.is_null() && !v.is_string()) bad_request(where + ": 'user' must be a string");
}

// The SGLang sampling_params an OpenAI body stands for.
template <typename J>
Json openai_sampling(const J& body, const std::string& where, int64_t default_max_tokens) {
  Json sampling = Json::object();
  auto copy = [&](const char* from, const char* to) {
    Json v = field_of(body, from, where);
    if (!v.is_null()) sampling[to] = std::move(v);
  };
  for (const char* same : {"temperature", "top_p", "top_k", "min_p", "seed", "ignore_eos",
                           "stop_token_ids", "skip_special_tokens", "no_stop_trim",
                           "frequency_penalty", "presence_penalty", "repetition_penalty"}) {
    copy(same, same);
  }
  copy("min_tokens", "min_new_tokens");
  copy("max_tokens", "max_new_tokens");
  copy("max_completion_tokens", "max_new_tokens");
  if (!sampling.contains("max_new_tokens")) sampling["max_new_tokens"] = default_max_tokens;
  Json stop = field_of(body, "stop", where);
  if (stop.is_string()) stop = Json::array({stop});
  if (!stop.is_null()) {
    as_bad_request([&] { return json_as<std::vector<std::string>>(stop, "stop", where); });
    sampling["stop"] = std::move(stop);
  }
  return sampling;
}

// n, stream and stream_options, common to both endpoints.
template <typename J>
void parse_choices_and_stream(const J& body, const std::string& where, OpenAiCall& call) {
  Json n = field_of(body, "n", where);
  if (!n.is_null()) call.n = as_bad_request([&] { return json_as<int64_t>(n, "n", where); });
  if (call.n < 1 || call.n > kMaxChoices) {
    bad_request(where + ": 'n' must be in [1, " + std::to_string(kMaxChoices) + "], got " +
                std::to_string(call.n));
  }
  Json best_of = field_of(body, "best_of", where);
  if (!best_of.is_null() && best_of != call.n) {
    not_served(where, "best_of", best_of, "best_of must equal n: no server-side ranking");
  }
  Json stream = field_of(body, "stream", where);
  if (!stream.is_null())
    call.stream = as_bad_request([&] { return json_as<bool>(stream, "stream", where); });
  Json options = field_of(body, "stream_options", where);
  if (!options.is_null()) {
    if (!options.is_object()) bad_request(where + ": 'stream_options' must be an object");
    check_known_fields(options, {"include_usage", "continuous_usage_stats"},
                       where + " stream_options");
    call.include_usage =
        as_bad_request([&] { return json_get_or<bool>(options, "include_usage", false, where); });
  }
}

// Expands each prompt into n items (sample j of a seeded request draws with seed + j).
void add_items(OpenAiCall& call, std::vector<std::vector<int64_t>> prompts, const Json& sampling,
               const ModelLimits& limits, const std::string& where) {
  check_sample_count(prompts.size(), call.n, limits, where);
  auto [params, text] = parse_sampling(sampling, where);
  check_stop_token_ids(params.stop_token_ids, limits, where);
  params.top_logprobs_num = call.logprobs ? call.top_logprobs : 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    check_prompt(prompts[i], params.max_new_tokens, limits,
                 prompts.size() > 1 ? where + " prompt " + std::to_string(i) : where);
    for (int64_t j = 0; j < call.n; ++j) {
      GenerateItem item;
      item.request.input_ids = prompts[i];
      item.request.sampling = sample_sampling(params, j);
      item.text = text;
      item.prompt_index = i;
      item.sample_index = static_cast<size_t>(j);
      call.items.push_back(std::move(item));
    }
  }
}

// A completions prompt: a string, a list of strings, token ids, or a list of token-id lists.
std::vector<std::vector<int64_t>> completion_prompts(const Json& prompt,
                                                     const tokenizer::Tokenizer& tokenizer,
                                                     int64_t vocab_size, OpenAiCall& call,
                                                     const std::string& where) {
  auto from_text = [&](const Json& text) {
    call.prompt_texts.push_back(text.get<std::string>());
    return as_bad_request([&] { return tokenizer.encode(text.get<std::string>(), true); });
  };
  auto from_ids = [&](const Json& ids, const std::string& field) {
    auto v = as_bad_request([&] { return json_as<std::vector<int64_t>>(ids, field, where); });
    // Checked before decoding: the tokenizer's own error would not name the field.
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0 || v[i] >= vocab_size) {
        bad_request(where + ": '" + field + "' must hold token ids in [0, " +
                    std::to_string(vocab_size) + "), got " + std::to_string(v[i]) + " at index " +
                    std::to_string(i));
      }
    }
    call.prompt_texts.push_back(as_bad_request([&] { return tokenizer.decode(v, false); }));
    return v;
  };
  if (prompt.is_string()) return {from_text(prompt)};
  if (!prompt.is_array() || prompt.empty()) {
    bad_request(where +
                ": 'prompt' must be a string, a list of strings, token ids or a list of "
                "token-id lists");
  }
  if (prompt[0].is_number_integer()) return {from_ids(prompt, "prompt")};
  std::vector<std::vector<int64_t>> prompts;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string field = "prompt[" + std::to_string(i) + "]";
    if (prompt[i].is_string()) {
      prompts.push_back(from_text(prompt[i]));
    } else {
      prompts.push_back(from_ids(prompt[i], field));
    }
  }
  return prompts;
}

// Chat messages with list contents flattened to text (SGLang joins text parts with spaces);
// any other part type is a 400 naming it.
OrderedJson text_messages(const OrderedJson& messages, const std::string& where) {
  OrderedJson out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    auto& m = out[i];
    if (!m.is_object())
      bad_request(where + ": messages[" + std::to_string(i) + "] must be an object");
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const auto& part = (*content)[j];
      const std::string field =
          "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
        bad_request(where + ": " + field + " must be an object with a 'type'");
      }
      if (part["type"] != "text" || !part.contains("text") || !part["text"].is_string()) {
        not_served(where, field + ".type", plain(part["type"], where), "text parts only");
      }
      if (!text.empty()) text += " ";
      text += part["text"].get<std::string>();
    }
    *content = text;
  }
  return out;
}

std::vector<int> utf8_bytes(const std::string& s) {
  std::vector<int> bytes;
  for (unsigned char c : s) bytes.push_back(c);
  return bytes;
}

// Completions' logprobs object over (ids, logprobs, tops); a null logprob where absent.
struct TokenRows {
  std::vector<int64_t> ids;
  std::vector<Json> logprobs;
  std::vector<const TopLogprobs*> tops;  // null: no alternatives at that position
};

Json completion_logprobs(const TokenRows& rows, const tokenizer::Tokenizer& tokenizer,
                         bool with_top) {
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(),
       offsets = Json::array();
  size_t offset = 0;
  for (size_t i = 0; i < rows.ids.size(); ++i) {
    std::string text = token_text(tokenizer, rows.ids[i]);
    offsets.push_back(offset);
    offset += text.size();
    tokens.push_back(text);
    values.push_back(rows.logprobs[i]);
    if (!with_top || rows.tops[i] == nullptr) {
      tops.push_back(with_top ? Json(nullptr) : Json::object());
      continue;
    }
    Json alternatives = Json::object();
    for (const auto& [id, lp] : *rows.tops[i]) {
      auto key = token_text(tokenizer, id);
      if (!alternatives.contains(key)) alternatives[key] = lp;
    }
    tops.push_back(std::move(alternatives));
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", values},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

Json chat_logprobs(const TokenRows& rows, const tokenizer::Tokenizer& tokenizer) {
  Json content = Json::array();
  for (size_t i = 0; i < rows.ids.size(); ++i) {
    std::string text = token_text(tokenizer, rows.ids[i]);
    Json alternatives = Json::array();
    if (rows.tops[i] != nullptr) {
      for (const auto& [id, lp] : *rows.tops[i]) {
        auto alt = token_text(tokenizer, id);
        alternatives.push_back({{"token", alt}, {"logprob", lp}, {"bytes", utf8_bytes(alt)}});
      }
    }
    content.push_back({{"token", text},
                       {"logprob", rows.logprobs[i]},
                       {"bytes", utf8_bytes(text)},
                       {"top_logprobs", std::move(alternatives)}});
  }
  return Json{{"content", std::move(content)}, {"refusal", nullptr}};
}

// The output tokens of one choice, preceded (echo) by its prompt's tokens.
TokenRows choice_rows(const OpenAiCall& call, const GenerateItem& item,
                      const GenerateOutput& output) {
  TokenRows rows;
  if (call.echo && item.prompt_index < call.prompt_logprobs.size()) {
    const auto& prompt = item.request.input_ids;
    const auto& scored = call.prompt_logprobs[item.prompt_index];
    for (size_t p = 0; p < prompt.size(); ++p) {
      rows.ids.push_back(prompt[p]);
      rows.logprobs.push_back(p == 0 ? Json(nullptr) : Json(scored.logprobs.at(p - 1)));
      rows.tops.push_back(p == 0 || scored.top.empty() ? nullptr : &scored.top.at(p - 1));
    }
  }
  for (size_t i = 0; i < output.output_ids.size(); ++i) {
    rows.ids.push_back(output.output_ids[i]);
    rows.logprobs.push_back(output.output_logprobs.at(i));
    rows.tops.push_back(i < output.output_top_logprobs.size() ? &output.output_top_logprobs[i]
                                                              : nullptr);
  }
  return rows;
}

Json usage_of(const OpenAiCall& call, const std::vector<GenerateOutput>& outputs) {
  int64_t prompt = 0, completion = 0;
  for (size_t k = 0; k < call.items.size(); ++k) {
    if (call.items[k].sample_index == 0)
      prompt += static_cast<int64_t>(call.items[k].request.input_ids.size());
    if (k < outputs.size()) completion += static_cast<int64_t>(outputs[k].output_ids.size());
  }
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion}};
}

Json envelope(const OpenAiCall& call, const OpenAiIds& ids, const char* object) {
  return Json{{"id", ids.id},
              {"object", object},
              {"created", ids.created},
              {"model", ids.model},
              {"system_fingerprint", nullptr}};
}

}  // namespace

OpenAiCall parse_completion(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits) {
  const std::string where = "/v1/completions";
  check_known_fields(body,
                     {"model",
                      "prompt",
                      "max_tokens",
                      "temperature",
                      "top_p",
                      "top_k",
                      "min_p",
                      "stop",
                      "stop_token_ids",
                      "seed",
                      "n",
                      "best_of",
                      "stream",
                      "stream_options",
                      "logprobs",
                      "echo",
                      "user",
                      "suffix",
                      "logit_bias",
                      "frequency_penalty",
                      "presence_penalty",
                      "repetition_penalty",
                      "min_tokens",
                      "ignore_eos",
                      "skip_special_tokens",
                      "no_stop_trim"},
                     where);
  check_honoured(body, where);
  OpenAiCall call;
  parse_choices_and_stream(body, where, call);
  call.echo = as_bad_request([&] { return json_get_or<bool>(body, "echo", false, where); });
  Json logprobs = field_of(body, "logprobs", where);
  if (!logprobs.is_null()) {
    call.top_logprobs = top_logprobs_count(logprobs, "logprobs", where);
    call.logprobs = true;
  }
  if (call.stream && call.logprobs && (call.top_logprobs > 0 || call.echo)) {
    not_served(where, "logprobs", logprobs,
               "streamed: sampled-token log-probs only (logprobs 0, "
               "no echo)");
  }
  if (!body.contains("prompt")) bad_request(where + ": required field 'prompt' is missing");
  auto prompts = completion_prompts(body["prompt"], tokenizer, limits.vocab_size, call, where);
  add_items(call, std::move(prompts), openai_sampling(body, where, 16), limits, where);
  return call;
}

OpenAiCall parse_chat_completion(const OrderedJson& body, const tokenizer::Tokenizer& tokenizer,
                                 const tokenizer::ChatFormatter* chat, const ModelLimits& limits) {
  const std::string where = "/v1/chat/completions";
  check_known_fields(body,
                     {"model",
                      "messages",
                      "max_tokens",
                      "max_completion_tokens",
                      "temperature",
                      "top_p",
                      "top_k",
                      "min_p",
                      "stop",
                      "stop_token_ids",
                      "seed",
                      "n",
                      "stream",
                      "stream_options",
                      "logprobs",
                      "top_logprobs",
                      "user",
                      "tools",
                      "tool_choice",
                      "parallel_tool_calls",
                      "functions",
                      "response_format",
                      "logit_bias",
                      "frequency_penalty",
                      "presence_penalty",
                      "repetition_penalty",
                      "min_tokens",
                      "store",
                      "metadata",
                      "service_tier",
                      "modalities",
                      "reasoning_effort",
                      "audio",
                      "prediction",
                      "web_search_options",
                      "chat_template_kwargs",
                      "ignore_eos",
                      "skip_special_tokens",
                      "no_stop_trim"},
                     where);
  check_honoured(body, where);
  OpenAiCall call;
  call.chat = true;
  parse_choices_and_stream(body, where, call);
  call.logprobs = as_bad_request([&] { return json_get_or<bool>(body, "logprobs", false, where); });
  Json top = field_of(body, "top_logprobs", where);
  if (!top.is_null()) {
    call.top_logprobs = top_logprobs_count(top, "top_logprobs", where);
    if (call.top_logprobs > 0 && !call.logprobs) {
      bad_request(where + ": 'top_logprobs' needs 'logprobs': true");
    }
  }
  if (call.stream && call.top_logprobs > 0) {
    not_served(where, "top_logprobs", top, "streamed: sampled-token log-probs only");
  }
  if (chat == nullptr) {
    bad_request(where + ": the served model directory has no chat template; use /v1/completions");
  }
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty()) {
    bad_request(where + ": 'messages' must be a non-empty list of {role, content} objects");
  }
  OrderedJson extra = OrderedJson::object();
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const auto& kwargs = body["chat_template_kwargs"];
    if (!kwargs.is_object()) bad_request(where + ": 'chat_template_kwargs' must be an object");
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) extra[it.key()] = it.value();
  }
  OrderedJson flat = text_messages(*messages, where);
  std::string prompt = as_bad_request([&] { return chat->apply(flat, true, extra); });
  call.prompt_texts.push_back(prompt);
  auto ids = as_bad_request([&] { return tokenizer.encode(prompt, /*add_special_tokens=*/false); });
  add_items(call, {std::move(ids)}, openai_sampling(body, where, 128), limits, where);
  return call;
}

Json openai_response(const OpenAiCall& call, const std::vector<GenerateOutput>& outputs,
                     const tokenizer::Tokenizer& tokenizer, const OpenAiIds& ids) {
  Json choices = Json::array();
  for (size_t k = 0; k < call.items.size(); ++k) {
    const auto& item = call.items[k];
    const auto& output = outputs.at(k);
    std::string text = output_text(item, output, tokenizer);
    Json choice = {{"index", k}, {"finish_reason", finish_reason_name(output.finish_reason)}};
    Json logprobs = nullptr;
    if (call.logprobs) {
      auto rows = choice_rows(call, item, output);
      logprobs = call.chat ? chat_logprobs(rows, tokenizer)
                           : completion_logprobs(rows, tokenizer, call.top_logprobs > 0);
    }
    choice["logprobs"] = std::move(logprobs);
    if (call.chat) {
      choice["message"] = {
          {"role", "assistant"}, {"content", text}, {"refusal", nullptr}, {"tool_calls", nullptr}};
    } else {
      choice["text"] = call.echo ? call.prompt_texts.at(item.prompt_index) + text : text;
    }
    choices.push_back(std::move(choice));
  }
  Json body = envelope(call, ids, call.chat ? "chat.completion" : "text_completion");
  body["choices"] = std::move(choices);
  body["usage"] = usage_of(call, outputs);
  if (!outputs.empty()) body["weight_version"] = weight_version_json(outputs[0].weight_version);
  return body;
}

Json openai_chunk(const OpenAiCall& call, const ChunkPart& part,
                  const tokenizer::Tokenizer& tokenizer, const OpenAiIds& ids) {
  Json finish = part.finish_reason.empty() ? Json(nullptr) : Json(part.finish_reason);
  Json logprobs = nullptr;
  if (call.logprobs && !part.ids.empty()) {
    TokenRows rows;
    rows.ids = part.ids;
    for (float lp : part.logprobs) rows.logprobs.emplace_back(lp);
    rows.tops.assign(part.ids.size(), nullptr);
    logprobs =
        call.chat ? chat_logprobs(rows, tokenizer) : completion_logprobs(rows, tokenizer, false);
  }
  Json choice = {{"index", part.index}, {"logprobs", logprobs}, {"finish_reason", finish}};
  if (call.chat) {
    Json delta = Json::object();
    if (part.first) delta["role"] = "assistant";
    if (!part.text.empty() || part.first) delta["content"] = part.text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = part.text;
  }
  Json chunk = envelope(call, ids, call.chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = Json::array({std::move(choice)});
  if (call.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

Json openai_usage_chunk(const OpenAiCall& call, const std::vector<GenerateOutput>& outputs,
                        const OpenAiIds& ids) {
  Json chunk = envelope(call, ids, call.chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = Json::array();
  chunk["usage"] = usage_of(call, outputs);
  return chunk;
}

Json chat_token_logprobs(const std::vector<int64_t>& ids, const std::vector<float>& logprobs,
                         const tokenizer::Tokenizer& tokenizer) {
  FURLONG_CHECK(ids.size() == logprobs.size(), "chat_token_logprobs: ", ids.size(), " ids but ",
                logprobs.size(), " log-probs");
  TokenRows rows;
  rows.ids = ids;
  for (float lp : logprobs) rows.logprobs.emplace_back(lp);
  rows.tops.assign(ids.size(), nullptr);
  return chat_logprobs(rows, tokenizer);
}

}  // namespace furlong::engine::server
