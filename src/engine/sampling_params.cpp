// SGLang-style sampling_params JSON -> SamplingParams (strict: unknown keys, wrong types and
// out-of-range values are errors naming the source and the key).
#include <set>

#include "core/error.h"
#include "core/strings.h"
#include "engine/engine.h"

namespace furlong::engine {
namespace {

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {"temperature",
                                             "top_p",
                                             "top_k",
                                             "min_p",
                                             "max_new_tokens",
                                             "stop",
                                             "stop_token_ids",
                                             "ignore_eos",
                                             "seed",
                                             "sampling_seed",
                                             "skip_special_tokens",
                                             "no_stop_trim",
                                             "frequency_penalty",
                                             "presence_penalty",
                                             "repetition_penalty",
                                             "min_new_tokens"};
  return keys;
}

std::vector<std::string> parse_stop(const Json& value, const std::string& where) {
  if (value.is_null()) return {};
  if (value.is_string()) return {value.get<std::string>()};
  auto stops = json_as<std::vector<std::string>>(value, "stop", where);
  for (const auto& s : stops) {
    FURLONG_CHECK(!s.empty(), where, ": field 'stop' must not contain empty strings");
  }
  return stops;
}

// SGLang's ranges (sampling_params.py verify()); null means the default, as there.
void parse_penalties(const Json& json, const std::string& where, SamplingParams& p) {
  auto number = [&](const char* key, double fallback, double lo, double hi, bool open_lo) {
    double v = fallback;
    if (auto given = json_get_optional<double>(json, key, where)) v = *given;
    FURLONG_CHECK((open_lo ? v > lo : v >= lo) && v <= hi, where, ": field '", key, "' must be in ",
                  open_lo ? "(" : "[", lo, ", ", hi, "], got ", v);
    return v;
  };
  p.frequency_penalty = number("frequency_penalty", 0.0, -2.0, 2.0, false);
  p.presence_penalty = number("presence_penalty", 0.0, -2.0, 2.0, false);
  p.repetition_penalty = number("repetition_penalty", 1.0, 0.0, 2.0, true);
  if (auto m = json_get_optional<int64_t>(json, "min_new_tokens", where)) p.min_new_tokens = *m;
  FURLONG_CHECK(p.min_new_tokens >= 0 && p.min_new_tokens <= p.max_new_tokens, where,
                ": field 'min_new_tokens' must be in [0, max_new_tokens (", p.max_new_tokens,
                ")], got ", p.min_new_tokens);
}

}  // namespace

Json sampling_params_json(const SamplingParams& p) {
  Json j = {{"temperature", p.temperature},
            {"top_p", p.top_p},
            {"top_k", p.top_k},
            {"min_p", p.min_p},
            {"max_new_tokens", p.max_new_tokens},
            {"ignore_eos", p.ignore_eos}};
  if (!p.stop.empty()) j["stop"] = p.stop;
  if (!p.stop_token_ids.empty()) j["stop_token_ids"] = p.stop_token_ids;
  if (p.seed) j["sampling_seed"] = *p.seed;
  // Penalties only when set, so a default request's payload is what it always was.
  if (p.frequency_penalty != 0.0) j["frequency_penalty"] = p.frequency_penalty;
  if (p.presence_penalty != 0.0) j["presence_penalty"] = p.presence_penalty;
  if (p.repetition_penalty != 1.0) j["repetition_penalty"] = p.repetition_penalty;
  if (p.min_new_tokens != 0) j["min_new_tokens"] = p.min_new_tokens;
  if (!p.skip_special_tokens) j["skip_special_tokens"] = false;
  if (p.no_stop_trim) j["no_stop_trim"] = true;
  return j;
}

SamplingParams parse_sampling_params(const Json& json, const std::string& where) {
  SamplingParams p;
  if (json.is_null()) return p;
  FURLONG_CHECK(json.is_object(), where, ": sampling_params must be a JSON object, got ",
                json_type_name(json));
  for (const auto& [key, value] : json.items()) {
    FURLONG_CHECK(known_keys().count(key), where, ": unknown sampling_params key '",
                  truncate_for_message(key),
                  "' (expected one of temperature, top_p, top_k, min_p, max_new_tokens, stop, "
                  "stop_token_ids, ignore_eos, seed, sampling_seed, skip_special_tokens, "
                  "no_stop_trim, frequency_penalty, presence_penalty, repetition_penalty, "
                  "min_new_tokens)");
  }
  p.temperature = json_get_or<double>(json, "temperature", p.temperature, where);
  FURLONG_CHECK(p.temperature >= 0, where, ": field 'temperature' must be >= 0, got ",
                p.temperature);
  p.top_p = json_get_or<double>(json, "top_p", p.top_p, where);
  FURLONG_CHECK(p.top_p > 0 && p.top_p <= 1, where, ": field 'top_p' must be in (0, 1], got ",
                p.top_p);
  p.top_k = json_get_or<int64_t>(json, "top_k", p.top_k, where);
  if (p.top_k == 0) p.top_k = -1;
  p.min_p = json_get_or<double>(json, "min_p", p.min_p, where);
  FURLONG_CHECK(p.min_p >= 0 && p.min_p < 1, where, ": field 'min_p' must be in [0, 1), got ",
                p.min_p);
  p.max_new_tokens = json_get_or<int64_t>(json, "max_new_tokens", p.max_new_tokens, where);
  FURLONG_CHECK(p.max_new_tokens >= 0, where, ": field 'max_new_tokens' must be >= 0, got ",
                p.max_new_tokens);
  parse_penalties(json, where, p);
  if (json.contains("stop")) p.stop = parse_stop(json["stop"], where);
  p.stop_token_ids =
      json_get_or<std::vector<int64_t>>(json, "stop_token_ids", p.stop_token_ids, where);
  p.ignore_eos = json_get_or<bool>(json, "ignore_eos", p.ignore_eos, where);
  p.skip_special_tokens =
      json_get_or<bool>(json, "skip_special_tokens", p.skip_special_tokens, where);
  p.no_stop_trim = json_get_or<bool>(json, "no_stop_trim", p.no_stop_trim, where);
  FURLONG_CHECK(!(json.contains("seed") && json.contains("sampling_seed") &&
                  !json["seed"].is_null() && !json["sampling_seed"].is_null()),
                where, ": give either 'seed' or 'sampling_seed', not both");
  for (const char* key : {"seed", "sampling_seed"}) {
    if (auto seed = json_get_optional<int64_t>(json, key, where)) {
      FURLONG_CHECK(*seed >= 0, where, ": field '", key, "' must be >= 0, got ", *seed);
      p.seed = static_cast<uint64_t>(*seed);
    }
  }
  return p;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "unknown";
}

}  // namespace furlong::engine
