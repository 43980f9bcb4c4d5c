// Lexer: template source -> tokens, with jinja2's whitespace rules as transformers configures
// them (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newlines normalized
// to "\n"). Comments vanish here and {% raw %} bodies become plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/errors.h"

namespace furlong::tokenizer::jinja {

enum class TokenType {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,  // text holds the operator, e.g. "//" or "("
  kEof
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  Location loc;
};

// Throws furlong::Error ("origin:line:col: ...") on malformed input.
std::vector<Token> tokenize(std::string_view source, const std::string& origin);

std::string describe(const Token& token);

}  // namespace furlong::tokenizer::jinja
