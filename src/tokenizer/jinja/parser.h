// Parser: tokens -> syntax tree. Follows jinja2's grammar and operator precedence (lowest
// first): `x if c else y`, or, and, not, comparisons/in, + -, ~, * / // %, **, unary - +,
// then postfix (.attr, [item], [a:b:c], call), filters `|f` and tests `is t` (which bind to
// the unary operand: `-x|abs` is `(-x)|abs`, `a + b|length` is `a + (b|length)`).
// Unsupported tags, filters and tests are rejected here, with their location.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace furlong::tokenizer::jinja {

// Throws furlong::Error "origin:line:col: ..." on syntax errors and unsupported constructs.
std::unique_ptr<Template> parse_template(std::string_view source, const std::string& origin);

// Implemented by filters.cpp / predicates.cpp; the parser checks names against them.
bool is_supported_filter(const std::string& name);
bool is_supported_test(const std::string& name);

}  // namespace furlong::tokenizer::jinja
