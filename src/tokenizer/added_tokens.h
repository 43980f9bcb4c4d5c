// Added tokens (tokenizer.json "added_tokens"): found in the text before normalization and BPE,
// leftmost match first and the longest one where several start at the same place, with HF's
// single_word / lstrip / rstrip rules. Matched tokens become their id as a whole.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/function_ref.h"

namespace furlong::tokenizer {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  // What id_to_token and decode show: HF gives a normalized token its normalized content.
  std::string display;
  bool single_word = false;  // only matches when not inside a word
  bool lstrip = false;       // swallows whitespace to its left
  bool rstrip = false;       // swallows whitespace to its right
  bool normalized = true;    // matched in normalized text (else in the raw text)
  bool special = false;      // skipped by decode(skip_special_tokens)
};

// Receives the segments of a split in order: text between tokens (id < 0) or a token's span.
using SegmentSink = FunctionRef<void(std::string_view, int64_t)>;

class AddedTokenMatcher {
 public:
  // Adds a token to match by `pattern` (its content, normalized if the token is normalized).
  // `token` must outlive the matcher. Empty patterns are ignored.
  void add(std::string_view pattern, const AddedToken* token);
  bool empty() const { return terminals_ == 0; }

  // Splits valid UTF-8 `text` into text segments and tokens; empty text segments are omitted.
  void split(std::string_view text, SegmentSink sink) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    const AddedToken* token = nullptr;  // set where a pattern ends
  };
  // Longest pattern starting at `pos`: its length (0 if none) and token.
  size_t longest_at(std::string_view text, size_t pos, const AddedToken** token) const;
  bool find(std::string_view text, size_t from, size_t& start, size_t& end,
            const AddedToken** token) const;

  std::vector<Node> nodes_{Node{}};  // nodes_[0] is the root
  std::array<bool, 256> first_byte_{};
  size_t terminals_ = 0;
};

}  // namespace furlong::tokenizer
