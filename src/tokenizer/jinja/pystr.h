// Python `str` semantics over UTF-8 std::string: templates index, slice, measure and transform
// strings by code point exactly as Python does, so these helpers decode to code points first.
// Invalid UTF-8 bytes decode to U+DC80..U+DCFF (Python's surrogateescape) and encode back to the
// same byte, so a round trip never changes the data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace furlong::tokenizer::jinja::pystr {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view text);
void append_utf8(std::string& out, char32_t cp);
// The code point at byte offset i and its length in bytes (invalid bytes count as one).
size_t code_point_at(std::string_view utf8, size_t i, char32_t& cp);
// Number of code points (Python len()).
int64_t length(std::string_view utf8);

bool is_space(char32_t c);  // str.isspace
bool is_cased(char32_t c);
char32_t to_upper(char32_t c);  // simple case mapping for Latin, Greek and Cyrillic
char32_t to_lower(char32_t c);
bool is_printable(char32_t c);  // str.isprintable (approximation for rare categories)
bool is_alpha(char32_t c);
bool is_digit(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);
std::string title(std::string_view s);  // str.title
std::string swapcase(std::string_view s);
// str.strip/lstrip/rstrip; `chars` nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split / str.rsplit; `sep` nullopt splits on runs of whitespace.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.find / str.rfind (code point index, -1 when absent) and str.count.
int64_t find(std::string_view s, std::string_view sub, bool from_right);
int64_t count(std::string_view s, std::string_view sub);

// Python repr() of a string: quotes chosen as Python does, escapes for non-printables.
std::string repr(std::string_view s);

// Python's repr() of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_float(double v);

}  // namespace furlong::tokenizer::jinja::pystr
