// SFT conversation rows ({"messages": [...]}, miles' and TRL's format): the token ids equal
// transformers' apply_chat_template(tokenize=True) on the real Qwen3, Llama 3 and (when fetched)
// SmolLM2 tokenizers, and the loss mask is 1 exactly on the assistant turns (content and
// end-of-turn token), against scripts/oracles/sft_conversation.py, which derives the mask in
// token space rather than from text offsets. Also: the turns a mask covers, spelled out; the
// errors of conversations whose turns cannot be located; the rows load_sft_samples accepts.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "core/files.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/sft_data.h"

namespace furlong::train {
namespace {

namespace fs = std::filesystem;
using furlong::testing::error_of;

OrderedJson msg(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

OrderedJson weather_tools() {
  return OrderedJson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather of a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

// Conversations every chat template here renders.
OrderedJson common_cases() {
  OrderedJson skipped = msg("assistant", "Hello!");
  skipped["step_loss_mask"] = 0;
  return OrderedJson::array(
      {{{"name", "single"}, {"messages", {msg("user", "What is 2+2?"), msg("assistant", "4")}}},
       {{"name", "system_multi_turn"},
        {"messages",
         {msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello!"),
          msg("user", "2+2?"), msg("assistant", "4")}}},
       {{"name", "step_loss_mask"},
        {"messages", {msg("user", "Hi"), skipped, msg("user", "2+2?"), msg("assistant", "4")}}},
       {{"name", "trailing_user"},
        {"messages", {msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "Bye")}}},
       {{"name", "unicode"},
        {"messages",
         {msg("user",
              "\xC2\xBF"
              "Cu\xC3\xA1nto es 2+2? \xE6\x97\xA5\xE6\x9C\xAC"),
          msg("assistant", "Es 4 \xF0\x9F\x99\x82")}}}});
}

// Qwen3's template: reasoning, thinking switched off, tool calls.
OrderedJson qwen3_cases() {
  OrderedJson cases = common_cases();
  OrderedJson thought = msg("assistant", "4");
  thought["reasoning_content"] = "Add them.";
  OrderedJson call = msg("assistant", "");
  call["tool_calls"] = OrderedJson::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}])");
  cases.push_back({{"name", "reasoning"}, {"messages", {msg("user", "2+2?"), thought}}});
  cases.push_back(
      {{"name", "reasoning_earlier_turn"},
       {"messages", {msg("user", "2+2?"), thought, msg("user", "3+3?"), msg("assistant", "6")}}});
  cases.push_back({{"name", "no_thinking"},
                   {"kwargs", {{"enable_thinking", false}}},
                   {"messages", {msg("user", "Hi"), msg("assistant", "Hello!")}}});
  cases.push_back({{"name", "no_thinking_multi_turn"},
                   {"kwargs", {{"enable_thinking", false}}},
                   {"messages",
                    {msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "2+2?"),
                     msg("assistant", "4")}}});
  cases.push_back({{"name", "tool_call"},
                   {"tools", weather_tools()},
                   {"messages",
                    {msg("user", "Weather in Oslo?"), call, msg("tool", "{\"temp\": 3}"),
                     msg("assistant", "It is 3 degrees.")}}});
  return cases;
}

OrderedJson context_of(const OrderedJson& c) {
  OrderedJson context = c.value("kwargs", OrderedJson::object());
  if (c.contains("tools")) context["tools"] = c["tools"];
  return context;
}

// Every case through tokenize_conversation against the oracle's ids and mask.
void expect_matches_transformers(const std::string& name, const fs::path& dir,
                                 const OrderedJson& cases) {
  const auto out_dir = testing::cached_oracle(
      "sft_conversation_" + name, "oracles/sft_conversation.py", cases.dump() + dir.string(),
      [&](const fs::path& d) {
        std::ofstream(d / "cases.json") << cases.dump();
        return std::vector<std::string>{"--tokenizer", dir.string(),
                                        "--cases",     (d / "cases.json").string(),
                                        "--out",       (d / "out.json").string()};
      });
  const auto expected = Json::parse(read_file(out_dir / "out.json"));
  const auto tok = tokenizer::Tokenizer::from_directory(dir);
  const tokenizer::ChatFormatter chat(dir);
  ASSERT_EQ(expected.size(), cases.size());
  for (const auto& c : cases) {
    const std::string case_name = c["name"];
    SCOPED_TRACE(name + " " + case_name);
    const auto& want = expected.at(case_name);
    const auto got = tokenize_conversation(c["messages"], context_of(c), chat, tok, case_name);
    EXPECT_EQ(got.ids, want["ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(got.mask, want["mask"].get<std::vector<float>>());
  }
}

TEST(SftConversation, MatchesTransformersOnQwen3) {
  expect_matches_transformers("qwen3", testing::tokenizer_dir("qwen3"), qwen3_cases());
}

TEST(SftConversation, MatchesTransformersOnLlama3) {
  expect_matches_transformers("llama3", testing::tokenizer_dir("llama3"), common_cases());
}

TEST(SftConversation, MatchesTransformersOnSmolLM2) {
  const auto dir = testing::source_dir() / ".cache" / "models" / "smollm2-135m-instruct";
  if (!fs::exists(dir / "tokenizer.json")) GTEST_SKIP() << dir << " not fetched";
  expect_matches_transformers("smollm2", dir, common_cases());
}

const tokenizer::Tokenizer& qwen3() {
  static const auto tok = tokenizer::Tokenizer::from_directory(testing::tokenizer_dir("qwen3"));
  return tok;
}

// The decoded text of each run of masked tokens.
std::vector<std::string> masked_runs(const ConversationTokens& c) {
  std::vector<std::string> runs;
  std::vector<int64_t> run;
  for (size_t i = 0; i <= c.ids.size(); ++i) {
    if (i < c.ids.size() && c.mask[i] == 1.0f) {
      run.push_back(c.ids[i]);
    } else if (!run.empty()) {
      runs.push_back(qwen3().decode(run));
      run.clear();
    }
  }
  return runs;
}

ConversationTokens qwen3_conversation(const OrderedJson& messages,
                                      const OrderedJson& context = OrderedJson::object()) {
  static const tokenizer::ChatFormatter chat(testing::tokenizer_dir("qwen3"));
  return tokenize_conversation(messages, context, chat, qwen3(), "test");
}

TEST(SftConversation, MasksTheAssistantTextThroughItsEndOfTurnToken) {
  const OrderedJson messages = {msg("system", "Be brief."), msg("user", "Hi"),
                                msg("assistant", "Hello!"), msg("user", "2+2?"),
                                msg("assistant", "4")};
  // Qwen3 writes the last turn with an (empty) thinking block: part of what the model generates.
  EXPECT_EQ(masked_runs(qwen3_conversation(messages)),
            (std::vector<std::string>{"Hello!<|im_end|>", "<think>\n\n</think>\n\n4<|im_end|>"}));
  // With thinking off the generation prompt holds the empty block, so the turn is the content.
  const OrderedJson no_thinking = {{"enable_thinking", false}};
  EXPECT_EQ(masked_runs(qwen3_conversation(messages, no_thinking)),
            (std::vector<std::string>{"Hello!<|im_end|>", "4<|im_end|>"}));
}

TEST(SftConversation, ATokenAcrossTheTurnStartIsTrained) {
  // "\n" ending the generation prompt and the content's leading "\n\n" tokenize as one token,
  // which straddles the start of the turn: it belongs to the turn.
  const auto c = qwen3_conversation({msg("user", "Hi"), msg("assistant", "\n\nHello"),
                                     msg("user", "Bye"), msg("assistant", "x")});
  const auto runs = masked_runs(c);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(runs[0].ends_with("\n\nHello<|im_end|>")) << runs[0];
  EXPECT_EQ(runs[0].find("assistant"), std::string::npos) << runs[0];
}

TEST(SftConversation, TurnsThatCannotBeLocatedAreErrors) {
  EXPECT_NE(error_of([] {
              qwen3_conversation({msg("assistant", "Hi"), msg("user", "x")});
            }).find("message 0 is an assistant turn"),
            std::string::npos);
  EXPECT_NE(error_of([] { qwen3_conversation(OrderedJson::array()); }).find("non-empty list"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              qwen3_conversation({{{"content", "x"}}});
            }).find("string \"role\""),
            std::string::npos);

  const auto dir = testing::scratch_dir();
  // No special token ends a turn.
  std::ofstream(dir / "plain.jinja")
      << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
         "{% if add_generation_prompt %}assistant: {% endif %}";
  // The last message is written differently, so the messages before a turn are no prefix.
  std::ofstream(dir / "last.jinja")
      << "{% for m in messages %}{{ m.content }}{% if loop.last %}!{% endif %}<|im_end|>"
         "{% endfor %}";
  const OrderedJson turn = {msg("user", "Hi"), msg("assistant", "Hello")};
  for (const auto& [file, message] :
       {std::pair<std::string, std::string>{"plain.jinja", "writes no special token"},
        {"last.jinja", "differently when later messages follow"}}) {
    const tokenizer::ChatFormatter chat(testing::tokenizer_dir("qwen3"), dir / file);
    const std::string err =
        error_of([&] { tokenize_conversation(turn, OrderedJson::object(), chat, qwen3(), "row"); });
    EXPECT_NE(err.find(message), std::string::npos) << err;
    EXPECT_NE(err.find("assistant message 1"), std::string::npos) << err;
  }
}

// ----- rows -----

fs::path write_rows(const std::vector<OrderedJson>& rows) {
  const auto path = testing::scratch_dir() / "sft.jsonl";
  std::string text;
  for (const auto& r : rows) text += r.dump() + "\n";
  write_file_atomic(path, text);
  return path;
}

SftDataOptions options_for(const fs::path& path, const std::string& input_key) {
  SftDataOptions o;
  o.path = path.string();
  o.input_key = input_key;
  return o;
}

TEST(SftRows, MessagesRowsTrainOnTheAssistantTurns) {
  const OrderedJson messages = {msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "2+2?"),
                                msg("assistant", "4")};
  const auto path = write_rows(
      {{{"messages", messages}}, {{"messages", messages}, {"tools", weather_tools().dump()}}});
  const auto samples =
      load_sft_samples(options_for(path, "messages"), testing::tokenizer_dir("qwen3"));
  ASSERT_EQ(samples.size(), 2u);
  const auto whole = qwen3_conversation(messages);
  const auto s = samples[0];
  EXPECT_EQ(s.tokens, whole.ids);
  // The prompt is everything before the first trained token; the mask covers the rest.
  const auto first = static_cast<size_t>(s.prompt_length());
  EXPECT_EQ(whole.mask[first], 1.0f);
  for (size_t i = 0; i < first; ++i) EXPECT_EQ(whole.mask[i], 0.0f) << i;
  EXPECT_EQ(s.loss_mask, std::vector<float>(whole.mask.begin() + first, whole.mask.end()));
  // The tools (here as a JSON string) reach the template: Qwen3 lists them in a system block.
  const auto with_tools = qwen3_conversation(messages, {{"tools", weather_tools()}});
  EXPECT_EQ(samples[1].tokens, with_tools.ids);
  EXPECT_NE(samples[1].tokens, s.tokens);
}

TEST(SftRows, EveryRowShapeLoadsAndBadRowsNameTheFix) {
  const auto dir = testing::tokenizer_dir("qwen3");
  // A message-list prompt with a response field is the prompt/response shape.
  auto o =
      options_for(write_rows({{{"input", {msg("user", "Hi")}}, {"response", "Hello!"}}}), "input");
  o.apply_chat_template = true;
  const auto pr = load_sft_samples(o, dir);
  ASSERT_EQ(pr.size(), 1u);
  EXPECT_EQ(qwen3().decode(std::vector<int64_t>(pr[0].tokens.end() - pr[0].response_length,
                                                pr[0].tokens.end())),
            "Hello!<|im_end|>");

  const auto messages_row =
      write_rows({{{"messages", {msg("user", "Hi"), msg("assistant", "x")}}}});
  std::string err = error_of([&] { load_sft_samples(options_for(messages_row, "input"), dir); });
  EXPECT_NE(err.find("missing the field 'input'"), std::string::npos) << err;
  EXPECT_NE(err.find("the row has keys: messages"), std::string::npos) << err;

  OrderedJson untrained = msg("assistant", "x");
  untrained["step_loss_mask"] = 0;
  const auto none = write_rows({{{"messages", {msg("user", "Hi"), untrained}}}});
  err = error_of([&] { load_sft_samples(options_for(none, "messages"), dir); });
  EXPECT_NE(err.find("no assistant message to train on"), std::string::npos) << err;
  EXPECT_NE(err.find("sft.jsonl:1"), std::string::npos) << err;
}

}  // namespace
}  // namespace furlong::train
