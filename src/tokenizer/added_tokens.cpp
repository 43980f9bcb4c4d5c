#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace furlong::tokenizer {
namespace {

bool word_char_before(std::string_view text, size_t pos) {
  return pos > 0 && unicode::is_word_char(unicode::previous_code_point(text, pos));
}

bool word_char_at(std::string_view text, size_t pos) {
  return pos < text.size() && unicode::is_word_char(unicode::next_code_point(text, pos));
}

// Start of the whitespace run that ends at `end`, not going below `floor`.
size_t skip_whitespace_left(std::string_view text, size_t end, size_t floor) {
  while (end > floor) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    if (!unicode::is_whitespace(unicode::next_code_point(text, next))) break;
    end = start;
  }
  return std::max(end, floor);
}

// End of the whitespace run that starts at `start`.
size_t skip_whitespace_right(std::string_view text, size_t start) {
  while (start < text.size()) {
    size_t next = start;
    if (!unicode::is_whitespace(unicode::next_code_point(text, next))) break;
    start = next;
  }
  return start;
}

}  // namespace

void AddedTokenMatcher::add(std::string_view pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char ch : pattern) {
    const auto b = static_cast<unsigned char>(ch);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == b) child = index;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(b, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  if (nodes_[node].token == nullptr) ++terminals_;
  nodes_[node].token = token;  // a duplicate content: the later token wins
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

size_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos,
                                     const AddedToken** token) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == b) {
        child = index;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[node].token != nullptr) {
      best = i + 1 - pos;
      *token = nodes_[node].token;
    }
  }
  return best;
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, size_t& start, size_t& end,
                             const AddedToken** token) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    if (size_t len = longest_at(text, pos, token); len > 0) {
      start = pos;
      end = pos + len;
      return true;
    }
  }
  return false;
}

void AddedTokenMatcher::split(std::string_view text, SegmentSink sink) const {
  size_t emitted = 0;  // text before this has been passed to sink
  size_t from = 0, start = 0, end = 0;
  const AddedToken* token = nullptr;
  while (!empty() && find(text, from, start, end, &token)) {
    from = end;
    if (token->single_word && (word_char_before(text, start) || word_char_at(text, end))) {
      continue;
    }
    if (token->lstrip) start = skip_whitespace_left(text, start, emitted);
    if (token->rstrip) end = skip_whitespace_right(text, end);
    if (start > emitted) sink(text.substr(emitted, start - emitted), -1);
    sink(text.substr(start, end - start), token->id);
    emitted = end;
    from = end;
  }
  if (emitted < text.size()) sink(text.substr(emitted), -1);
}

}  // namespace furlong::tokenizer
