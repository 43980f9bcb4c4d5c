// Request parsing and response bodies of the engine's HTTP API (see api.h).
#include "engine/server/api.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/strings.h"
#include "engine/routed_experts_codec.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server {
namespace {

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

}  // namespace

void check_sample_count(size_t prompts, int64_t n, const ModelLimits& limits,
                        const std::string& where) {
  const uint64_t samples = static_cast<uint64_t>(prompts) * static_cast<uint64_t>(n);
  if (limits.max_samples <= 0 || samples <= static_cast<uint64_t>(limits.max_samples)) return;
  bad_request(where + ": " + std::to_string(prompts) + " prompt(s) x n = " + std::to_string(n) +
              " is " + std::to_string(samples) + " samples, more than --max-samples-per-request (" +
              std::to_string(limits.max_samples) + ") allows in one request; send fewer at a time");
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

void check_stop_token_ids(const std::vector<int64_t>& ids, const ModelLimits& limits,
                          const std::string& where) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limits.vocab_size) {
      bad_request(where + ": stop_token_ids[" + std::to_string(i) +
                  "] = " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                  std::to_string(limits.vocab_size) + ")");
    }
  }
}

// SGLang sampling_params -> engine sampling + text options. Keys only about text rendering are
// taken out here; the rest goes to the engine's strict parser.
SamplingParams sample_sampling(const SamplingParams& params, int64_t j) {
  SamplingParams sampling = params;
  if (params.seed && j > 0) sampling.seed = *params.seed + static_cast<uint64_t>(j);
  return sampling;
}

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
  engine_json.erase("n");  // samples per prompt: the caller expands them
  return {as_bad_request([&] { return parse_sampling_params(engine_json, where); }), text};
}

std::string token_text(const tokenizer::Tokenizer& tokenizer, int64_t id) {
  return tokenizer.decode({id}, /*skip_special_tokens=*/false);
}

Json weight_version_json(int64_t version) {
  return version == 0 ? Json("default") : Json(std::to_string(version));
}

int64_t parse_weight_version(const Json& value, const std::string& field,
                             const std::string& where) {
  std::optional<int64_t> version;
  if (value.is_number_integer() &&
      !(value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    version = value.get<int64_t>();
  } else if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s == "default") return 0;
    try {
      size_t used = 0;
      int64_t v = std::stoll(s, &used);
      if (used == s.size() && !s.empty() && s[0] != ' ') version = v;
    } catch (const std::exception&) {
    }
  }
  if (!version) {
    bad_request(where + ": '" + field +
                "' must be \"default\" or a string of digits (furlong counts weight versions as "
                "integers), got " +
                json_excerpt(value));
  }
  if (*version < 0) {
    bad_request(where + ": '" + field + "' must be >= 0, got " + std::to_string(*version));
  }
  return *version;
}

void bad_request(const std::string& message) {
  throw ApiError(400, "invalid_request_error", message);
}

bool same_secret(const std::string& given, const std::string& expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= given[i] ^ expected[i];
  return diff == 0;
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

namespace {

// n (samples per prompt) from one sampling_params object: SGLang's n >= 1.
int64_t samples_of(const Json& sampling, const std::string& where) {
  if (!sampling.is_object() || !sampling.contains("n") || sampling["n"].is_null()) return 1;
  auto n = as_bad_request([&] { return json_as<int64_t>(sampling["n"], "n", where); });
  if (n < 1 || n > 1024)
    bad_request(where + ": field 'n' must be in [1, 1024], got " + std::to_string(n));
  return n;
}

// The scalar log-prob options (SGLang also takes per-prompt lists: not served).
void parse_logprob_options(const Json& body, GenerateCall& call, const std::string& where) {
  as_bad_request([&] {
    call.return_logprob = json_get_or<bool>(body, "return_logprob", false, where);
    call.return_text_in_logprobs = json_get_or<bool>(body, "return_text_in_logprobs", false, where);
    call.logprob_start_len = json_get_or<int64_t>(body, "logprob_start_len", -1, where);
    call.top_logprobs_num = json_get_or<int64_t>(body, "top_logprobs_num", 0, where);
    return 0;
  });
  if (call.logprob_start_len < -1) {
    bad_request(where + ": field 'logprob_start_len' must be -1 or >= 0, got " +
                std::to_string(call.logprob_start_len));
  }
  if (call.top_logprobs_num < 0 || call.top_logprobs_num > 1024) {
    bad_request(where + ": field 'top_logprobs_num' must be in [0, 1024], got " +
                std::to_string(call.top_logprobs_num));
  }
  if (!call.return_logprob) {
    call.logprob_start_len = -1;
    call.top_logprobs_num = 0;
  }
}

}  // namespace

GenerateCall parse_generate(const Json& body, const tokenizer::Tokenizer& tokenizer,
                            const ModelLimits& limits,
                            const std::function<std::string()>& next_rid) {
  const std::string where = "/generate";
  check_known_fields(body,
                     {"text", "input_ids", "sampling_params", "return_logprob", "rid", "stream",
                      "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs",
                      "return_routed_experts", "return_indexer_topk"},
                     where);
  require_value(body, "return_indexer_topk", false, where, "is not served");
  GenerateCall call;
  parse_logprob_options(body, call, where);
  as_bad_request([&] {
    return call.return_routed_experts =
               json_get_or<bool>(body, "return_routed_experts", false, where);
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
    const Json& mine = sampling.is_array() ? sampling[i] : sampling;
    auto [params, text] = parse_sampling(mine, item_where + " sampling_params");
    const int64_t n = samples_of(mine, item_where + " sampling_params");
    if (i > 0 && n != call.n) bad_request(where + ": every prompt must ask for the same 'n'");
    call.n = n;
    if (i == 0) check_sample_count(prompts.size(), n, limits, where);
    if (call.stream && n > 1) bad_request(where + ": 'stream' serves one sample (n = 1)");
    params.top_logprobs_num = call.top_logprobs_num;
    check_prompt(prompts[i], params.max_new_tokens, limits, item_where);
    check_stop_token_ids(params.stop_token_ids, limits, item_where + " sampling_params");
    call.prompt_lengths.push_back(prompts[i].size());
    for (int64_t j = 0; j < n; ++j) {
      GenerateItem item;
      item.request.input_ids = prompts[i];
      item.request.sampling = sample_sampling(params, j);
      item.request.return_routed_experts = call.return_routed_experts;
      item.text = text;
      item.rid = n == 1 ? rids[i] : rids[i] + "-" + std::to_string(j);
      item.prompt_index = i;
      item.sample_index = static_cast<size_t>(j);
      call.items.push_back(std::move(item));
    }
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

namespace {

// SGLang's [logprob, token_id, text|null] triplet (logprob null for position 0).
Json logprob_triplet(const Json& logprob, int64_t id, bool with_text,
                     const tokenizer::Tokenizer& tokenizer) {
  return Json::array({logprob, id, with_text ? Json(token_text(tokenizer, id)) : Json(nullptr)});
}

Json top_list(const TopLogprobs& top, bool with_text, const tokenizer::Tokenizer& tokenizer) {
  Json list = Json::array();
  for (const auto& [id, lp] : top) list.push_back(logprob_triplet(lp, id, with_text, tokenizer));
  return list;
}

// input_token_logprobs (and input_top_logprobs) of the item's prompt from logprob_start_len on.
void add_input_logprobs(const GenerateCall& call, const GenerateItem& item,
                        const tokenizer::Tokenizer& tokenizer, Json& meta) {
  Json tokens = Json::array(), tops = Json::array();
  if (call.logprob_start_len >= 0 && item.prompt_index < call.prompt_logprobs.size()) {
    const auto& ids = item.request.input_ids;
    const auto& lps = call.prompt_logprobs[item.prompt_index];
    const auto size = static_cast<int64_t>(ids.size());
    const bool with_text = call.return_text_in_logprobs;
    if (call.logprob_start_len == 0) {
      tokens.push_back(logprob_triplet(nullptr, ids[0], with_text, tokenizer));
      tops.push_back(nullptr);
    }
    const int64_t from = call.prompt_logprob_from(size);
    for (int64_t p = from; p < size; ++p) {
      const auto k = static_cast<size_t>(p - from);
      tokens.push_back(logprob_triplet(lps.logprobs.at(k), ids[p], with_text, tokenizer));
      if (call.top_logprobs_num > 0) tops.push_back(top_list(lps.top.at(k), with_text, tokenizer));
    }
  }
  meta["input_token_logprobs"] = std::move(tokens);
  if (call.top_logprobs_num > 0) meta["input_top_logprobs"] = std::move(tops);
}

}  // namespace

Json generate_response(const GenerateCall& call, const GenerateItem& item,
                       const GenerateOutput& output, const tokenizer::Tokenizer& tokenizer,
                       double latency_s) {
  Json meta = {{"id", item.rid},
               {"finish_reason", finish_reason_json(output)},
               {"prompt_tokens", output.prompt_tokens},
               {"completion_tokens", output.output_ids.size()},
               {"cached_tokens", 0},
               {"weight_version", weight_version_json(output.weight_version)},
               {"e2e_latency", latency_s}};
  if (call.return_logprob) {
    const bool with_text = call.return_text_in_logprobs;
    Json logprobs = Json::array(), tops = Json::array();
    for (size_t i = 0; i < output.output_ids.size(); ++i) {
      logprobs.push_back(logprob_triplet(output.output_logprobs.at(i), output.output_ids[i],
                                         with_text, tokenizer));
      if (call.top_logprobs_num > 0 && i < output.output_top_logprobs.size())
        tops.push_back(top_list(output.output_top_logprobs[i], with_text, tokenizer));
    }
    meta["output_token_logprobs"] = std::move(logprobs);
    if (call.top_logprobs_num > 0) meta["output_top_logprobs"] = std::move(tops);
    add_input_logprobs(call, item, tokenizer, meta);
  }
  // SGLang's form: base64 of int32 [prompt + output - 1, L, K] (the last token never ran), once
  // the request has ended (streamed partial outputs carry none, as in SGLang).
  if (call.return_routed_experts && !output.routed_experts.empty())
    meta["routed_experts"] = routed_experts_to_sglang(output.routed_experts);
  return Json{{"text", output_text(item, output, tokenizer)},
              {"output_ids", output.output_ids},
              {"meta_info", std::move(meta)}};
}

}  // namespace furlong::engine::server
