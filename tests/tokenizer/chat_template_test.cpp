// Chat templates against the Python oracles (scripts/oracles/chat_template_cases.py):
//  - golden: real Qwen3 and Llama 3 templates rendered by transformers' apply_chat_template
//    for many conversations; furlong's output must be byte-identical;
//  - jinja: small templates covering every supported construct, rendered by jinja2 in the
//    environment transformers builds; byte-identical output, and an error where jinja2 errs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "core/error.h"
#include "core/files.h"
#include "tokenizer/jinja/chat_template.h"

namespace furlong::tokenizer {
namespace {

using OJson = nlohmann::ordered_json;

OJson run_oracle(const std::vector<std::string>& args) {
  auto out = testing::scratch_dir() / "oracle.json";
  std::vector<std::string> full = args;
  full.push_back("--out");
  full.push_back(out.string());
  testing::run_python("oracles/chat_template_cases.py", full);
  return OJson::parse(read_file(out));
}

// Shows where two strings first differ, with escapes, for readable failures.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto window = [&](const std::string& s) {
    size_t from = i > 20 ? i - 20 : 0;
    return OJson(s.substr(from, 60)).dump(-1, ' ', false, OJson::error_handler_t::replace);
  };
  return "first difference at byte " + std::to_string(i) + ": got " + window(got) + " want " +
         window(want);
}

TEST(ChatTemplateOracle, JinjaSemanticsMatchJinja2) {
  OJson cases = run_oracle({"jinja"});
  ASSERT_GT(cases.size(), 100u);
  size_t checked = 0;
  for (const auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    SCOPED_TRACE("case " + name + ": " + c["template"].get<std::string>());
    if (c.contains("error")) {
      EXPECT_THROW(
          {
            auto t = ChatTemplate::parse(c["template"].get<std::string>(), name);
            t.render(c["context"]);
          },
          furlong::Error)
          << "jinja2 raised " << c["error"].get<std::string>();
      ++checked;
      continue;
    }
    std::string want = c["expected"].get<std::string>();
    try {
      auto t = ChatTemplate::parse(c["template"].get<std::string>(), name);
      std::string got = t.render(c["context"]);
      EXPECT_EQ(got, want) << first_difference(got, want);
    } catch (const furlong::Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
    ++checked;
  }
  EXPECT_EQ(checked, cases.size());
}

TEST(ChatTemplateOracle, RealTemplatesMatchTransformers) {
  auto root = testing::source_dir() / ".cache" / "tokenizers";
  OJson cases = run_oracle({"golden", "--tokenizers", root.string()});
  ASSERT_GT(cases.size(), 40u);
  std::map<std::string, std::unique_ptr<ChatFormatter>> formatters;
  for (const auto& c : cases) {
    std::string tok = c["tokenizer"].get<std::string>();
    SCOPED_TRACE(tok + " / " + c["name"].get<std::string>() +
                 (c["add_generation_prompt"].get<bool>() ? " / add_generation_prompt" : ""));
    auto& formatter = formatters[tok];
    if (!formatter) formatter = std::make_unique<ChatFormatter>(testing::tokenizer_dir(tok));
    std::string want = c["expected"].get<std::string>();
    std::string got =
        formatter->apply(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra"]);
    EXPECT_EQ(got, want) << first_difference(got, want);
  }
}

TEST(ChatTemplate, ApplyChatTemplateFreeFunction) {
  OJson messages = OJson::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(apply_chat_template(testing::tokenizer_dir("qwen3"), messages, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(testing::tokenizer_dir("llama3"), messages, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, SpecialTokensAreThoseTransformersPasses) {
  ChatFormatter qwen(testing::tokenizer_dir("qwen3"));
  EXPECT_EQ(qwen.special_tokens(),
            OJson({{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}}));
  ChatFormatter llama(testing::tokenizer_dir("llama3"));
  EXPECT_EQ(llama.special_tokens(),
            OJson({{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}}));
}

TEST(ChatTemplate, KeyOrderOfToolArgumentsIsPreserved) {
  OJson messages = OJson::parse(R"([
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"function": {"name": "f", "arguments": {"zeta": 1, "alpha": [2.0, null]}}}]}])");
  std::string out = apply_chat_template(testing::tokenizer_dir("qwen3"), messages, false);
  EXPECT_NE(out.find(R"({"name": "f", "arguments": {"zeta": 1, "alpha": [2.0, null]}})"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace furlong::tokenizer
