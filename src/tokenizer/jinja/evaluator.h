// Evaluator: renders a parsed template against a context. Scoping follows jinja2: a for-loop
// iteration, macro call or {% with %} opens a child scope (its {% set %}s vanish at the end),
// {% if %} does not; namespace() objects are the way to carry state out of a loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/value.h"

namespace furlong::tokenizer::jinja {

using Limits = ChatTemplateLimits;

// Renders `tmpl` with the variables of `context` (a dict). Throws furlong::Error whose message
// starts with "origin:line:column: ".
std::string render_template(const Template& tmpl, const DictData& context, const Limits& limits);

}  // namespace furlong::tokenizer::jinja
