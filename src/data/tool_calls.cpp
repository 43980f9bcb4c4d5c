#include "data/tool_calls.h"

#include <algorithm>

namespace furlong::data {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kOpenLine = "<tool_call>\n";
constexpr std::string_view kCloseLine = "\n</tool_call>";

bool only_whitespace(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

ParsedTurn malformed(std::string reason) {
  ParsedTurn turn;
  turn.error = std::move(reason);
  return turn;
}

// The call in `body` (the text between "<tool_call>\n" and "\n</tool_call>"); "" on success,
// else why it is malformed.
std::string parse_call(std::string_view body, size_t index, ToolCall& call) {
  const std::string which = "tool call " + std::to_string(index);
  OrderedJson value;
  try {
    value = parse_ordered_json(body, which);
  } catch (const std::exception& e) {
    return which + " is not valid JSON: " + e.what();
  }
  if (!value.is_object()) return which + " must be a JSON object, got " + json_type_name(value);
  for (const auto& [key, unused] : value.items()) {
    if (key != "name" && key != "arguments")
      return which + " has the unexpected key '" + key + "' (only name and arguments)";
  }
  auto name = value.find("name");
  if (name == value.end() || !name->is_string() || name->get<std::string>().empty())
    return which + " needs \"name\": a non-empty string";
  auto arguments = value.find("arguments");
  if (arguments == value.end() || !arguments->is_object())
    return which + " needs \"arguments\": a JSON object";
  call.name = name->get<std::string>();
  call.arguments = *arguments;
  return "";
}

}  // namespace

ParsedTurn parse_tool_calls(std::string_view text) {
  ParsedTurn turn;
  const size_t first_open = text.find(kOpen);
  const size_t first_close = text.find(kClose);
  if (first_open == std::string_view::npos) {
    if (first_close != std::string_view::npos)
      return malformed("\"</tool_call>\" without an opening \"<tool_call>\"");
    turn.content = std::string(text);
    return turn;
  }
  if (first_close < first_open)
    return malformed("\"</tool_call>\" before the first \"<tool_call>\"");
  turn.content = std::string(text.substr(0, first_open));
  size_t pos = first_open;
  while (pos < text.size()) {
    const std::string which = "tool call " + std::to_string(turn.calls.size());
    if (text.substr(pos, kOpenLine.size()) != kOpenLine)
      return malformed(which + ": \"<tool_call>\" must be followed by a newline");
    const size_t body_start = pos + kOpenLine.size();
    const size_t close = text.find(kClose, body_start);
    if (close == std::string_view::npos) return malformed(which + " is not closed");
    const size_t nested = text.find(kOpen, body_start);
    if (nested < close) return malformed(which + " holds another \"<tool_call>\"");
    if (close < body_start + 1 || text[close - 1] != '\n')
      return malformed(which + ": \"</tool_call>\" must start a line");
    const size_t body_end = close + kClose.size() - kCloseLine.size();
    ToolCall call;
    if (auto why =
            parse_call(text.substr(body_start, body_end - body_start), turn.calls.size(), call);
        !why.empty())
      return malformed(why);
    turn.calls.push_back(std::move(call));
    pos = close + kClose.size();
    const size_t next = text.find(kOpen, pos);
    const std::string_view between =
        text.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos);
    if (!only_whitespace(between)) {
      return malformed(between.find(kClose) != std::string_view::npos
                           ? "\"</tool_call>\" without an opening \"<tool_call>\""
                           : "text after " + which + " (calls must end the turn)");
    }
    if (next == std::string_view::npos) break;
    pos = next;
  }
  return turn;
}

OrderedJson tool_calls_json(const std::vector<ToolCall>& calls) {
  OrderedJson out = OrderedJson::array();
  for (const auto& c : calls) out.push_back({{"name", c.name}, {"arguments", c.arguments}});
  return out;
}

}  // namespace furlong::data
