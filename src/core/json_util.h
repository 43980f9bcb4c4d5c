// JSON parsing and typed field access whose errors name the source and the field.
//   auto cfg = read_json_file(dir / "config.json");
//   int64_t h = json_get<int64_t>(cfg, "hidden_size", "config.json");
//   -> "model/config.json: field 'hidden_size' must be an integer ..., got string \"64\""
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace furlong {

using Json = nlohmann::json;
// Objects keep their key order, as Python dicts do: for JSONL rows, so that rows written back
// read like their inputs and chat templates see tool arguments in the order given. (Plain Json
// for big files such as tokenizer.json: ordered objects look keys up linearly.)
using OrderedJson = nlohmann::ordered_json;

// How deeply arrays and objects may nest in JSON that furlong reads (request bodies, JSONL rows,
// model files). Real inputs nest a few levels (tokenizer.json 5, chat messages with tool calls
// about 10); nlohmann's parser is iterative, but dump(), copies and comparisons recurse, so a
// body of 60,000 nested arrays would overflow the stack later. 0 < depth <= this limit.
inline constexpr int kMaxJsonDepth = 128;

// `where` names the source in messages (a path, "line 3 of in.jsonl", ...). Every parse is
// bounded: nesting deeper than `max_depth` and numbers beyond a double (1e400) are
// furlong::Errors naming the source, the limit or the field.
Json parse_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth);
OrderedJson parse_ordered_json(std::string_view text, const std::string& where,
                               int max_depth = kMaxJsonDepth);
// The same parser as a template, for code that names its JSON type (Json or OrderedJson).
template <typename J>
J parse_json_bounded(std::string_view text, const std::string& where,
                     int max_depth = kMaxJsonDepth);
Json read_json_file(const std::filesystem::path& path);
OrderedJson read_ordered_json_file(const std::filesystem::path& path);
std::string json_type_name(const Json& value);
std::string json_type_name(const OrderedJson& value);
// A short rendering of a value for error messages: at most ~60 characters, nested values past
// the first few levels shown as [...] / {...}; never walks the whole value.
std::string json_excerpt(const Json& value);
std::string json_excerpt(const OrderedJson& value);

namespace detail {
template <typename T, typename J>
bool json_holds(const J& v);
template <typename T>
const char* json_expected_name();
}  // namespace detail

template <typename T, typename J>
T json_as(const J& value, std::string_view field, const std::string& where) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // An integer that does not fit T: say so with its range (never a narrowed value).
    FURLONG_CHECK(!value.is_number_integer() || detail::json_holds<T>(value), where, ": field '",
                  field, "' must be ", detail::json_expected_name<T>(), " in [",
                  +std::numeric_limits<T>::min(), ", ", +std::numeric_limits<T>::max(), "], got ",
                  json_excerpt(value));
  }
  FURLONG_CHECK(detail::json_holds<T>(value), where, ": field '", field, "' must be ",
                detail::json_expected_name<T>(), ", got ", json_type_name(value), " ",
                json_excerpt(value));
  return value.template get<T>();
}

template <typename T, typename J>
T json_get(const J& obj, std::string_view field, const std::string& where) {
  FURLONG_CHECK(obj.is_object(), where, ": expected a JSON object, got ", json_type_name(obj));
  auto it = obj.find(field);
  FURLONG_CHECK(it != obj.end(), where, ": required field '", field, "' is missing");
  return json_as<T>(*it, field, where);
}

// Missing or null -> fallback.
template <typename T, typename J>
T json_get_or(const J& obj, std::string_view field, T fallback, const std::string& where) {
  FURLONG_CHECK(obj.is_object(), where, ": expected a JSON object, got ", json_type_name(obj));
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return fallback;
  return json_as<T>(*it, field, where);
}

template <typename T, typename J>
std::optional<T> json_get_optional(const J& obj, std::string_view field, const std::string& where) {
  FURLONG_CHECK(obj.is_object(), where, ": expected a JSON object, got ", json_type_name(obj));
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  return json_as<T>(*it, field, where);
}

namespace detail {
template <typename T, typename J>
bool json_holds(const J& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    // The value must fit T: 2^63 must not read back as a negative int64_t, nor 2^40 as int 0.
    if (v.is_number_unsigned()) {
      return v.template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    }
    if (!v.is_number_integer()) return false;
    const auto i = v.template get<int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      return i >= 0 && static_cast<uint64_t>(i) <= std::numeric_limits<T>::max();
    } else {
      return i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max();
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    if (!v.is_array()) return false;
    for (const auto& e : v)
      if (!json_holds<int64_t>(e)) return false;
    return true;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!v.is_array()) return false;
    for (const auto& e : v)
      if (!e.is_string()) return false;
    return true;
  } else {
    return true;
  }
}
template <typename T>
const char* json_expected_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>)
    return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return "an array of integers";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return "an array of strings";
  else
    return "a value of the expected type";
}
}  // namespace detail

}  // namespace furlong
