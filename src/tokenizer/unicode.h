// UTF-8 helpers and the Unicode facts the tokenizer needs: validation, lossy decoding with the
// same U+FFFD placement as HF (Rust's String::from_utf8_lossy: one replacement per maximal
// invalid subpart), the GPT-2 byte-to-unicode table, character properties and normalization
// forms (ICU).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace furlong::tokenizer::unicode {

// Length of the well-formed UTF-8 sequence starting at text[pos]; 0 if the bytes there are not
// a complete well-formed sequence. `*maximal` receives the number of bytes the lossy decoder
// replaces by one U+FFFD in that case (>= 1), and `*truncated` whether the bytes are a proper
// prefix of a well-formed sequence cut off by the end of `text`.
size_t sequence_length(std::string_view text, size_t pos, size_t* maximal = nullptr,
                       bool* truncated = nullptr);

// Offset of the first byte that is not part of well-formed UTF-8, or npos if `text` is valid.
size_t find_invalid_utf8(std::string_view text);

// `bytes` with each maximal invalid subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Number of trailing bytes of `bytes` that form a proper (incomplete) prefix of a well-formed
// sequence, i.e. bytes a streaming decoder must hold back until more arrive (0..3).
size_t incomplete_suffix_length(std::string_view bytes);

// Decodes the code point at text[pos] of valid UTF-8 and advances pos past it.
char32_t next_code_point(std::string_view text, size_t& pos);
// The code point that ends at text[end] (valid UTF-8, end > 0).
char32_t previous_code_point(std::string_view text, size_t end);
void append_utf8(std::string& out, char32_t c);

// Rust's char::is_whitespace (Unicode White_Space), which HF's lstrip/rstrip swallow.
bool is_whitespace(char32_t c);
// A Unicode word character (UTS #18 \w: Alphabetic, marks, decimal digits, connector
// punctuation, join controls), which HF's single_word tokens must not touch.
bool is_word_char(char32_t c);

// GPT-2 byte-level alphabet: each byte maps to one printable code point (printable Latin-1
// bytes to themselves, the other 68 to U+0100.. in byte order).
const std::array<std::string, 256>& byte_to_unicode();  // UTF-8 of each byte's code point
// The byte a code point stands for, or -1 if it is not in the alphabet.
int unicode_to_byte(char32_t c);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// Normalizes valid UTF-8 text in place.
void normalize(NormalForm form, std::string& text);

}  // namespace furlong::tokenizer::unicode
