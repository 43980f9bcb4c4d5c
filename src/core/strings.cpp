#include "core/strings.h"

#include <algorithm>

namespace furlong {

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.emplace_back(text.substr(start));
      return parts;
    }
    parts.emplace_back(text.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string_view trim(std::string_view text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = text.find_last_not_of(" \t\r\n");
  return text.substr(b, e - b + 1);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

// Optimal string alignment distance: insertions, deletions, substitutions and transpositions
// of adjacent characters each cost 1 (so "inptu" is one edit from "input").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  if (word.size() > kMaxTypoWordBytes) return std::nullopt;
  const size_t max_accepted = std::max<size_t>(word.size(), 3) / 3;
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const auto& c : candidates) {
    // The distance is at least the length difference: skip what could never be accepted.
    size_t length_gap = c.size() > word.size() ? c.size() - word.size() : word.size() - c.size();
    if (length_gap > max_accepted) continue;
    size_t d = edit_distance(word, c);
    if (!best || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  // Accept roughly a third of the word's length in edits (difflib's 0.6 ratio in spirit).
  if (best && best_distance * 3 <= std::max<size_t>(word.size(), 3)) return best;
  return std::nullopt;
}

std::string truncate_for_message(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t keep = max_bytes > 3 ? max_bytes - 3 : 0;
  // Back up over UTF-8 continuation bytes (10xxxxxx) so a character is not cut in half.
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return std::string(text.substr(0, keep)) + "... (" + std::to_string(text.size()) + " bytes)";
}

namespace {

// The length of the well-formed UTF-8 sequence at text[pos], 0 when none starts there
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF, no cut sequence).
size_t utf8_sequence_at(std::string_view text, size_t pos) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[pos + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    lo = lead == 0xE0 ? 0xA0 : lo;
    hi = lead == 0xED ? 0x9F : hi;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    lo = lead == 0xF0 ? 0x90 : lo;
    hi = lead == 0xF4 ? 0x8F : hi;
  } else {
    return 0;
  }
  if (pos + length > text.size() || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t k = 2; k < length; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
  }
  return length;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_sequence_at(text, pos);
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for the byte that starts no sequence
      ++pos;
    } else {
      out.append(text.substr(pos, length));
      pos += length;
    }
  }
  return out;
}

}  // namespace furlong
