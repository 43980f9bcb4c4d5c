// The strict Qwen3 tool-call parser (data/tool_calls.h): well-formed turns parse into calls with
// their arguments in the model's key order; every deviation from the template's format is
// malformed with a reason.
#include "data/tool_calls.h"

#include <gtest/gtest.h>

namespace furlong::data {
namespace {

TEST(ToolCalls, PlainTextHasNoCalls) {
  auto t = parse_tool_calls("The answer is 42.");
  EXPECT_FALSE(t.malformed());
  EXPECT_TRUE(t.calls.empty());
  EXPECT_EQ(t.content, "The answer is 42.");
}

TEST(ToolCalls, OneCallAfterContent) {
  auto t = parse_tool_calls(
      "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
      "\"123*456\", \"a\": 1}}\n</tool_call>");
  ASSERT_FALSE(t.malformed()) << t.error;
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.content, "Let me compute.\n");
  EXPECT_EQ(t.calls[0].name, "calculator");
  EXPECT_EQ(t.calls[0].arguments.dump(), R"({"expression":"123*456","a":1})");  // key order kept
  EXPECT_EQ(tool_calls_json(t.calls).dump(),
            R"([{"name":"calculator","arguments":{"expression":"123*456","a":1}}])");
}

TEST(ToolCalls, SeveralCallsSeparatedByWhitespace) {
  const std::string call_a = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
  const std::string call_b =
      "<tool_call>\n{\"arguments\": {\"k\": [1]}, \"name\": \"b\"}\n</tool_call>";
  auto t = parse_tool_calls(call_a + "\n" + call_b + "\n");
  ASSERT_FALSE(t.malformed()) << t.error;
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.content, "");
  EXPECT_EQ(t.calls[0].name, "a");
  EXPECT_EQ(t.calls[1].name, "b");
  EXPECT_EQ(t.calls[1].arguments.dump(), R"({"k":[1]})");
}

struct Bad {
  const char* text;
  const char* reason;  // a part of the error
};

TEST(ToolCalls, MalformedTurnsSayWhy) {
  const Bad cases[] = {
      {"<tool_call>{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", "followed by a newline"},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}</tool_call>", "must start a line"},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n", "not closed"},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}\n</tool_call>", "not valid JSON"},
      {"<tool_call>\n[1, 2]\n</tool_call>", "must be a JSON object"},
      {"<tool_call>\n{\"arguments\": {}}\n</tool_call>", "needs \"name\""},
      {"<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>", "needs \"name\""},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": \"{}\"}\n</tool_call>",
       "needs \"arguments\""},
      {"<tool_call>\n{\"name\": \"a\"}\n</tool_call>", "needs \"arguments\""},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}, \"id\": 1}\n</tool_call>",
       "unexpected key 'id'"},
      {"<tool_call>\n<tool_call>\n{}\n</tool_call>", "holds another"},
      {"done </tool_call>", "without an opening"},
      {"</tool_call> <tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>",
       "before the first"},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call> and more text",
       "calls must end the turn"},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n</tool_call>",
       "without an opening"},
      {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}} trailing\n</tool_call>",
       "not valid JSON"},
  };
  for (const auto& c : cases) {
    auto t = parse_tool_calls(c.text);
    EXPECT_TRUE(t.malformed()) << c.text;
    EXPECT_TRUE(t.calls.empty()) << c.text;
    EXPECT_NE(t.error.find(c.reason), std::string::npos) << c.text << " -> " << t.error;
  }
}

}  // namespace
}  // namespace furlong::data
