#include "reward/text_rewards.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>

#include "reward/text_util.h"

namespace furlong::reward {
namespace {

// re.sub(pattern, repl, text) with ECMAScript regexes; inputs are short (the dapo window).
// libstdc++'s regex matcher recurses per character: texts longer than this (never a real answer)
// skip the regex steps instead of risking the stack.
constexpr size_t kMaxRegexText = 4096;

std::string regex_sub(const std::string& text, const char* pattern, const char* replacement) {
  if (text.size() > kMaxRegexText) return text;
  static thread_local std::map<const char*, std::regex> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, std::regex(pattern)).first;
  return std::regex_replace(text, it->second, replacement);
}

bool all_ascii_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}

// The last match of (?i)Answer\s*:\s*([^\n]+) (non-overlapping, left to right), or "[INVALID]".
std::string last_answer_line(const std::string& text) {
  static const std::regex pattern("answer\\s*:\\s*([^\\n]+)", std::regex::icase);
  std::string last = "[INVALID]";
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str();
  }
  return last;
}

// The last `max_chars` characters (code points) of UTF-8 text, as Python's s[-300:].
std::string_view last_characters(std::string_view text, size_t max_chars) {
  size_t chars = 0, i = text.size();
  while (i > 0 && chars < max_chars) {
    --i;
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++chars;
  }
  return text.substr(i);
}

}  // namespace

std::string dapo_normalize_answer(std::string_view answer) {
  static const std::pair<const char*, const char*> kSubstitutions[] = {
      {"an ", ""},          {"a ", ""},
      {".$", "$"},          {"\\$", ""},
      {"\\ ", ""},          {" ", ""},
      {"mbox", "text"},     {",\\text{and}", ","},
      {"\\text{and}", ","}, {"\\text{m}", "\\text{}"}};
  static const char* const kRemoved[] = {
      "square",     "ways",       "integers",  "dollars",      "mph",
      "inches",     "hours",      "km",        "units",        "\\ldots",
      "sue",        "points",     "feet",      "minutes",      "digits",
      "cents",      "degrees",    "cm",        "gm",           "pounds",
      "meters",     "meals",      "edges",     "students",     "childrentickets",
      "multiples",  "\\text{s}",  "\\text{.}", "\\text{\ns}",  "\\text{}^2",
      "\\text{}^3", "\\text{\n}", "\\text{}",  "\\mathrm{th}", "^\\circ",
      "^{\\circ}",  "\\;",        ",\\!",      "{,}",          "\"",
      "\\dots"};
  std::string s = py_split(answer, "=").back();
  for (const auto& [before, after] : kSubstitutions) s = replace_all(s, before, after);
  for (const char* expr : kRemoved) s = replace_all(s, expr, "");
  s = regex_sub(s, "(.*?)(\\$)(.*?)(\\$)(.*)", "$$$3$$");
  s = regex_sub(s, "(\\\\text\\{)(.*?)(\\})", "$2");
  s = regex_sub(s, "(\\\\textbf\\{)(.*?)(\\})", "$2");
  s = regex_sub(s, "(\\\\overline\\{)(.*?)(\\})", "$2");
  s = regex_sub(s, "(\\\\boxed\\{)(.*)(\\})", "$2");
  s = regex_sub(s, "(frac)([^{])(.)", "frac{$2}{$3}");
  s = regex_sub(s, "(sqrt)([^{])", "sqrt{$2}");
  s = replace_all(s, "$", "");
  if (all_ascii_digits(replace_all(s, ",", ""))) s = replace_all(s, ",", "");
  return py_strip(s);
}

Json dapo_reward(std::string_view response, std::string_view label) {
  std::string window(last_characters(response, 300));
  std::string pred = dapo_normalize_answer(last_answer_line(window));
  std::string truth_text = dapo_normalize_answer(label);
  auto truth = parse_python_float(truth_text);
  FURLONG_CHECK(truth && std::isfinite(*truth), "--rm-type dapo: the label '", label,
                "' is not a number (dapo labels must be integers)");
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.0f", std::trunc(*truth));
  const bool correct = pred == buf;
  return Json{{"score", correct ? 1.0 : -1.0}, {"acc", correct}, {"pred", pred}};
}

std::string squad_normalize(std::string_view text) {
  static const std::string_view kPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  std::string lowered;
  for (char c : text) {
    if (kPunctuation.find(c) != std::string_view::npos) continue;
    lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  // re.sub(r"\b(a|an|the)\b", " ", text): whole words only.
  auto is_word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           (static_cast<unsigned char>(c) & 0x80);
  };
  std::string no_articles;
  size_t i = 0;
  while (i < lowered.size()) {
    bool at_boundary = i == 0 || !is_word(lowered[i - 1]);
    if (at_boundary) {
      bool replaced = false;
      for (std::string_view article : {"the", "an", "a"}) {
        size_t end = i + article.size();
        if (lowered.compare(i, article.size(), article) == 0 &&
            (end == lowered.size() || !is_word(lowered[end]))) {
          no_articles += ' ';
          i = end;
          replaced = true;
          break;
        }
      }
      if (replaced) continue;
    }
    no_articles += lowered[i++];
  }
  std::vector<std::string> words = py_split_whitespace(no_articles);
  std::string out;
  for (size_t w = 0; w < words.size(); ++w) out += (w ? " " : "") + words[w];
  return out;
}

double f1_reward(std::string_view response, std::string_view label) {
  const std::string pred = squad_normalize(response), truth = squad_normalize(label);
  auto special = [](const std::string& s) { return s == "yes" || s == "no" || s == "noanswer"; };
  if ((special(pred) || special(truth)) && pred != truth) return 0.0;
  std::vector<std::string> pred_tokens = py_split_whitespace(pred);
  std::vector<std::string> truth_tokens = py_split_whitespace(truth);
  std::map<std::string, int64_t> truth_counts;
  for (const auto& t : truth_tokens) ++truth_counts[t];
  int64_t same = 0;
  for (const auto& t : pred_tokens) {
    auto it = truth_counts.find(t);
    if (it != truth_counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  double precision = double(same) / double(pred_tokens.size());
  double recall = double(same) / double(truth_tokens.size());
  return 2.0 * precision * recall / (precision + recall);
}

double exact_match_reward(std::string_view response, std::string_view label) {
  return squad_normalize(response) == squad_normalize(label) ? 1.0 : 0.0;
}

}  // namespace furlong::reward
