#include "reward/latex_text.h"

#include <cctype>
#include <map>

#include "reward/text_util.h"

namespace furlong::reward {
namespace {

bool is_letter(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0;
}

bool is_simple_operand(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.') return false;
  }
  return true;
}

std::string wrap_if_needed(const std::string& s) {
  return is_simple_operand(s) ? s : "(" + s + ")";
}

class LatexRenderer {
 public:
  explicit LatexRenderer(std::string_view s) : s_(s) {}

  std::string render_all() {
    std::string out;
    while (pos_ < s_.size()) out += element(/*close=*/'\0');
    return out;
  }

 private:
  static constexpr int kMaxDepth = 100;

  // One element: a macro with its arguments, a {group}, or a character. `close` is the brace
  // that ends the enclosing group (not consumed here).
  std::string element(char close) {
    char c = s_[pos_];
    if (c == '\\') return macro();
    if (c == '{') return group();
    if (c == close) return {};
    ++pos_;
    return std::string(1, c);
  }

  std::string group() {
    ++pos_;  // '{'
    if (++depth_ > kMaxDepth) return raw_rest();
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '}') out += element('}');
    if (pos_ < s_.size()) ++pos_;  // '}' (an unclosed group simply ends with the text)
    --depth_;
    return out;
  }

  std::string raw_rest() {
    std::string rest(s_.substr(pos_));
    pos_ = s_.size();
    return rest;
  }

  void skip_spaces() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }

  // The next argument: a {group}, a macro, or one character; "" at the end.
  std::string argument() {
    skip_spaces();
    if (pos_ >= s_.size()) return {};
    if (s_[pos_] == '{') return group();
    if (s_[pos_] == '\\') return macro();
    return std::string(1, s_[pos_++]);
  }

  std::string optional_argument() {
    skip_spaces();
    if (pos_ >= s_.size() || s_[pos_] != '[') return {};
    size_t end = s_.find(']', pos_);
    if (end == std::string_view::npos) return {};
    std::string inner = LatexRenderer(s_.substr(pos_ + 1, end - pos_ - 1)).render_all();
    pos_ = end + 1;
    return inner;
  }

  std::string macro() {
    ++pos_;  // backslash
    if (pos_ >= s_.size()) return {};
    if (!is_letter(s_[pos_])) {
      char c = s_[pos_++];
      if (c == '%' || c == '$' || c == '{' || c == '}' || c == '#' || c == '&' || c == '_')
        return std::string(1, c);
      if (c == ',' || c == ';' || c == ' ' || c == ':') return " ";
      return {};  // \! and line breaks
    }
    size_t start = pos_;
    while (pos_ < s_.size() && is_letter(s_[pos_])) ++pos_;
    std::string name(s_.substr(start, pos_ - start));
    return expand(name);
  }

  std::string expand(const std::string& name) {
    if (++depth_ > kMaxDepth) return raw_rest();
    std::string out = expand_known(name);
    --depth_;
    return out;
  }

  std::string expand_known(const std::string& name) {
    static const std::map<std::string, std::string> kSymbols = {
        {"pi", "pi"},    {"infty", "inf"}, {"cdot", "*"}, {"times", "*"}, {"div", "/"},
        {"cup", "U"},    {"cap", "n"},     {"pm", "±"},   {"le", "<="},   {"leq", "<="},
        {"ge", ">="},    {"geq", ">="},    {"neq", "!="}, {"ne", "!="},   {"ldots", "..."},
        {"dots", "..."}, {"cdots", "..."}, {"quad", " "}, {"qquad", " "}, {"circ", ""},
        {"degree", ""},  {"prime", "'"}};
    static const char* const kDropped[] = {"left",         "right",     "big",   "Big",
                                           "bigl",         "bigr",      "Bigl",  "Bigr",
                                           "displaystyle", "textstyle", "limits"};
    static const char* const kTextLike[] = {
        "text",         "textbf", "textit", "mathrm", "mathbf", "mathit", "mbox",
        "operatorname", "textrm", "boxed",  "mathbb", "bf",     "rm"};
    if (name == "frac" || name == "dfrac" || name == "tfrac") {
      std::string num = argument(), den = argument();
      return wrap_if_needed(num) + "/" + wrap_if_needed(den);
    }
    if (name == "sqrt") {
      std::string index = optional_argument();
      std::string radicand = argument();
      if (index.empty()) return "sqrt(" + radicand + ")";
      return "(" + radicand + ")^(1/(" + index + "))";
    }
    if (auto it = kSymbols.find(name); it != kSymbols.end()) return it->second;
    for (const char* d : kDropped)
      if (name == d) return {};
    for (const char* t : kTextLike) {
      if (name == t) {
        skip_spaces();
        return pos_ < s_.size() && s_[pos_] == '{' ? group() : std::string();
      }
    }
    return {};  // unknown macro: dropped, its {arguments} render as groups
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string latex_to_text(std::string_view latex) {
  std::string text = replace_all(latex, "\\tfrac", "\\frac");
  text = replace_all(text, "\\dfrac", "\\frac");
  text = replace_all(text, "\\frac", " \\frac");  // keeps "7\frac{3}{4}" a mixed number
  std::string out = LatexRenderer(text).render_all();
  return py_strip(out);
}

}  // namespace furlong::reward
