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
// The candidate closest to `word`, if it is close enough to be a plausible typo.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

}  // namespace furlong
