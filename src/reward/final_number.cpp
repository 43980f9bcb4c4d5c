#include "reward/final_number.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "reward/text_util.h"

namespace furlong::reward {
namespace {

constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";  // U+2212

bool is_ascii_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

size_t digits_end(std::string_view text, size_t i) {
  while (i < text.size() && is_digit(text[i])) ++i;
  return i;
}

// Whether ",ddd" starts at `i` and no further digit follows it (a thousands group).
bool thousands_group_at(std::string_view text, size_t i) {
  if (i + 4 > text.size() || text[i] != ',') return false;
  if (digits_end(text, i + 1) != i + 4) return false;
  return i + 4 == text.size() || !is_digit(text[i + 4]);
}

struct Number {
  double value = 0;  // NaN when out of double's range
  size_t end = 0;    // one past the number's last character
};

// The unsigned number whose first digit is text[begin] (the digit before it, if any, belongs to
// no number: callers start at the first digit of a run).
Number scan_unsigned(std::string_view text, size_t begin) {
  size_t end = digits_end(text, begin);
  std::string digits(text.substr(begin, end - begin));
  if (end - begin <= 3) {
    while (thousands_group_at(text, end)) {
      digits.append(text.substr(end + 1, 3));
      end += 4;
    }
  }
  if (end + 1 < text.size() && text[end] == '.' && is_digit(text[end + 1])) {
    const size_t fraction_end = digits_end(text, end + 1);
    digits.append(text.substr(end, fraction_end - end));
    end = fraction_end;
  }
  Number n{.value = 0, .end = end};
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n.value);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) {
    n.value = std::numeric_limits<double>::quiet_NaN();
  }
  return n;
}

// Whether a minus sign ends right before `digit` and is a sign (not a binary minus or a dash
// after a word: "5-3", "x-3").
bool minus_before(std::string_view text, size_t digit) {
  size_t sign = 0;
  if (digit >= 1 && text[digit - 1] == '-') {
    sign = 1;
  } else if (digit >= kUnicodeMinus.size() &&
             text.substr(digit - kUnicodeMinus.size(), kUnicodeMinus.size()) == kUnicodeMinus) {
    sign = kUnicodeMinus.size();
  }
  if (sign == 0) return false;
  const size_t at = digit - sign;
  return at == 0 || !is_ascii_alnum(text[at - 1]);
}

}  // namespace

std::optional<double> last_number(std::string_view text) {
  std::optional<double> last;
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 2, "<|") == 0) {  // a special token: skip to its end
      const size_t close = text.find("|>", i + 2);
      if (close != std::string_view::npos) {
        i = close + 2;
        continue;
      }
    }
    if (!is_digit(text[i])) {
      ++i;
      continue;
    }
    const Number n = scan_unsigned(text, i);
    last = minus_before(text, i) ? -n.value : n.value;
    i = n.end;
  }
  return last;
}

std::optional<double> parse_number_label(std::string_view label) {
  const std::string text = py_strip(label);
  std::string_view rest = text;
  bool negative = false;
  if (rest.starts_with('+') || rest.starts_with('-')) {
    negative = rest.front() == '-';
    rest.remove_prefix(1);
  } else if (rest.starts_with(kUnicodeMinus)) {
    negative = true;
    rest.remove_prefix(kUnicodeMinus.size());
  }
  if (rest.empty() || !is_digit(rest.front())) return std::nullopt;
  const Number n = scan_unsigned(rest, 0);
  if (n.end != rest.size() || std::isnan(n.value)) return std::nullopt;
  return negative ? -n.value : n.value;
}

double final_number_reward(std::string_view response, std::string_view label) {
  const auto truth = parse_number_label(label);
  FURLONG_CHECK(truth.has_value(), "--rm-type final_number: the label '", label,
                "' is not a number (expected e.g. 42, -3, 2.5 or 1,234; use --rm-type math for "
                "expressions)");
  const auto answer = last_number(response);
  return answer && *answer == *truth ? 1.0 : 0.0;
}

}  // namespace furlong::reward
