// Robustness: seeded random mutations of the real chat templates, and random token soup, must
// either render or throw furlong::Error -- never crash, hang or throw anything else. Each run
// is bounded in time (a few seconds) and uses small render limits.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "common/test_util.h"
#include "core/error.h"
#include "core/files.h"
#include "tokenizer/jinja/chat_template.h"

namespace furlong::tokenizer {
namespace {

using OJson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

const char* const kSnippets[] = {
    "{%",
    "%}",
    "{{",
    "}}",
    "{#",
    "#}",
    "-",
    "+",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "'",
    "\"",
    "\\",
    "\n",
    " ",
    "if ",
    "elif ",
    "else",
    "endif",
    "for ",
    "endfor",
    " in ",
    "not ",
    " and ",
    " or ",
    "loop.index0",
    "loop.last",
    "loop.previtem",
    "messages",
    "messages[::-1]",
    "message.content",
    "|tojson",
    "|tojson(indent=2)",
    "|length",
    "|trim",
    "|join(',')",
    "|map(attribute='role')",
    "|selectattr('role')",
    "|default('x')",
    "|int",
    "|list",
    "|first",
    "|items",
    "is defined",
    "is string",
    "is none",
    "is divisibleby 0",
    "set ns.x = ",
    "namespace(a=1)",
    "range(99999)",
    "range(3)",
    "**",
    "//",
    "%",
    "~",
    "==",
    "!=",
    "<=",
    ".split('</think>')",
    ".strip('\\n')",
    "[1:-1]",
    "[-1]",
    "macro m(a)",
    "endmacro",
    "m(1)",
    "call m(2)",
    "endcall",
    "caller()",
    "raw",
    "endraw",
    "break",
    "continue",
    "set x",
    "endset",
    "filter upper",
    "endfilter",
    "with a=1",
    "endwith",
    "generation",
    "endgeneration",
    "raise_exception('boom')",
    "strftime_now('%d')",
    "none",
    "True",
    "1e400",
    "0x",
    "'\\u00e9'",
    "\xff",
    "\xc3",
    "é",
    "🤖",
    "recursive",
    "print 1",
    "dict(a=1)",
    "'%s' % (1,)",
    "x if y else z",
    "(1,)",
    ",",
    ":",
    "=",
    ".",
    "|",
    "is",
    "tools",
    "enable_thinking",
    "add_generation_prompt",
    "2 ** 62 * 4",
};

std::string template_of(const std::string& name) {
  OJson config = OJson::parse(read_file(testing::tokenizer_dir(name) / "tokenizer_config.json"));
  return config["chat_template"].get<std::string>();
}

OJson fuzz_context() {
  return OJson::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": "hi <tool_response>x</tool_response>"},
      {"role": "assistant", "content": "<think>\nr\n</think>\n\nok", "reasoning_content": "r",
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
                      {"name": "g", "arguments": "{\"b\": 2}"}]},
      {"role": "tool", "content": "out"},
      {"role": "user", "content": "é🤖"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>"})");
}

class Fuzzer {
 public:
  explicit Fuzzer(uint32_t seed) : rng_(seed) {}

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  std::string snippet() { return kSnippets[pick(std::size(kSnippets))]; }

  std::string mutate(std::string text) {
    int edits = 1 + static_cast<int>(pick(4));
    for (int e = 0; e < edits; ++e) {
      size_t pos = text.empty() ? 0 : pick(text.size() + 1);
      size_t len = text.empty()
                       ? 0
                       : pick(std::min<size_t>(40, text.size() - std::min(pos, text.size())) + 1);
      switch (pick(5)) {
        case 0:
          text.erase(pos, len);
          break;
        case 1:
          text.insert(pos, snippet());
          break;
        case 2:
          text.insert(pos, text.substr(pos, len));
          break;
        case 3:
          if (pos < text.size()) text[pos] = static_cast<char>(pick(256));
          break;
        default: {
          size_t other = text.empty() ? 0 : pick(text.size());
          std::string piece = text.substr(other, len);
          text.replace(pos, std::min(len, text.size() - std::min(pos, text.size())), piece);
        }
      }
    }
    return text;
  }

  std::string soup() {
    std::string text;
    size_t n = 1 + pick(40);
    for (size_t i = 0; i < n; ++i) text += snippet();
    return text;
  }

 private:
  std::mt19937 rng_;
};

struct Stats {
  int runs = 0, parsed = 0, rendered = 0;
};

// Parses and renders; any exception other than furlong::Error fails the test.
void try_template(const std::string& source, const OJson& context, Stats& stats) {
  ChatTemplateLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  limits.max_call_depth = 50;
  ++stats.runs;
  try {
    auto t = ChatTemplate::parse(source, "fuzz");
    ++stats.parsed;
    t.render(context, limits);
    ++stats.rendered;
  } catch (const furlong::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("fuzz", 0), 0u) << "error without origin: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-furlong exception " << e.what() << " for template:\n" << source;
  }
}

void run_for(std::chrono::milliseconds budget, const std::function<void()>& one) {
  auto end = Clock::now() + budget;
  while (Clock::now() < end) one();
}

TEST(ChatTemplateFuzz, MutatedRealTemplatesNeverCrash) {
  std::vector<std::string> bases = {template_of("qwen3"), template_of("llama3")};
  OJson context = fuzz_context();
  Fuzzer fuzzer(20240611);
  Stats stats;
  run_for(std::chrono::milliseconds(4000), [&] {
    std::string text = bases[fuzzer.pick(bases.size())];
    int rounds = 1 + static_cast<int>(fuzzer.pick(3));
    for (int r = 0; r < rounds; ++r) text = fuzzer.mutate(std::move(text));
    try_template(text, context, stats);
  });
  std::cout << "mutants: " << stats.runs << " parsed: " << stats.parsed
            << " rendered: " << stats.rendered << "\n";
  EXPECT_GT(stats.runs, 100);
  EXPECT_GT(stats.rendered, 0);
}

TEST(ChatTemplateFuzz, TokenSoupNeverCrashes) {
  OJson context = fuzz_context();
  Fuzzer fuzzer(7);
  Stats stats;
  run_for(std::chrono::milliseconds(2500), [&] {
    std::string text = fuzzer.soup();
    try_template(text, context, stats);
    try_template("{{ " + text + " }}", context, stats);
    try_template("{% if " + text + " %}x{% endif %}", context, stats);
  });
  std::cout << "soups: " << stats.runs << " parsed: " << stats.parsed
            << " rendered: " << stats.rendered << "\n";
  EXPECT_GT(stats.runs, 100);
}

}  // namespace
}  // namespace furlong::tokenizer
