// Lexer for the Jinja subset. The whitespace rules follow jinja2 3.1 with trim_blocks and
// lstrip_blocks on (what transformers' chat-template environment sets):
//  - a "-" after a tag opener strips all whitespace before the tag; a "-" before its closer
//    strips all whitespace after it;
//  - lstrip_blocks: spaces/tabs between a line start and a {% or {# tag are removed, unless
//    the opener is "{%+"; it never applies to {{ }};
//  - trim_blocks: one newline right after %} or #} is removed, unless the closer is "+%}";
//  - a single trailing newline of the template is dropped (keep_trailing_newline=False).
#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "tokenizer/jinja/pystr.h"

namespace furlong::tokenizer::jinja {
namespace {

enum class TagKind { kVariable, kBlock, kComment };

// Source with "\r\n" and "\r" turned into "\n" and one trailing newline dropped.
std::string normalize_source(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Decodes a string literal body the way jinja2 does (Python's unicode-escape codec applied to
// the backslash-replaced text): \n, \t, \xhh, \uhhhh, \Uhhhhhhhh, octal, and unknown escapes
// kept verbatim. Returns false with `error` set on a malformed escape.
bool decode_string_literal(std::string_view body, std::string& out, std::string& error) {
  std::u32string in = pystr::decode(body);
  std::u32string res;
  for (size_t i = 0; i < in.size(); ++i) {
    char32_t c = in[i];
    if (c != '\\' || i + 1 >= in.size()) {
      res.push_back(c);
      continue;
    }
    char32_t d = in[++i];
    switch (d) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        res.push_back(d);
        break;
      case 'a':
        res.push_back(7);
        break;
      case 'b':
        res.push_back(8);
        break;
      case 'f':
        res.push_back(12);
        break;
      case 'n':
        res.push_back(10);
        break;
      case 'r':
        res.push_back(13);
        break;
      case 't':
        res.push_back(9);
        break;
      case 'v':
        res.push_back(11);
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t n = d == 'x' ? 2 : (d == 'u' ? 4 : 8);
        char32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
          if (i + 1 + k >= in.size() || in[i + 1 + k] >= 0x80 ||
              !is_hex(static_cast<char>(in[i + 1 + k]))) {
            error = std::string("truncated \\") + static_cast<char>(d) + " escape";
            return false;
          }
          v = v * 16 + static_cast<char32_t>(std::strtol(
                           std::string(1, static_cast<char>(in[i + 1 + k])).c_str(), nullptr, 16));
        }
        if (v > 0x10FFFF) {
          error = "illegal Unicode character in \\U escape";
          return false;
        }
        i += n;
        res.push_back(v);
        break;
      }
      case 'N':
        error = "\\N{...} escapes are not supported";
        return false;
      default:
        if (d >= '0' && d <= '7') {
          char32_t v = d - '0';
          for (int k = 0; k < 2 && i + 1 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7'; ++k)
            v = v * 8 + (in[++i] - '0');
          res.push_back(v);
        } else {
          res.push_back('\\');
          res.push_back(d);
        }
    }
  }
  out = pystr::encode(res);
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin)
      : src_(normalize_source(source)), origin_(origin) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root_step();
    push(TokenType::kEof, src_.size());
    return std::move(tokens_);
  }

 private:
  std::string src_;
  const std::string& origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last consumed text ended with a newline (or none yet)
  std::vector<char> brackets_;

  Location location(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t start = line_starts_[line - 1];
    auto col = pystr::length(std::string_view(src_).substr(start, pos - start));
    return {static_cast<int>(line), static_cast<int>(col) + 1};
  }

  [[noreturn]] void error(size_t pos, const std::string& message) const {
    throw_at(origin_, location(pos), message);
  }

  Token& push(TokenType type, size_t at, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.loc = location(at);
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }

  bool starts_with(size_t at, std::string_view s) const {
    return src_.compare(at, s.size(), s) == 0;
  }

  // Byte length of the Python-whitespace character at `at`, 0 if none.
  size_t space_at(size_t at) const {
    if (at >= src_.size()) return 0;
    char32_t c = 0;
    size_t n = pystr::code_point_at(src_, at, c);
    return pystr::is_space(c) ? n : 0;
  }

  size_t skip_spaces(size_t at) const {
    while (size_t n = space_at(at)) at += n;
    return at;
  }

  // Emits `text` (which ends at a tag opener) after applying "-" or lstrip_blocks.
  void emit_text_before_tag(std::string text, size_t text_pos, char sign, TagKind kind) {
    if (sign == '-') {
      text = pystr::strip(text, std::nullopt, false, true);
    } else if (sign != '+' && kind != TagKind::kVariable) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
        std::string_view tail = std::string_view(text).substr(l_pos);
        std::string stripped = pystr::strip(tail, std::nullopt, true, false);
        if (stripped.empty()) text.resize(l_pos);
      }
    }
    if (!text.empty()) push(TokenType::kData, text_pos, std::move(text));
  }

  // Finds the next "{{", "{%" or "{#" at or after `from`; npos if none.
  size_t find_tag(size_t from) const {
    while (true) {
      size_t p = src_.find('{', from);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      from = p + 1;
    }
  }

  // If a {% raw %} opener starts at `at`, returns the position after it.
  std::optional<size_t> match_raw_begin(size_t at) const {
    size_t p = at + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(p);
    if (!starts_with(p, "raw")) return std::nullopt;
    p = skip_spaces(p + 3);
    if (starts_with(p, "-%}")) return skip_spaces(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return std::nullopt;
  }

  void lex_root_step() {
    size_t tag = find_tag(pos_);
    if (tag == std::string::npos) {
      push(TokenType::kData, pos_, src_.substr(pos_));
      pos_ = src_.size();
      return;
    }
    char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
    if (sign != '-' && sign != '+') sign = '\0';
    TagKind kind = src_[tag + 1] == '{'   ? TagKind::kVariable
                   : src_[tag + 1] == '%' ? TagKind::kBlock
                                          : TagKind::kComment;
    emit_text_before_tag(src_.substr(pos_, tag - pos_), pos_, sign, kind);
    size_t body = tag + 2 + (sign ? 1 : 0);
    if (kind == TagKind::kBlock) {
      if (auto after = match_raw_begin(tag)) return lex_raw(tag, *after);
    }
    if (kind == TagKind::kComment) return lex_comment(tag, body);
    push(kind == TagKind::kVariable ? TokenType::kVariableBegin : TokenType::kBlockBegin, tag);
    pos_ = body;
    lex_tag(kind == TagKind::kVariable, tag);
  }

  void lex_comment(size_t tag, size_t body) {
    for (size_t p = body; p + 1 < src_.size(); ++p) {
      if (starts_with(p, "+#}")) return finish(p + 3);
      if (starts_with(p, "-#}")) return finish(skip_spaces(p + 3));
      if (starts_with(p, "#}"))
        return finish(p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n' ? 1 : 0));
    }
    error(tag, "missing end of comment tag '#}'");
  }

  // The body of {% raw %} up to {% endraw %} is data.
  void lex_raw(size_t tag, size_t body) {
    pos_ = body;
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t p = body; (p = src_.find("{%", p)) != std::string::npos; ++p) {
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : '\0';
      q = skip_spaces(q + (sign ? 1 : 0));
      if (!starts_with(q, "endraw")) continue;
      q = skip_spaces(q + 6);
      size_t end;
      if (starts_with(q, "+%}")) {
        end = q + 3;
      } else if (starts_with(q, "-%}")) {
        end = skip_spaces(q + 3);
      } else if (starts_with(q, "%}")) {
        end = q + 2 + (q + 2 < src_.size() && src_[q + 2] == '\n' ? 1 : 0);
      } else {
        continue;
      }
      emit_text_before_tag(src_.substr(body, p - body), body, sign, TagKind::kBlock);
      return finish(end);
    }
    error(tag, "missing end of raw block '{% endraw %}'");
  }

  void finish(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  // Tries the tag closer at pos_; true (and consumed) if it is there.
  bool lex_tag_end(bool variable) {
    if (!brackets_.empty()) return false;
    const char* close = variable ? "}}" : "%}";
    if (!variable && starts_with(pos_, "+%}")) {
      push(TokenType::kBlockEnd, pos_);
      finish(pos_ + 3);
      return true;
    }
    if (starts_with(pos_, "-") && starts_with(pos_ + 1, close)) {
      push(variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, pos_);
      finish(skip_spaces(pos_ + 3));
      return true;
    }
    if (starts_with(pos_, close)) {
      push(variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, pos_);
      size_t end = pos_ + 2;
      if (!variable && end < src_.size() && src_[end] == '\n') ++end;
      finish(end);
      return true;
    }
    return false;
  }

  void lex_tag(bool variable, size_t tag) {
    brackets_.clear();
    while (true) {
      if (pos_ >= src_.size())
        error(tag, std::string("unexpected end of template: tag is missing its '") +
                       (variable ? "}}" : "%}") + "'");
      if (lex_tag_end(variable)) return;
      if (size_t n = space_at(pos_)) {
        pos_ = skip_spaces(pos_ + n);
        continue;
      }
      char c = src_[pos_];
      if (c >= '0' && c <= '9') {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else if (!lex_name()) {
        lex_operator();
      }
    }
  }

  bool lex_name() {
    // Identifiers: a letter or '_', then letters, digits or '_' (non-ASCII letters included).
    char32_t first = 0;
    pystr::code_point_at(src_, pos_, first);
    if (first != '_' && !pystr::is_alpha(first)) return false;
    size_t p = pos_;
    while (p < src_.size()) {
      char32_t c = 0;
      size_t n = pystr::code_point_at(src_, p, c);
      if (c != '_' && !pystr::is_alpha(c) && !pystr::is_digit(c)) break;
      p += n;
    }
    push(TokenType::kName, pos_, src_.substr(pos_, p - pos_));
    pos_ = p;
    return true;
  }

  // Digits with single underscores between them ((\d+_)*\d+); returns the end or `at`.
  size_t scan_digits(size_t at) const {
    size_t p = at;
    if (p >= src_.size() || !std::isdigit(static_cast<unsigned char>(src_[p]))) return at;
    while (true) {
      while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' &&
          std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        ++p;
        continue;
      }
      return p;
    }
  }

  // The end of a float literal at pos_, or pos_ if there is none.
  size_t scan_float() const {
    if (pos_ > 0 && src_[pos_ - 1] == '.') return pos_;
    size_t p = scan_digits(pos_);
    auto exponent = [&](size_t q) -> size_t {
      if (q >= src_.size() || (src_[q] != 'e' && src_[q] != 'E')) return 0;
      ++q;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      size_t end = scan_digits(q);
      return end == q ? 0 : end;
    };
    size_t frac_end = 0;
    if (p < src_.size() && src_[p] == '.') {
      size_t f = scan_digits(p + 1);
      if (f != p + 1) frac_end = f;
    }
    if (frac_end) {
      if (size_t e = exponent(frac_end)) return e;
      return frac_end;
    }
    if (size_t e = exponent(p)) return e;
    return pos_;
  }

  void lex_number() {
    size_t start = pos_;
    size_t end = scan_float();
    if (end != start) {
      std::string text;
      for (size_t i = start; i < end; ++i)
        if (src_[i] != '_') text.push_back(src_[i]);
      double value = 0.0;
      auto res = std::from_chars(text.data(), text.data() + text.size(), value);
      if (res.ec == std::errc::result_out_of_range)  // Python: overflow -> inf, underflow -> 0
        value = text.find("e-") != std::string::npos || text.find("E-") != std::string::npos
                    ? 0.0
                    : HUGE_VAL;
      push(TokenType::kFloat, start, text).float_value = value;
      pos_ = end;
      return;
    }
    lex_integer();
  }

  void lex_integer() {
    size_t start = pos_;
    int base = 10;
    size_t p = pos_;
    auto valid = [&](char c) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 16) return is_hex(c);
      return c >= '0' && c <= '9';
    };
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("bBoOxX", src_[p + 1]) &&
        src_[p + 1] != '\0') {
      char k = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[p + 1])));
      base = k == 'b' ? 2 : (k == 'o' ? 8 : 16);
      size_t q = p + 2;
      size_t last = q;
      while (q < src_.size()) {
        size_t r = q + (src_[q] == '_' ? 1 : 0);
        if (r < src_.size() && valid(src_[r])) {
          q = r + 1;
          last = q;
        } else {
          break;
        }
      }
      if (last == p + 2)
        base = 10;  // "0x" with no digits: just the integer 0
      else
        p = last;
    }
    std::string digits;
    if (base == 10) {
      bool zero = src_[p] == '0';
      size_t q = p + 1;
      while (q < src_.size()) {
        size_t r = q + (src_[q] == '_' ? 1 : 0);
        if (r < src_.size() && (zero ? src_[r] == '0' : valid(src_[r])))
          q = r + 1;
        else
          break;
      }
      p = q;
      for (size_t i = start; i < p; ++i)
        if (src_[i] != '_') digits.push_back(src_[i]);
    } else {
      for (size_t i = start + 2; i < p; ++i)
        if (src_[i] != '_') digits.push_back(src_[i]);
    }
    errno = 0;
    unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      error(start, "integer literal too large: " + src_.substr(start, p - start));
    push(TokenType::kInteger, start, src_.substr(start, p - start)).int_value =
        static_cast<int64_t>(v);
    pos_ = p;
  }

  void lex_string() {
    char quote = src_[pos_];
    size_t p = pos_ + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) error(pos_, "unterminated string literal");
    std::string value, err;
    if (!decode_string_literal(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1), value, err))
      error(pos_, "invalid string literal: " + err);
    push(TokenType::kString, pos_, std::move(value));
    pos_ = p + 1;
  }

  void lex_operator() {
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (starts_with(pos_, op)) {
        push(TokenType::kOperator, pos_, op);
        pos_ += 2;
        return;
      }
    }
    char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::string shown =
          pystr::encode(pystr::decode(std::string_view(src_).substr(pos_, 4)).substr(0, 1));
      error(pos_, "unexpected character '" + shown + "'");
    }
    track_brackets(c);
    push(TokenType::kOperator, pos_, std::string(1, c));
    ++pos_;
  }

  void track_brackets(char c) {
    if (c == '(' || c == '[' || c == '{') {
      brackets_.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets_.empty()) error(pos_, std::string("unexpected '") + c + "'");
      if (brackets_.back() != c)
        error(pos_, std::string("unexpected '") + c + "', expected '" + brackets_.back() + "'");
      brackets_.pop_back();
    }
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& origin) {
  return Lexer(source, origin).run();
}

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "'{{'";
    case TokenType::kVariableEnd:
      return "'}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "'%}'";
    case TokenType::kName:
      return "'" + token.text + "'";
    case TokenType::kString:
      return "string literal";
    case TokenType::kInteger:
      return "integer " + token.text;
    case TokenType::kFloat:
      return "float literal";
    case TokenType::kOperator:
      return "'" + token.text + "'";
    case TokenType::kEof:
      return "end of template";
  }
  return "token";
}

}  // namespace furlong::tokenizer::jinja
