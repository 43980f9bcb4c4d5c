#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace furlong::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Oniguruma's Unicode \s is White_Space: TAB..CR, NEL and the separators (Zs, Zl, Zp). PCRE2's
// UCP \s also takes U+180E (via \h), so the class is spelled out.
constexpr std::string_view kSpaceItems = "\\t-\\r\\x{85}\\p{Z}";
constexpr std::string_view kWordItems = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr std::string_view kHexItems = "0-9a-fA-F";

std::string error_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n > 0 ? std::string(reinterpret_cast<const char*>(buf), n)
               : "error " + std::to_string(code);
}

// Per-thread match state, usable with any compiled pattern.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    FURLONG_CHECK(data && stack && context, "PCRE2: out of memory creating match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

// Replacement for an escape letter: inside a class (items) or outside (a whole class).
bool translate_escape(char letter, bool in_class, std::string& out) {
  std::string_view items;
  bool negated = false;
  switch (letter) {
    case 's':
    case 'S':
      items = kSpaceItems;
      negated = letter == 'S';
      break;
    case 'w':
    case 'W':
      items = kWordItems;
      negated = letter == 'W';
      break;
    case 'h':
    case 'H':
      items = kHexItems;
      negated = letter == 'H';
      break;
    default:
      return false;
  }
  if (in_class) {
    if (negated) return false;  // cannot be spelled inside a class; keep PCRE2's meaning
    out += items;
  } else {
    out += negated ? "[^" : "[";
    out += items;
    out += ']';
  }
  return true;
}

// Length of an inline option group's flags at pattern[pos] ("(?" already consumed), e.g. "i-m"
// in "(?i-m:" or "(?i-m)"; 0 if the group is not an option group.
size_t option_flags_length(std::string_view pattern, size_t pos) {
  size_t end = pos;
  while (end < pattern.size() &&
         std::string_view("imx-").find(pattern[end]) != std::string_view::npos) {
    ++end;
  }
  const bool closed = end < pattern.size() && (pattern[end] == ':' || pattern[end] == ')');
  return closed ? end - pos : 0;
}

}  // namespace

std::string Regex::translate(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char letter = pattern[++i];
      if (!translate_escape(letter, class_depth > 0, out)) {
        out += c;
        out += letter;
      }
      continue;
    }
    out += c;
    if (c == '(' && class_depth == 0 && i + 1 < pattern.size() && pattern[i + 1] == '?') {
      // Oniguruma's (?m) is dot-matches-newline, PCRE2's (?s); ^ and $ always match at lines.
      out += pattern[++i];
      const size_t flags = option_flags_length(pattern, i + 1);
      for (size_t k = 0; k < flags; ++k)
        out += pattern[i + 1 + k] == 'm' ? 's' : pattern[i + 1 + k];
      i += flags;
      continue;
    }
    if (c == '[') {
      if (class_depth > 0 && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        size_t close = pattern.find(":]", i + 2);  // POSIX [:name:] inside a class
        if (close != std::string_view::npos) {
          out.append(pattern.substr(i + 1, close + 1 - i));
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (c == ']' && class_depth > 0) {
      --class_depth;
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& where) : where_(where) {
  const std::string translated = translate(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &offset, nullptr);
  if (code->code == nullptr) {
    FURLONG_FAIL(where, ": invalid regex '", pattern, "': ", error_message(err), " (at offset ",
                 offset, " of the translated pattern)");
  }
  // JIT is an optimization only: if unavailable, the interpreter gives the same matches.
  (void)pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  code_ = std::move(code);
}

Regex Regex::literal(std::string_view literal, const std::string& where) {
  std::string pattern;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z') || c == '_';
    if (!plain) pattern += '\\';
    if (c == '\n') {
      pattern += 'n';
    } else if (c == '\r') {
      pattern += 'r';
    } else if (c == '\0') {
      pattern += "x{0}";
    } else {
      pattern += c;
    }
  }
  return Regex(pattern, where);
}

bool Regex::find(std::string_view text, size_t from, size_t& start, size_t& end) const {
  ThreadMatchState& state = thread_state();
  while (from <= text.size()) {
    int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                         PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    FURLONG_CHECK(rc >= 0, where_, ": regex match failed: ", error_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    start = ovector[0];
    end = ovector[1];
    if (end > start) return true;
    // Empty match: step over one character and search again.
    from = start + 1;
    while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  }
  return false;
}

}  // namespace furlong::tokenizer
