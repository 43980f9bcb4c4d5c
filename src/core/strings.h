// Small string utilities shared by config parsing, tokenizer and apps.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace furlong {

std::vector<std::string> split(std::string_view text, char sep);
std::string_view trim(std::string_view text);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word`, if it is close enough to be a plausible typo. Cost is bounded
// whatever `word` is: words longer than kMaxTypoWordBytes get no suggestion, and candidates
// whose length alone rules them out are skipped.
inline constexpr size_t kMaxTypoWordBytes = 256;
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);
// `text` cut to about `max_bytes`, then "... (N bytes)", for echoing user input in messages
// (a 10 MB field name must not become a 10 MB error body). Never splits a UTF-8 sequence.
std::string truncate_for_message(std::string_view text, size_t max_bytes = 80);
// `text` with every byte that does not belong to well-formed UTF-8 replaced by U+FFFD: for text
// from outside (a peer's body, a file) that reaches JSON, whose strings must be valid UTF-8.
std::string valid_utf8(std::string_view text);

}  // namespace furlong
