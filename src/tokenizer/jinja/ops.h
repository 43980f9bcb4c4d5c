// Python semantics of template operators and lookups, as jinja2's sandboxed environment
// applies them: arithmetic, comparison, `in`, attribute/item access (with jinja's fallback
// from attribute to item and back), slicing, calls, and argument binding for builtins.
// Errors are TemplateError (the evaluator adds the location).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace furlong::tokenizer::jinja {

Value binary_op(BinaryOp op, const Value& a, const Value& b);
Value unary_op(UnaryOp op, const Value& v);
bool compare_op(CompareOp op, const Value& a, const Value& b);
// Python `item in container`.
bool contains(const Value& container, const Value& item);

// `obj.name`: attribute (method) first, then item; Undefined when neither exists.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: item first, then attribute for string keys; Undefined when neither exists.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` (null parts are Python's None).
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
Value call_value(const Value& callee, CallArgs& args);

// Binds call arguments to named parameters (positional first, then keywords), Python-style:
// too many positionals, unknown or duplicate keywords raise a TypeError naming `function`.
std::vector<std::optional<Value>> bind_args(const std::string& function, CallArgs& args,
                                            std::initializer_list<const char*> params);

// Checked conversions for builtin arguments.
int64_t int_arg(const Value& v, const std::string& what);
std::string str_arg(const Value& v, const std::string& what);

// The bound method `obj.name` of a str, dict or list (nullopt when Python has no such
// attribute; a modifying list/dict method yields an Undefined, as in the immutable sandbox).
std::optional<Value> builtin_method(const Value& obj, const std::string& name);

// printf-style `fmt % args` for the common conversions (%s %r %d %i %f %%).
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace furlong::tokenizer::jinja
