#include "core/json_util.h"

#include <algorithm>
#include <vector>

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

// Where the parser is, for messages: the keys from the root to the value being read.
struct ParsePosition {
  std::vector<std::string> keys;  // keys[d]: the last key read at depth d + 1
  std::string field() const {
    std::string out;
    for (const auto& k : keys) out += (out.empty() ? "" : ".") + k;
    return out.size() > 80 ? out.substr(0, 77) + "..." : out;
  }
};

// "[json.exception.parse_error.101] parse error at line 1, column 2: x" -> "x";
// "[json.exception.out_of_range.406] number overflow ..." -> "number overflow ...".
std::string drop_nlohmann_prefix(std::string reason) {
  if (reason.rfind("[json.exception.", 0) != 0) return reason;
  auto tag_end = reason.find("] ");
  if (tag_end != std::string::npos) reason = reason.substr(tag_end + 2);
  auto colon = reason.find(": ");
  if (colon != std::string::npos && reason.rfind("parse error", 0) == 0)
    reason = reason.substr(colon + 2);
  return reason;
}

}  // namespace

template <typename J>
J parse_json_bounded(std::string_view text, const std::string& where, int max_depth) {
  FURLONG_ASSERT(max_depth > 0, "parse_json_bounded: max_depth must be positive");
  ParsePosition position;
  // Called by nlohmann's (iterative) parser for every event with the nesting depth: a container
  // opened at depth d nests d + 1 levels deep.
  typename J::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                               J& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      if (depth >= max_depth) {
        std::string at = position.keys.empty() ? "" : " (inside field '" + position.field() + "')";
        FURLONG_FAIL(where, ": JSON nested deeper than ", max_depth, " levels of arrays/objects",
                     at, "; furlong reads at most ", max_depth);
      }
    } else if (event == Event::key) {
      position.keys.resize(static_cast<size_t>(std::max(depth - 1, 0)));
      const auto& key = parsed.template get_ref<const std::string&>();
      position.keys.push_back(key.size() > 64 ? key.substr(0, 61) + "..." : key);
    } else if (event == Event::object_end || event == Event::array_end) {
      if (position.keys.size() > static_cast<size_t>(depth))
        position.keys.resize(static_cast<size_t>(depth));
    }
    return true;
  };
  try {
    return J::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::parse_error& e) {
    FURLONG_FAIL(where, ": invalid JSON at ", line_and_column(text, e.byte > 0 ? e.byte - 1 : 0),
                 ": ", drop_nlohmann_prefix(e.what()));
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number beyond a double's range, e.g. 1e400.
    std::string field = position.field();
    FURLONG_FAIL(where, ": ", field.empty() ? "a value" : "field '" + field + "'", ": ",
                 drop_nlohmann_prefix(e.what()), " (a number must fit a 64-bit float)");
  } catch (const nlohmann::json::exception& e) {
    FURLONG_FAIL(where, ": invalid JSON: ", drop_nlohmann_prefix(e.what()));
  }
}

template Json parse_json_bounded<Json>(std::string_view, const std::string&, int);
template OrderedJson parse_json_bounded<OrderedJson>(std::string_view, const std::string&, int);

Json parse_json(std::string_view text, const std::string& where, int max_depth) {
  return parse_json_bounded<Json>(text, where, max_depth);
}

OrderedJson parse_ordered_json(std::string_view text, const std::string& where, int max_depth) {
  return parse_json_bounded<OrderedJson>(text, where, max_depth);
}

Json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_file(path), path.string());
}

OrderedJson read_ordered_json_file(const std::filesystem::path& path) {
  return parse_ordered_json(read_file(path), path.string());
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

constexpr size_t kExcerptChars = 60;
constexpr int kExcerptDepth = 4;

// Appends a compact rendering of `value` to `out`, stopping once `out` is past the excerpt's
// length and showing containers below `depth_left` levels as [...] / {...}. Recursion is
// bounded by kExcerptDepth, whatever the value's own depth.
template <typename J>
void render_excerpt(const J& value, int depth_left, std::string& out) {
  auto dump = [](const J& v) {
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (value.is_string()) {
    const auto& s = value.template get_ref<const std::string&>();
    out += dump(J(s.size() > kExcerptChars ? s.substr(0, kExcerptChars) : s));
    return;
  }
  if (!value.is_array() && !value.is_object()) {
    out += dump(value);
    return;
  }
  const bool array = value.is_array();
  if (value.empty()) {
    out += array ? "[]" : "{}";
    return;
  }
  if (depth_left == 0) {
    out += array ? "[...]" : "{...}";
    return;
  }
  out += array ? '[' : '{';
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (out.size() > kExcerptChars) {
      out += "...";
      break;
    }
    if (!first) out += ',';
    first = false;
    if (!array) out += dump(J(it.key())) + ":";
    render_excerpt(*it, depth_left - 1, out);
  }
  out += array ? ']' : '}';
}

template <typename J>
std::string excerpt(const J& value) {
  std::string s;
  render_excerpt(value, kExcerptDepth, s);
  if (s.size() > kExcerptChars) s = s.substr(0, kExcerptChars - 3) + "...";
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
