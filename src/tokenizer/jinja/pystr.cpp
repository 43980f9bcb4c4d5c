// Python str semantics over UTF-8; see pystr.h.
#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/errors.h"

namespace furlong::tokenizer::jinja::pystr {
namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // surrogateescape: invalid byte b -> U+DC00 + b

// Length of a valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t valid_sequence_length(std::string_view s, size_t i, char32_t& cp) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = byte(i);
  size_t n;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Reject overlong forms and values past U+10FFFF.
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  return n;
}

bool in_set(char32_t c, const std::u32string& set) {
  return set.find(c) != std::u32string::npos;
}

// Pairs laid out as (upper, lower) alternating starting at `first` up to `last` inclusive.
bool alternating(char32_t c, char32_t first, char32_t last, bool upper_even) {
  if (c < first || c > last) return false;
  return ((c - first) % 2 == 0) == upper_even;
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    size_t n = valid_sequence_length(s, i, cp);
    if (n == 0) {
      out.push_back(kEscapeBase + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= kEscapeBase + 0x80 && cp <= kEscapeBase + 0xFF) {
    out.push_back(static_cast<char>(cp - kEscapeBase));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

int64_t length(std::string_view s) {
  int64_t n = 0;
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    size_t k = valid_sequence_length(s, i, cp);
    i += k == 0 ? 1 : k;
    ++n;
  }
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (alternating(c, 0x100, 0x12F, false) || alternating(c, 0x132, 0x137, false) ||
      alternating(c, 0x14A, 0x177, false) || alternating(c, 0x460, 0x481, false) ||
      alternating(c, 0x48A, 0x4BF, false))
    return c - 1;
  if (alternating(c, 0x139, 0x148, true) || alternating(c, 0x179, 0x17E, true)) return c - 1;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (alternating(c, 0x100, 0x12F, true) || alternating(c, 0x132, 0x137, true) ||
      alternating(c, 0x14A, 0x177, true) || alternating(c, 0x460, 0x481, true) ||
      alternating(c, 0x48A, 0x4BF, true))
    return c + 1;
  if (alternating(c, 0x139, 0x148, false) || alternating(c, 0x179, 0x17E, false)) return c + 1;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool is_cased(char32_t c) {
  return to_upper(c) != c || to_lower(c) != c || c == 0xDF;
}

bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if (c == 0xFFFE || c == 0xFFFF || c >= 0xF0000 || c == 0xE0001) return false;
  return true;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (is_cased(c)) return true;
  return (c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A) ||
         (c >= 0x3040 && c <= 0x30FF && c != 0x30FB) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3);
}

bool is_digit(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 0x660 && c <= 0x669) || (c >= 0xFF10 && c <= 0xFF19);
}

namespace {

constexpr char32_t kSharpS = 0xDF;  // ß: upper "SS", title "Ss"
constexpr char32_t kCapitalSigma = 0x3A3;
constexpr char32_t kFinalSigma = 0x3C2;

// Python lowercases Σ to ς at the end of a word: after a cased letter and not before one.
bool is_final_sigma(const std::u32string& t, size_t i) {
  return i > 0 && is_cased(t[i - 1]) && (i + 1 >= t.size() || !is_cased(t[i + 1]));
}

// Appends the upper (or title) case of c, expanding ß.
void append_upper(std::u32string& out, char32_t c, bool title) {
  if (c == kSharpS) {
    out += title ? U"Ss" : U"SS";
  } else {
    out.push_back(to_upper(c));
  }
}

void append_lower(std::u32string& out, const std::u32string& t, size_t i) {
  out.push_back(t[i] == kCapitalSigma && is_final_sigma(t, i) ? kFinalSigma : to_lower(t[i]));
}

}  // namespace

std::string upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) append_upper(out, c, false);
  return encode(out);
}

std::string lower(std::string_view s) {
  std::u32string t = decode(s), out;
  for (size_t i = 0; i < t.size(); ++i) append_lower(out, t, i);
  return encode(out);
}

std::string swapcase(std::string_view s) {
  std::u32string t = decode(s);
  for (auto& c : t) c = to_upper(c) != c ? to_upper(c) : to_lower(c);
  return encode(t);
}

std::string capitalize(std::string_view s) {
  std::u32string t = decode(s), out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (i == 0)
      append_upper(out, t[i], true);
    else
      append_lower(out, t, i);
  }
  return encode(out);
}

std::string title(std::string_view s) {
  std::u32string t = decode(s), out;
  bool previous_cased = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (previous_cased)
      append_lower(out, t, i);
    else
      append_upper(out, t[i], true);
    previous_cased = is_cased(t[i]);
  }
  return encode(out);
}

// The code point starting at byte i (an invalid byte decodes to its escape); returns its length.
size_t code_point_at(std::string_view s, size_t i, char32_t& cp) {
  size_t n = valid_sequence_length(s, i, cp);
  if (n > 0) return n;
  cp = kEscapeBase + static_cast<unsigned char>(s[i]);
  return 1;
}

namespace {

// Start of the code point that ends at byte `end` (> begin).
size_t previous_code_point(std::string_view s, size_t begin, size_t end) {
  size_t start = end - 1;
  while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
    --start;
  char32_t cp;
  return valid_sequence_length(s, start, cp) == end - start ? start : end - 1;
}

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t begin = 0, end = s.size();
  char32_t cp;
  while (left && begin < end) {
    size_t n = code_point_at(s, begin, cp);
    if (!strippable(cp)) break;
    begin += n;
  }
  while (right && end > begin) {
    size_t start = previous_code_point(s, begin, end);
    code_point_at(s, start, cp);
    if (!strippable(cp)) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {

// str.split()/rsplit() without a separator: runs of whitespace separate, ends are trimmed.
std::vector<std::string> split_whitespace(const std::u32string& t, int64_t maxsplit,
                                          bool from_right) {
  std::vector<std::u32string> parts;
  if (!from_right) {
    size_t i = 0, n = t.size();
    while (true) {
      while (i < n && is_space(t[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = n;
        parts.push_back(t.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < n && !is_space(t[j])) ++j;
      parts.push_back(t.substr(i, j - i));
      i = j;
    }
  } else {
    size_t end = t.size();
    while (true) {
      while (end > 0 && is_space(t[end - 1])) --end;
      if (end == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(t.substr(0, end));
        break;
      }
      size_t j = end;
      while (j > 0 && !is_space(t[j - 1])) --j;
      parts.push_back(t.substr(j, end - j));
      end = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<std::string> out;
  for (const auto& p : parts) out.push_back(encode(p));
  return out;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  if (!sep) return split_whitespace(decode(s), maxsplit, from_right);
  if (sep->empty()) fail("ValueError: empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t pos = s.find(*sep, start);
      if (pos == std::string_view::npos) break;
      out.emplace_back(s.substr(start, pos - start));
      start = pos + sep->size();
    }
    out.emplace_back(s.substr(start));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t pos = s.rfind(*sep, end - sep->size());
      if (pos == std::string_view::npos) break;
      out.emplace_back(s.substr(pos + sep->size(), end - pos - sep->size()));
      end = pos;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string t = decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < t.size()) {
    if (!is_break(t[i])) {
      ++i;
      continue;
    }
    size_t eol = i;
    i += (t[i] == '\r' && i + 1 < t.size() && t[i + 1] == '\n') ? 2 : 1;
    out.push_back(encode(std::u32string_view(t).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < t.size()) out.push_back(encode(std::u32string_view(t).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string t = decode(s);
    int64_t done = 0;
    for (char32_t c : t) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      append_utf8(out, c);
      if (out.size() > kMaxStringBytes) fail("MemoryError: replaced string is too large");
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(old, start);
    if (pos == std::string_view::npos) break;
    out += s.substr(start, pos - start);
    out += repl;
    start = pos + old.size();
    ++done;
    if (out.size() > kMaxStringBytes) fail("MemoryError: replaced string is too large");
  }
  out += s.substr(start);
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  size_t pos = from_right ? s.rfind(sub) : s.find(sub);
  if (pos == std::string_view::npos) return -1;
  return length(s.substr(0, pos));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return length(s) + 1;
  int64_t n = 0;
  size_t start = 0;
  while ((start = s.find(sub, start)) != std::string_view::npos) {
    ++n;
    start += sub.size();
  }
  return n;
}

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else {
      const char* fmt = c <= 0xFF ? "\\x%02x" : (c <= 0xFFFF ? "\\u%04x" : "\\U%08x");
      std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  int exponent = std::stoi(sci.substr(e + 1));
  int decpt = exponent + 1;
  int nd = static_cast<int>(digits.size());
  if (decpt > 16 || decpt <= -4) {
    std::string out = sign + digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt < nd) return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
  return sign + digits + std::string(decpt - nd, '0') + ".0";
}

}  // namespace furlong::tokenizer::jinja::pystr
