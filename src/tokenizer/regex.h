// The pre-tokenizer regex engine: HF patterns (written for Oniguruma) compiled with PCRE2 in
// UTF + UCP mode, JIT-compiled where available. Thread-safe: a compiled Regex is shared, match
// state is per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace furlong::tokenizer {

class Regex {
 public:
  // `where` names the source in errors (file and field). Throws furlong::Error on a bad pattern.
  Regex(std::string_view pattern, const std::string& where);
  // A regex matching `literal` exactly (HF's {"String": ...} split patterns).
  static Regex literal(std::string_view literal, const std::string& where);

  // Finds the leftmost match at or after `from` in valid UTF-8 `text`; on success sets
  // [start, end). Empty matches are skipped (HF patterns never produce them usefully).
  bool find(std::string_view text, size_t from, size_t& start, size_t& end) const;

  // The Oniguruma pattern rewritten so PCRE2 gives it Oniguruma's meaning (\s as Unicode
  // White_Space, \h as a hex digit, \w as Oniguruma's word class, (?m) as dot-all); compiled
  // multi-line, as Oniguruma's ^ and $ always match at line boundaries. Exposed for tests.
  static std::string translate(std::string_view pattern);

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string where_;
};

}  // namespace furlong::tokenizer
