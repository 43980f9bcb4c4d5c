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

}  // namespace

Json parse_json(std::string_view text, const std::string& where) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    std::string reason = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
    auto colon = reason.find(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    FURLONG_FAIL(where, ": invalid JSON at ", line_and_column(text, e.byte > 0 ? e.byte - 1 : 0),
                 ": ", reason);
  }
}

Json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_file(path), path.string());
}

std::string json_type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

std::string json_excerpt(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace furlong
