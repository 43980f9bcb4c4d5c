// String helpers with Python's semantics, for the reward functions that must treat text exactly
// as miles' Python graders do (str.split(sep), str.strip(), float(), ...). ASCII only: non-ASCII
// bytes are never whitespace, digits or letters here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace furlong::reward {

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
// Python's str.isspace for ASCII: space, \t \n \v \f \r and the separators \x1c-\x1f.
bool is_py_space(char c);

std::string replace_all(std::string_view text, std::string_view from, std::string_view to);
// str.split(sep) with a non-empty separator: n separators give n+1 parts.
std::vector<std::string> py_split(std::string_view text, std::string_view sep);
// str.split() without arguments: runs of whitespace separate, no empty parts.
std::vector<std::string> py_split_whitespace(std::string_view text);
// str.strip() without arguments.
std::string py_strip(std::string_view text);
// float(text) in Python: surrounding whitespace allowed, decimal or exponent notation, inf/nan,
// underscores between digits; nullopt where Python raises ValueError.
std::optional<double> parse_python_float(std::string_view text);
// `text` with every occurrence of each of `strings` removed, scanning left to right and taking
// the longest string that matches at a position (empty strings are ignored).
std::string remove_strings(std::string_view text, const std::vector<std::string>& strings);
// Repeats re.sub(r"(\d)(,)(\d\d\d)($|\D)", r"\1\3\4") until nothing changes ("1,000" -> "1000").
std::string strip_formatted_commas(std::string_view text);

}  // namespace furlong::reward
