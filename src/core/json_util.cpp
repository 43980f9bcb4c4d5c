#include "core/json_util.h"

#include "core/files.h"

namespace furlong {
namespace {

// nlohmann reports a byte offset; users want line and column.
std::string line_and_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + " column " + std::to_string(column);
}

template <typename J>
J parse_any(std::string_view text, const std::string& where) {
  try {
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    std::string reason = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
    auto colon = reason.find(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    FURLONG_FAIL(where, ": invalid JSON at ", line_and_column(text, e.byte > 0 ? e.byte - 1 : 0),
                 ": ", reason);
  }
}

}  // namespace

Json parse_json(std::string_view text, const std::string& where) {
  return parse_any<Json>(text, where);
}

OrderedJson parse_ordered_json(std::string_view text, const std::string& where) {
  return parse_any<OrderedJson>(text, where);
}

Json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_file(path), path.string());
}

namespace {

template <typename J>
std::string type_name(const J& value) {
  using value_t = nlohmann::json::value_t;
  switch (value.type()) {
    case value_t::null:
      return "null";
    case value_t::boolean:
      return "boolean";
    case value_t::number_integer:
    case value_t::number_unsigned:
      return "integer";
    case value_t::number_float:
      return "number";
    case value_t::string:
      return "string";
    case value_t::array:
      return "array";
    case value_t::object:
      return "object";
    default:
      return "value";
  }
}

template <typename J>
std::string excerpt(const J& value) {
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace

std::string json_type_name(const Json& value) {
  return type_name(value);
}
std::string json_type_name(const OrderedJson& value) {
  return type_name(value);
}
std::string json_excerpt(const Json& value) {
  return excerpt(value);
}
std::string json_excerpt(const OrderedJson& value) {
  return excerpt(value);
}

}  // namespace furlong
