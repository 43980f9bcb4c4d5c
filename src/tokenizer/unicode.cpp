#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include <memory>

#include "core/error.h"

namespace furlong::tokenizer::unicode {
namespace {

// Valid range of the second byte of a multi-byte sequence, and the sequence length, by lead byte
// (Unicode Table 3-7, Well-Formed UTF-8 Byte Sequences). need == 0: not a lead byte.
struct LeadInfo {
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
};

LeadInfo lead_info(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool is_byte_self_mapped(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> from_unicode{};  // code point -> byte, -1 if none (all points are < 512)
  ByteTables() {
    from_unicode.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      char32_t c =
          is_byte_self_mapped(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      append_utf8(to_unicode[b], c);
      from_unicode[c] = b;
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables tables;
  return tables;
}

const icu::Normalizer2* base_normalizer(NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      n = icu::Normalizer2::getNFCInstance(err);
      break;
    case NormalForm::kNFD:
      n = icu::Normalizer2::getNFDInstance(err);
      break;
    case NormalForm::kNFKC:
      n = icu::Normalizer2::getNFKCInstance(err);
      break;
    case NormalForm::kNFKD:
      n = icu::Normalizer2::getNFKDInstance(err);
      break;
  }
  FURLONG_CHECK(U_SUCCESS(err) && n != nullptr,
                "ICU: cannot load the Unicode normalization data: ", u_errorName(err));
  return n;
}

// HF normalizes with Unicode 9.0 data (its normalization crate's tables): characters assigned
// later have no decomposition and combining class 0 there. Normalization stability makes that
// equivalent to ICU's normalizer restricted to characters assigned by Unicode 9.0, the others
// left as they are and acting as boundaries.
const icu::Normalizer2* normalizer_for(NormalForm form) {
  struct Filtered {
    icu::UnicodeSet assigned;
    std::unique_ptr<icu::FilteredNormalizer2> normalizers[4];
    Filtered() {
      UErrorCode err = U_ZERO_ERROR;
      assigned.applyPattern(icu::UnicodeString(u"[:age=9.0:]"), err);
      FURLONG_CHECK(U_SUCCESS(err),
                    "ICU: cannot build the Unicode 9.0 character set: ", u_errorName(err));
      assigned.freeze();
      for (int f = 0; f < 4; ++f) {
        normalizers[f] = std::make_unique<icu::FilteredNormalizer2>(
            *base_normalizer(static_cast<NormalForm>(f)), assigned);
      }
    }
  };
  static const Filtered filtered;
  return filtered.normalizers[static_cast<int>(form)].get();
}

}  // namespace

size_t sequence_length(std::string_view text, size_t pos, size_t* maximal, bool* truncated) {
  const auto b = static_cast<unsigned char>(text[pos]);
  if (truncated) *truncated = false;
  if (b < 0x80) return 1;
  LeadInfo info = lead_info(b);
  if (info.need == 0) {
    if (maximal) *maximal = 1;
    return 0;
  }
  size_t k = 1;
  while (k < info.need) {
    if (pos + k >= text.size()) {
      if (truncated) *truncated = true;
      break;
    }
    const auto c = static_cast<unsigned char>(text[pos + k]);
    const unsigned char lo = k == 1 ? info.lo : 0x80, hi = k == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) break;
    ++k;
  }
  if (k == info.need) return k;
  if (maximal) *maximal = k;
  return 0;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = sequence_length(text, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  size_t bad = find_invalid_utf8(bytes);
  if (bad == std::string_view::npos) return std::string(bytes);
  std::string out(bytes.substr(0, bad));
  out.reserve(bytes.size() + 16);
  size_t pos = bad;
  while (pos < bytes.size()) {
    size_t maximal = 1;
    size_t len = sequence_length(bytes, pos, &maximal);
    if (len > 0) {
      out.append(bytes.substr(pos, len));
      pos += len;
    } else {
      out.append(kReplacement);
      pos += maximal;
    }
  }
  return out;
}

size_t incomplete_suffix_length(std::string_view bytes) {
  // A held suffix starts at a lead byte among the last 3 bytes. A lead byte is never a
  // continuation byte, so the lossy decoder is always at a sequence boundary there.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(bytes[n - back]);
    if (b < 0x80) return 0;
    if (b >= 0xC0) {
      bool truncated = false;
      size_t len = sequence_length(bytes, n - back, nullptr, &truncated);
      return (len == 0 && truncated) ? back : 0;
    }
  }
  return 0;
}

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t c = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k)
    c = (c << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  pos += len;
  return c;
}

char32_t previous_code_point(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_whitespace(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t type = u_charType(u);
  return type == U_NON_SPACING_MARK || type == U_COMBINING_SPACING_MARK ||
         type == U_ENCLOSING_MARK || type == U_DECIMAL_DIGIT_NUMBER ||
         type == U_CONNECTOR_PUNCTUATION;
}

const std::array<std::string, 256>& byte_to_unicode() {
  return byte_tables().to_unicode;
}

int unicode_to_byte(char32_t c) {
  return c < 512 ? byte_tables().from_unicode[c] : -1;
}

void normalize(NormalForm form, std::string& text) {
  bool ascii = true;
  for (char ch : text) {
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return;  // ASCII is invariant under all four forms
  const icu::Normalizer2* n = normalizer_for(form);
  UErrorCode err = U_ZERO_ERROR;
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (n->isNormalizedUTF8(piece, err) && U_SUCCESS(err)) return;
  err = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, piece, sink, nullptr, err);
  FURLONG_CHECK(U_SUCCESS(err), "ICU normalization failed: ", u_errorName(err));
  text = std::move(out);
}

}  // namespace furlong::tokenizer::unicode
