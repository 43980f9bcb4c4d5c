// A strict parser of the tool calls in a model's turn, in the format Qwen3's chat template
// teaches (and renders back for assistant messages with tool_calls):
//
//   <free text (the message content, may be empty)>
//   <tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call>
//   [whitespace] <tool_call>\n{...}\n</tool_call> ...
//
// Rules (anything else is malformed, with a reason): each call is exactly "<tool_call>\n",
// one JSON object, "\n</tool_call>"; the object has exactly the keys "name" (a non-empty
// string) and "arguments" (an object); calls come after the content, separated by whitespace
// only; no "</tool_call>" without an opening tag; no nested or unclosed "<tool_call>". A turn
// without "<tool_call>" or "</tool_call>" has no calls (its text is the content).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"

namespace furlong::data {

struct ToolCall {
  std::string name;
  OrderedJson arguments = OrderedJson::object();  // key order as the model wrote it
};

struct ParsedTurn {
  std::string content;          // the text before the first call (the whole text without calls)
  std::vector<ToolCall> calls;  // in order
  std::string error;            // non-empty: malformed (calls is then empty), says why
  bool malformed() const { return !error.empty(); }
};

// Parses the text of one assistant turn (decoded without special tokens).
ParsedTurn parse_tool_calls(std::string_view text);

// {"name": ..., "arguments": {...}} of each call, as the env protocol and chat templates
// (message.tool_calls[i].function) take them.
OrderedJson tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace furlong::data
