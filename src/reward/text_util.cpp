#include "reward/text_util.h"

#include <cctype>
#include <cstdlib>

namespace furlong::reward {

bool is_py_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::string remove_strings(std::string_view text, const std::vector<std::string>& strings) {
  bool first_byte[256] = {};
  for (const auto& s : strings) {
    if (!s.empty()) first_byte[static_cast<unsigned char>(s[0])] = true;
  }
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t match = 0;
    if (first_byte[static_cast<unsigned char>(text[i])]) {
      for (const auto& s : strings) {
        if (s.size() > match && text.compare(i, s.size(), s) == 0) match = s.size();
      }
    }
    if (match == 0) out += text[i++];
    i += match;
  }
  return out;
}

std::vector<std::string> py_split(std::string_view text, std::string_view sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(sep, pos);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(text.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  parts.emplace_back(text.substr(pos));
  return parts;
}

std::vector<std::string> py_split_whitespace(std::string_view text) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_py_space(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !is_py_space(text[i])) ++i;
    if (i > start) parts.emplace_back(text.substr(start, i - start));
  }
  return parts;
}

std::string py_strip(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && is_py_space(text[b])) ++b;
  while (e > b && is_py_space(text[e - 1])) --e;
  return std::string(text.substr(b, e - b));
}

namespace {
// Digits with single underscores between them (Python numeric literal grouping).
size_t scan_digits(std::string_view s, size_t i, std::string& out) {
  size_t start = i;
  while (i < s.size()) {
    if (is_digit(s[i])) {
      out += s[i++];
    } else if (s[i] == '_' && i > start && i + 1 < s.size() && is_digit(s[i + 1]) &&
               is_digit(s[i - 1])) {
      ++i;
    } else {
      break;
    }
  }
  return i;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}
}  // namespace

std::optional<double> parse_python_float(std::string_view text) {
  std::string s = py_strip(text);
  std::string_view v(s);
  std::string clean;
  size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) clean += v[i++];
  std::string_view word = v.substr(i);
  if (iequals(word, "inf") || iequals(word, "infinity")) return clean == "-" ? -HUGE_VAL : HUGE_VAL;
  if (iequals(word, "nan")) return std::nan("");
  size_t int_start = clean.size();
  i = scan_digits(v, i, clean);
  size_t int_digits = clean.size() - int_start;
  size_t frac_digits = 0;
  if (i < v.size() && v[i] == '.') {
    clean += v[i++];
    size_t before = clean.size();
    i = scan_digits(v, i, clean);
    frac_digits = clean.size() - before;
  }
  if (int_digits + frac_digits == 0) return std::nullopt;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    clean += v[i++];
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) clean += v[i++];
    size_t before = clean.size();
    i = scan_digits(v, i, clean);
    if (clean.size() == before) return std::nullopt;
  }
  if (i != v.size()) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

std::string strip_formatted_commas(std::string_view text) {
  std::string s(text);
  while (true) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
      bool match = i + 4 < s.size() && is_digit(s[i]) && s[i + 1] == ',' && is_digit(s[i + 2]) &&
                   is_digit(s[i + 3]) && is_digit(s[i + 4]);
      if (match) {
        size_t after = i + 5;
        if (after == s.size()) {
          out += s[i];
          out.append(s, i + 2, 3);
          i = after;
          continue;
        }
        if (!is_digit(s[after])) {
          out += s[i];
          out.append(s, i + 2, 3);
          out += s[after];
          i = after + 1;
          continue;
        }
      }
      out += s[i++];
    }
    if (out == s) return out;
    s = std::move(out);
  }
}

}  // namespace furlong::reward
