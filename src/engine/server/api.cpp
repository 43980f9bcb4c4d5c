// Request parsing and response bodies of the engine's HTTP API (see api.h).
#include "engine/server/api.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/strings.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server {
namespace {

// Runs `fn`, turning a furlong::Error (a bad field) into a 400.
template <typename Fn>
auto as_bad_request(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    bad_request(e.what());
  }
}

void check_keys(const std::vector<std::string>& keys, std::initializer_list<std::string_view> known,
                const std::string& where) {
  std::vector<std::string> known_list(known.begin(), known.end());
  for (const auto& key : keys) {
    if (std::find(known_list.begin(), known_list.end(), key) != known_list.end()) continue;
    // A name can be megabytes long: the suggestion search and the echo are both bounded.
    std::string message = where + ": unknown field '" + truncate_for_message(key) + "'";
    if (auto close = closest_match(key, known_list)) message += " (did you mean '" + *close + "'?)";
    bad_request(message + "; accepted fields: " + join(known_list, ", "));
  }
}

template <typename J>
std::vector<std::string> keys_of(const J& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return keys;
}

// A field that is accepted only with one value (features furlong does not serve).
template <typename J, typename T>
void require_value(const J& body, const char* field, const T& allowed, const std::string& where,
                   const char* why) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return;
  if (!(*it == J(allowed))) bad_request(where + ": '" + field + "' " + why);
}

void check_prompt(const std::vector<int64_t>& ids, int64_t max_new_tokens,
                  const ModelLimits& limits, const std::string& where) {
  if (ids.empty()) bad_request(where + ": the prompt is empty");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limits.vocab_size) {
      bad_request(where + ": input_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                  " is outside the vocabulary [0, " + std::to_string(limits.vocab_size) + ")");
    }
  }
  // Compared without forming prompt + max_new_tokens, which overflows for max_new_tokens near
  // 2^63 (and would then pass the check).
  const auto prompt_tokens = static_cast<int64_t>(ids.size());
  if (prompt_tokens > limits.context_length ||
      max_new_tokens > limits.context_length - prompt_tokens) {
    bad_request(where + ": the prompt (" + std::to_string(prompt_tokens) +
                " tokens) + max_new_tokens (" + std::to_string(max_new_tokens) +
                ") exceeds the context length " + std::to_string(limits.context_length));
  }
}

// SGLang sampling_params -> engine sampling + text options. Keys only about text rendering are
// taken out here; the rest goes to the engine's strict parser.
std::pair<SamplingParams, TextOptions> parse_sampling(const Json& json, const std::string& where) {
  if (!json.is_object()) bad_request(where + " must be a JSON object");
  Json engine_json = json;
  TextOptions text;
  as_bad_request([&] {
    text.skip_special_tokens =
        json_get_or<bool>(json, "skip_special_tokens", text.skip_special_tokens, where);
    text.no_stop_trim = json_get_or<bool>(json, "no_stop_trim", text.no_stop_trim, where);
    json_get_or<bool>(json, "spaces_between_special_tokens", false, where);
    return 0;
  });
  engine_json.erase("spaces_between_special_tokens");
  return {as_bad_request([&] { return parse_sampling_params(engine_json, where); }), text};
}

// The prompts of a /generate body as token ids, and whether they came as a batch.
std::pair<std::vector<std::vector<int64_t>>, bool> generate_prompts(
    const Json& body, const tokenizer::Tokenizer& tokenizer) {
  bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
  bool has_text = body.contains("text") && !body["text"].is_null();
  if (has_ids == has_text) bad_request("/generate: give exactly one of 'text' and 'input_ids'");
  std::vector<std::vector<int64_t>> prompts;
  if (has_ids) {
    const Json& ids = body["input_ids"];
    bool batched = ids.is_array() && !ids.empty() && ids[0].is_array();
    if (!batched) {
      prompts.push_back(as_bad_request(
          [&] { return json_as<std::vector<int64_t>>(ids, "input_ids", "/generate"); }));
      return {prompts, false};
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      std::string field = "input_ids[" + std::to_string(i) + "]";
      prompts.push_back(as_bad_request(
          [&] { return json_as<std::vector<int64_t>>(ids[i], field, "/generate"); }));
    }
    return {prompts, true};
  }
  const Json& text = body["text"];
  auto encode = [&](const Json& value, const std::string& field) {
    auto s = as_bad_request([&] { return json_as<std::string>(value, field, "/generate"); });
    return as_bad_request([&] { return tokenizer.encode(s, /*add_special_tokens=*/true); });
  };
  if (!text.is_array()) return {{encode(text, "text")}, false};
  if (text.empty()) bad_request("/generate: 'text' is an empty list");
  for (size_t i = 0; i < text.size(); ++i)
    prompts.push_back(encode(text[i], "text[" + std::to_string(i) + "]"));
  return {prompts, true};
}

std::vector<std::string> generate_rids(const Json& body, size_t count, bool batched,
                                       const std::function<std::string()>& next_rid) {
  std::vector<std::string> rids;
  auto it = body.find("rid");
  if (it == body.end() || it->is_null()) {
    for (size_t i = 0; i < count; ++i) rids.push_back(next_rid());
    return rids;
  }
  if (!batched) {
    return {as_bad_request([&] { return json_as<std::string>(*it, "rid", "/generate"); })};
  }
  rids = as_bad_request(
      [&] { return json_as<std::vector<std::string>>(*it, "rid", "/generate (a batch)"); });
  if (rids.size() != count) {
    bad_request("/generate: 'rid' has " + std::to_string(rids.size()) + " entries for " +
                std::to_string(count) + " prompts");
  }
  return rids;
}

Json finish_reason_json(const GenerateOutput& output) {
  switch (output.finish_reason) {
    case FinishReason::kStop: {
      Json matched = nullptr;
      if (output.matched_stop_token) matched = *output.matched_stop_token;
      if (!output.matched_stop_string.empty()) matched = output.matched_stop_string;
      return Json{{"type", "stop"}, {"matched", matched}};
    }
    case FinishReason::kLength:
      return Json{{"type", "length"}, {"length", output.output_ids.size()}};
    case FinishReason::kAbort:
      return Json{{"type", "abort"}, {"message", "request aborted"}};
  }
  return nullptr;
}

// OpenAI's stop: a string or a list of strings.
Json openai_stop(const Json& value, const std::string& where) {
  if (value.is_string()) return Json::array({value});
  as_bad_request([&] { return json_as<std::vector<std::string>>(value, "stop", where); });
  return value;
}

template <typename J>
Json openai_sampling(const J& body, const std::string& where, int64_t default_max_tokens) {
  Json sampling = Json::object();
  auto copy = [&](const char* from, const char* to) {
    auto it = body.find(from);
    if (it != body.end() && !it->is_null()) sampling[to] = parse_json(it->dump(), where);
  };
  copy("temperature", "temperature");
  copy("top_p", "top_p");
  copy("top_k", "top_k");
  copy("min_p", "min_p");
  copy("seed", "seed");
  copy("ignore_eos", "ignore_eos");
  copy("stop_token_ids", "stop_token_ids");
  copy("skip_special_tokens", "skip_special_tokens");
  copy("max_tokens", "max_new_tokens");
  copy("max_completion_tokens", "max_new_tokens");
  if (!sampling.contains("max_new_tokens")) sampling["max_new_tokens"] = default_max_tokens;
  auto stop = body.find("stop");
  if (stop != body.end() && !stop->is_null())
    sampling["stop"] = openai_stop(parse_json(stop->dump(), where), where);
  return sampling;
}

template <typename J>
void check_openai_common(const J& body, const std::string& where) {
  require_value(body, "n", 1, where, "must be 1 (one choice per request)");
  require_value(body, "stream", false, where, "must be false (streaming is not served)");
}

}  // namespace

void bad_request(const std::string& message) {
  throw ApiError(400, "invalid_request_error", message);
}

Json error_body(const std::string& message, const std::string& type, int status) {
  return Json{{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

Json parse_body(std::string_view body, const std::string& endpoint) {
  Json json = as_bad_request([&] { return parse_json(body, endpoint + " request body"); });
  if (!json.is_object()) {
    bad_request(endpoint + ": the request body must be a JSON object, got " + json_type_name(json));
  }
  return json;
}

void check_known_fields(const Json& body, std::initializer_list<std::string_view> known,
                        const std::string& where) {
  check_keys(keys_of(body), known, where);
}
void check_known_fields(const OrderedJson& body, std::initializer_list<std::string_view> known,
                        const std::string& where) {
  check_keys(keys_of(body), known, where);
}

GenerateCall parse_generate(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits,
                            const std::function<std::string()>& next_rid) {
  const std::string where = "/generate";
  check_known_fields(body,
                     {"text", "input_ids", "sampling_params", "return_logprob", "rid", "stream",
                      "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs",
                      "return_routed_experts", "return_indexer_topk"},
                     where);
  require_value(body, "logprob_start_len", -1, where,
                "must be -1: only output-token log-probs are served");
  require_value(body, "top_logprobs_num", 0, where, "must be 0: top log-probs are not served");
  require_value(body, "return_routed_experts", false, where, "is not served (dense models)");
  require_value(body, "return_indexer_topk", false, where, "is not served");
  GenerateCall call;
  as_bad_request([&] {
    call.return_logprob = json_get_or<bool>(body, "return_logprob", false, where);
    call.return_text_in_logprobs = json_get_or<bool>(body, "return_text_in_logprobs", false, where);
    return 0;
  });
  as_bad_request([&] { return call.stream = json_get_or<bool>(body, "stream", false, where); });
  auto [prompts, batched] = generate_prompts(body, tokenizer);
  call.batched = batched;
  if (call.stream && batched) bad_request(where + ": 'stream' serves one prompt, not a batch");
  auto rids = generate_rids(body, prompts.size(), batched, next_rid);
  Json sampling = body.contains("sampling_params") && !body["sampling_params"].is_null()
                      ? body["sampling_params"]
                      : Json::object();
  if (sampling.is_array() && sampling.size() != prompts.size()) {
    bad_request(where + ": 'sampling_params' has " + std::to_string(sampling.size()) +
                " entries for " + std::to_string(prompts.size()) + " prompts");
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::string item_where = batched ? where + " prompt " + std::to_string(i) : where;
    auto [params, text] = sampling.is_array()
                              ? parse_sampling(sampling[i], item_where + " sampling_params")
                              : parse_sampling(sampling, item_where + " sampling_params");
    check_prompt(prompts[i], params.max_new_tokens, limits, item_where);
    GenerateItem item;
    item.request.input_ids = std::move(prompts[i]);
    item.request.sampling = std::move(params);
    item.text = text;
    item.rid = rids[i];
    call.items.push_back(std::move(item));
  }
  return call;
}

std::string output_text(const GenerateItem& item, const GenerateOutput& output,
                        const tokenizer::Tokenizer& tokenizer) {
  std::vector<int64_t> ids = output.output_ids;
  if (!item.text.no_stop_trim && output.matched_stop_token && !ids.empty() &&
      ids.back() == *output.matched_stop_token) {
    ids.pop_back();
  }
  std::string text = tokenizer.decode(ids, item.text.skip_special_tokens);
  if (!item.text.no_stop_trim && !output.matched_stop_string.empty()) {
    auto pos = text.find(output.matched_stop_string);
    if (pos != std::string::npos) text.resize(pos);
  }
  return text;
}

Json generate_response(const GenerateCall& call, const GenerateItem& item,
                       const GenerateOutput& output, const tokenizer::Tokenizer& tokenizer,
                       double latency_s) {
  Json meta = {{"id", item.rid},
               {"finish_reason", finish_reason_json(output)},
               {"prompt_tokens", output.prompt_tokens},
               {"completion_tokens", output.output_ids.size()},
               {"cached_tokens", 0},
               {"weight_version", output.weight_version},
               {"e2e_latency", latency_s}};
  if (call.return_logprob) {
    Json logprobs = Json::array();
    for (size_t i = 0; i < output.output_ids.size(); ++i) {
      Json token_text = nullptr;
      if (call.return_text_in_logprobs) token_text = tokenizer.decode({output.output_ids[i]});
      logprobs.push_back(
          Json::array({output.output_logprobs.at(i), output.output_ids[i], token_text}));
    }
    meta["output_token_logprobs"] = std::move(logprobs);
  }
  return Json{{"text", output_text(item, output, tokenizer)},
              {"output_ids", output.output_ids},
              {"meta_info", std::move(meta)}};
}

OpenAiCall parse_completion(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits) {
  const std::string where = "/v1/completions";
  check_known_fields(body,
                     {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                      "stop", "stop_token_ids", "seed", "n", "stream", "logprobs", "echo", "user",
                      "ignore_eos", "skip_special_tokens"},
                     where);
  check_openai_common(body, where);
  require_value(body, "echo", false, where, "must be false");
  if (!body.contains("prompt")) bad_request(where + ": required field 'prompt' is missing");
  const Json& prompt = body["prompt"];
  OpenAiCall call;
  if (prompt.is_string()) {
    call.item.request.input_ids = as_bad_request(
        [&] { return tokenizer.encode(prompt.get<std::string>(), /*add_special_tokens=*/true); });
  } else {
    call.item.request.input_ids = as_bad_request([&] {
      return json_as<std::vector<int64_t>>(prompt, "prompt", where + " (a string or token ids)");
    });
  }
  auto logprobs = body.find("logprobs");
  if (logprobs != body.end() && !logprobs->is_null()) {
    int64_t n = as_bad_request([&] { return json_as<int64_t>(*logprobs, "logprobs", where); });
    if (n != 0) bad_request(where + ": 'logprobs' must be 0 (sampled-token log-probs only)");
    call.logprobs = true;
  }
  auto [params, text] = parse_sampling(openai_sampling(body, where, 16), where);
  check_prompt(call.item.request.input_ids, params.max_new_tokens, limits, where);
  call.item.request.sampling = std::move(params);
  call.item.text = text;
  return call;
}

OpenAiCall parse_chat_completion(const OrderedJson& body, const tokenizer::Tokenizer& tokenizer,
                                 const tokenizer::ChatFormatter* chat, const ModelLimits& limits) {
  const std::string where = "/v1/chat/completions";
  check_known_fields(body, {"model",        "messages",
                            "max_tokens",   "max_completion_tokens",
                            "temperature",  "top_p",
                            "top_k",        "min_p",
                            "stop",         "stop_token_ids",
                            "seed",         "n",
                            "stream",       "logprobs",
                            "top_logprobs", "user",
                            "tools",        "chat_template_kwargs",
                            "ignore_eos",   "skip_special_tokens"},
                     where);
  check_openai_common(body, where);
  require_value(body, "top_logprobs", 0, where, "must be 0 (sampled-token log-probs only)");
  if (chat == nullptr) {
    bad_request(where + ": the served model directory has no chat template; use /v1/completions");
  }
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty()) {
    bad_request(where + ": 'messages' must be a non-empty list of {role, content} objects");
  }
  OrderedJson extra = OrderedJson::object();
  if (body.contains("tools") && !body["tools"].is_null()) extra["tools"] = body["tools"];
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const auto& kwargs = body["chat_template_kwargs"];
    if (!kwargs.is_object()) bad_request(where + ": 'chat_template_kwargs' must be an object");
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) extra[it.key()] = it.value();
  }
  OpenAiCall call;
  call.chat = true;
  std::string prompt = as_bad_request([&] { return chat->apply(*messages, true, extra); });
  call.item.request.input_ids =
      as_bad_request([&] { return tokenizer.encode(prompt, /*add_special_tokens=*/false); });
  call.logprobs = as_bad_request([&] { return json_get_or<bool>(body, "logprobs", false, where); });
  auto [params, text] = parse_sampling(openai_sampling(body, where, 128), where);
  check_prompt(call.item.request.input_ids, params.max_new_tokens, limits, where);
  call.item.request.sampling = std::move(params);
  call.item.text = text;
  return call;
}

Json openai_response(const OpenAiCall& call, const GenerateOutput& output,
                     const tokenizer::Tokenizer& tokenizer, const std::string& model_name,
                     int64_t created_unix_s) {
  std::string text = output_text(call.item, output, tokenizer);
  Json choice = {{"index", 0}, {"finish_reason", finish_reason_name(output.finish_reason)}};
  Json logprobs = nullptr;
  if (call.logprobs) {
    Json tokens = Json::array(), values = Json::array();
    for (size_t i = 0; i < output.output_ids.size(); ++i) {
      tokens.push_back(tokenizer.decode({output.output_ids[i]}));
      values.push_back(output.output_logprobs.at(i));
    }
    if (call.chat) {
      Json content = Json::array();
      for (size_t i = 0; i < tokens.size(); ++i)
        content.push_back({{"token", tokens[i]}, {"logprob", values[i]}, {"top_logprobs", {}}});
      logprobs = {{"content", content}};
    } else {
      logprobs = {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", nullptr}};
    }
  }
  choice["logprobs"] = logprobs;
  if (call.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  auto completion = static_cast<int64_t>(output.output_ids.size());
  return Json{{"id", (call.chat ? "chatcmpl-" : "cmpl-") + call.item.rid},
              {"object", call.chat ? "chat.completion" : "text_completion"},
              {"created", created_unix_s},
              {"model", model_name},
              {"choices", Json::array({choice})},
              {"usage",
               {{"prompt_tokens", output.prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", output.prompt_tokens + completion}}},
              {"weight_version", output.weight_version}};
}

}  // namespace furlong::engine::server
