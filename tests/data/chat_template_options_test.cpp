// --apply-chat-template-kwargs and --chat-template-path, through the prompt dataset, against
// transformers' apply_chat_template (jinja2; scripts/oracles/chat_template_options.py): extra
// template variables (Qwen3's enable_thinking) reach the template, and a template file replaces
// the tokenizer's own while the special tokens still come from the tokenizer directory.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "core/files.h"
#include "data/prompt_dataset.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::data {
namespace {

namespace fs = std::filesystem;

// Not Qwen3's template: a different layout, a filter, the tokenizer's eos_token, and a branch on
// enable_thinking, so a test passes only if this file (not the tokenizer's) rendered.
constexpr const char* kCustomTemplate =
    "{%- for message in messages %}{{ '### ' + message['role'] | upper + ': ' + "
    "message['content'] | trim + eos_token + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '### ASSISTANT:' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{ ' /no_think' }}{%- endif %}"
    "{%- endif %}";

struct Oracle {
  fs::path template_path;
  OrderedJson cases;
};

const Oracle& oracle() {
  static const Oracle o = [] {
    Oracle x;
    auto dir = testing::cached_oracle("chat_template_options", "oracles/chat_template_options.py",
                                      kCustomTemplate, [](const fs::path& d) {
                                        std::ofstream(d / "custom.jinja") << kCustomTemplate;
                                        return std::vector<std::string>{
                                            "--tokenizer", testing::tokenizer_dir("qwen3").string(),
                                            "--template",  (d / "custom.jinja").string(),
                                            "--out",       (d / "cases.json").string()};
                                      });
    x.template_path = dir / "custom.jinja";
    x.cases = OrderedJson::parse(read_file(dir / "cases.json"));
    return x;
  }();
  return o;
}

const tokenizer::Tokenizer& qwen() {
  static const auto tok = tokenizer::Tokenizer::from_directory(testing::tokenizer_dir("qwen3"));
  return tok;
}

// The text the dataset sends to the engine for one row holding `messages`.
std::string rendered(const OrderedJson& messages, const OrderedJson& kwargs,
                     const tokenizer::ChatFormatter& chat) {
  auto path = testing::scratch_dir() / "prompts.jsonl";
  std::ofstream(path) << OrderedJson{{"input", messages}}.dump() << "\n";
  PromptDataOptions o;
  o.path = path.string();
  o.apply_chat_template = true;
  o.apply_chat_template_kwargs = kwargs;
  return PromptDataset(o, qwen(), &chat).at(0).text;
}

TEST(ChatTemplateOptions, KwargsAndTemplateFileRenderAsTransformers) {
  const auto& o = oracle();
  const tokenizer::ChatFormatter own(testing::tokenizer_dir("qwen3"));
  const tokenizer::ChatFormatter custom(testing::tokenizer_dir("qwen3"), o.template_path);
  ASSERT_EQ(o.cases.size(), 12u);
  for (const auto& c : o.cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto& chat = c["custom_template"].get<bool>() ? custom : own;
    EXPECT_EQ(rendered(c["messages"], c["kwargs"], chat), c["expected"].get<std::string>());
  }
}

TEST(ChatTemplateOptions, EnableThinkingFalseChangesQwen3sGenerationPrompt) {
  // The property the kwargs exist for: Qwen3 with enable_thinking false opens an empty think
  // block; without kwargs it does not. (Guards against kwargs being dropped on the way.)
  const tokenizer::ChatFormatter own(testing::tokenizer_dir("qwen3"));
  OrderedJson messages = OrderedJson::array({{{"role", "user"}, {"content", "hi"}}});
  auto plain = rendered(messages, OrderedJson::object(), own);
  auto no_think = rendered(messages, OrderedJson{{"enable_thinking", false}}, own);
  EXPECT_EQ(no_think, plain + "<think>\n\n</think>\n\n");
}

TEST(ChatTemplateOptions, AMissingTemplateFileIsAnErrorNamingIt) {
  auto msg = testing::error_of([] {
    tokenizer::ChatFormatter f(testing::tokenizer_dir("qwen3"), "/nonexistent/tmpl.jinja");
  });
  EXPECT_NE(msg.find("/nonexistent/tmpl.jinja"), std::string::npos) << msg;
}

}  // namespace
}  // namespace furlong::data
