// Chat-template errors: constructs outside the subset, syntax errors and runtime failures are
// furlong::Error messages that name the construct and its origin:line:column; render limits
// stop runaway templates; tokenizer directories are loaded as transformers loads them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "core/error.h"
#include "tokenizer/jinja/chat_template.h"

namespace furlong::tokenizer {
namespace {

using OJson = nlohmann::ordered_json;
const char* kOrigin = "tokenizer_config.json:chat_template";

// The message of the furlong::Error that parsing + rendering `source` throws.
std::string error_of(const std::string& source, const OJson& context = OJson::object(),
                     const ChatTemplateLimits& limits = {}) {
  try {
    ChatTemplate::parse(source, kOrigin).render(context, limits);
  } catch (const furlong::Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string render(const std::string& source, const OJson& context = OJson::object()) {
  return ChatTemplate::parse(source, kOrigin).render(context);
}

void expect_error(const std::string& source, const std::string& expected,
                  const OJson& context = OJson::object()) {
  std::string msg = error_of(source, context);
  EXPECT_NE(msg.find(expected), std::string::npos)
      << "template: " << source << "\nmessage: " << msg;
}

TEST(ChatTemplateErrors, UnsupportedConstructsNameThemselvesAndTheirLocation) {
  expect_error("line one\n{{ x | wordwrap(10) }}",
               "tokenizer_config.json:chat_template:2:8: unsupported filter 'wordwrap'");
  expect_error("{{ x|truncate }}", ":1:6: unsupported filter 'truncate'");
  expect_error("{% if x is escaped %}{% endif %}", ":1:12: unsupported test 'escaped'");
  expect_error("{% extends 'base.html' %}", ":1:4: unsupported tag 'extends'");
  expect_error("\n  {% include 'x' %}", ":2:6: unsupported tag 'include'");
  expect_error("{% block body %}{% endblock %}", "unsupported tag 'block'");
  expect_error("{% do x.append(1) %}", "unsupported tag 'do'");
  expect_error("{% frobnicate %}", ":1:4: unsupported tag 'frobnicate'");
  expect_error("{% for x in xs recursive %}{% endfor %}", "unsupported: recursive for loops");
  expect_error("{{ f(*args) }}", "unsupported: *args/**kwargs in calls");
  expect_error("{{ 'a'.zfill(3) }}", "unsupported method str.zfill()");
  expect_error("{{ cycler(1, 2) }}", "unsupported global function 'cycler'");
  expect_error("{{ '%(x)s' % {'x': 1} }}", "unsupported format conversion");
}

TEST(ChatTemplateErrors, SyntaxErrorsHaveLocations) {
  expect_error("{% if x %}\nno end",
               ":2:7: unexpected end of template; the 'if' block opened at "
               "line 1, column 4 is never closed");
  expect_error("{% endif %}", ":1:4: unexpected tag 'endif'");
  expect_error("{% for x in xs %}{% endif %}", "unexpected tag 'endif'");
  expect_error("{{ }}", ":1:4: expected an expression, got '}}'");
  expect_error("{{ 1 ! 2 }}", ":1:6: unexpected character '!'");
  expect_error("{{ (1 }}", ":1:7: unexpected '}', expected ')'");
  expect_error("{{ 'abc }}", ":1:4: unterminated string literal");
  expect_error("{{ 'x' ", "tag is missing its '}}'");
  expect_error("ok\n{# never closed", ":2:1: missing end of comment tag");
  expect_error("{% raw %}x", "missing end of raw block");
  expect_error("{{ '\\x4' }}", "invalid string literal: truncated \\x escape");
  expect_error("{% break %}", ":1:4: 'break' outside of a loop");
  expect_error("{% set 1 = 2 %}", "can't assign to integer 1");
  expect_error("{% set true = 2 %}", "can't assign to constant 'true'");
  expect_error("{% macro m(a=1, b) %}{% endmacro %}",
               "non-default argument follows default argument");
  expect_error("{{ x is defined is defined }}", "cannot chain multiple tests with 'is'");
  expect_error("{{ 99999999999999999999 }}", "integer literal too large");
}

TEST(ChatTemplateErrors, RuntimeErrorsHaveLocations) {
  expect_error("{{ raise_exception('Only user and assistant roles are supported!') }}",
               "tokenizer_config.json:chat_template:1:4: raise_exception: Only user and "
               "assistant roles are supported!");
  expect_error("ok\n  {{ missing.attr }}", ":2:13: UndefinedError: 'missing' is undefined");
  expect_error("{{ m[0].role }}", "UndefinedError: 'list object' has no element 0",
               OJson{{"m", OJson::array()}});
  expect_error("{{ 'a' + 1 }}", "TypeError: unsupported operand type(s) for +: 'str' and 'int'");
  expect_error("{{ 1 // 0 }}", "ZeroDivisionError");
  expect_error("{% for x in 5 %}{% endfor %}", ":1:4: TypeError: 'int' object is not iterable");
  expect_error("{% for a, b in [[1]] %}{% endfor %}",
               "not enough values to unpack (expected 2, got 1)");
  expect_error("{{ x|tojson }}", "TypeError: Object of type Undefined is not JSON serializable");
  expect_error("{% set d.x = 1 %}", "cannot assign attribute on non-namespace object 'd'",
               OJson{{"d", OJson::object()}});
  expect_error("{% set ns = namespace() %}{% set ns._p = 1 %}", "underscore-prefixed attributes");
  expect_error("{{ range(100001)|length }}", "Range too big");
  expect_error("{{ 2 ** 64 }}", "OverflowError");
  expect_error("{{ [].append(1) }}", "access to attribute 'append' of 'list' object is unsafe");
  expect_error("{{ 'x' * 1000000000000 }}", "MemoryError");
}

TEST(ChatTemplateErrors, LimitsStopRunawayTemplates) {
  ChatTemplateLimits limits;
  limits.max_steps = 100000;
  std::string msg =
      error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
               OJson::object(), limits);
  EXPECT_NE(msg.find("evaluation steps"), std::string::npos) << msg;

  limits = {};
  limits.max_output_bytes = 1000;
  msg = error_of("{% for a in range(1000) %}xxxxxxxxxx{% endfor %}", OJson::object(), limits);
  EXPECT_NE(msg.find("output exceeds 1000 bytes"), std::string::npos) << msg;

  msg = error_of("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_NE(msg.find("macro calls nested deeper than 200"), std::string::npos) << msg;

  msg = error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  EXPECT_NE(msg.find("template nesting is too deep"), std::string::npos) << msg;
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  msg = error_of(chain + " }}");
  EXPECT_NE(msg.find("template nesting is too deep"), std::string::npos) << msg;
  std::string negations =
      "{% macro r(n) %}{{ " + std::string(300, '-') + "r(n + 1) }}{% endmacro %}{{ r(0) }}";
  msg = error_of(negations);
  EXPECT_NE(msg.find("evaluation nested deeper than"), std::string::npos) << msg;
  // Values that would need unbounded memory or recursion: a DAG that serializes to 2^30
  // leaves, a 1000-deep list, a namespace that contains itself.
  msg = error_of(
      "{% set ns = namespace(d={}) %}{% for i in range(30) %}{% set ns.d = {'a': ns.d, 'b': "
      "ns.d} %}{% endfor %}{{ ns.d|tojson }}");
  EXPECT_NE(msg.find("MemoryError: string longer than"), std::string::npos) << msg;
  msg = error_of(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
      "{% endfor %}");
  EXPECT_NE(msg.find("value nesting is too deep"), std::string::npos) << msg;
  msg = error_of("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}");
  EXPECT_NE(msg.find("RecursionError"), std::string::npos) << msg;
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me|length }}"), "1");

  std::string nested;
  for (int i = 0; i < 2000; ++i) nested += "{% if true %}";
  msg = error_of(nested);
  EXPECT_NE(msg.find("template nesting is too deep"), std::string::npos) << msg;
}

TEST(ChatTemplate, RendersStrftimeNowAndGenerationBlocks) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string year = std::to_string(1900 + local.tm_year);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), year);
  EXPECT_EQ(render("{% generation %}{{ 1 + 1 }}{% endgeneration %}"), "2");
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  EXPECT_THROW(render("x", OJson::array()), furlong::Error);
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(ChatFormatter, NamedTemplatesAndAddedTokenObjects) {
  auto dir = testing::scratch_dir() / "tok";
  OJson config = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}}},
                  {"eos_token", "</s>"},
                  {"unk_token", nullptr},
                  {"image_token", "<img>"},
                  {"add_bos_token", true},
                  {"chat_template",
                   OJson::array({{{"name", "default"},
                                  {"template", "D{{ bos_token }}{{ eos_token }}{{ image_token }}"}},
                                 {{"name", "tool_use"}, {"template", "T{{ tools|length }}"}}})}};
  write(dir / "tokenizer_config.json", config.dump());
  ChatFormatter formatter(dir);
  OJson messages = OJson::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(formatter.apply(messages, false), "D<s></s><img>");
  EXPECT_EQ(formatter.apply(messages, false, {{"tools", OJson::array({OJson::object()})}}), "T1");
  EXPECT_EQ(formatter.apply(messages, false, {{"eos_token", "override"}}), "D<s>override<img>");
  EXPECT_EQ(ChatTemplate::from_tokenizer_dir(dir).render({{"bos_token", "b"}}), "Db");

  // chat_template.jinja takes priority over tokenizer_config.json (transformers 5).
  write(dir / "chat_template.jinja", "file {{ messages|length }}\n");
  EXPECT_EQ(ChatFormatter(dir).apply(messages, false), "file 1");
}

TEST(ChatFormatter, MessagesAreNormalizedLikeTransformers) {
  auto dir = testing::scratch_dir() / "tok";
  write(dir / "tokenizer_config.json",
        OJson({{"chat_template", "{% for m in messages %}{{ m|tojson }};{% endfor %}"}}).dump());
  ChatFormatter formatter(dir);
  OJson messages = OJson::parse(R"([
    {"role": "assistant", "content": "a", "reasoning": "r1", "tool_calls": null},
    {"role": "assistant", "thinking": "t2", "content": "b"}])");
  EXPECT_EQ(
      formatter.apply(messages, false),
      R"({"thinking": "r1", "role": "assistant", "content": "a", "reasoning": "r1", "reasoning_content": "r1"};)"
      R"({"thinking": "t2", "role": "assistant", "content": "b", "reasoning_content": "t2"};)");
  EXPECT_THROW(formatter.apply(OJson::array(), false), furlong::Error);
  EXPECT_THROW(formatter.apply(OJson::array({"not an object"}), false), furlong::Error);
  EXPECT_THROW(formatter.apply(messages, false, {{"messages", 1}}), furlong::Error);
  EXPECT_THROW(formatter.apply(messages, false, {{"tools", "not a list"}}), furlong::Error);
}

TEST(ChatFormatter, MissingTemplateIsAClearError) {
  auto dir = testing::scratch_dir() / "tok";
  write(dir / "tokenizer_config.json", "{}");
  try {
    ChatFormatter formatter(dir);
    ADD_FAILURE() << "no error";
  } catch (const furlong::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace furlong::tokenizer
