// Errors of the template interpreter.
//
// TemplateError is raised by value operations, filters and methods, which do not know where in
// the template they run. The evaluator catches it at the innermost AST node and rethrows it as
// furlong::Error prefixed with "origin:line:column: ", so users always see where it happened.
// The lexer and parser know their location and throw furlong::Error directly via throw_at.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "core/error.h"

namespace furlong::tokenizer::jinja {

class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) {
  throw TemplateError(message);
}

// Limits on values built while rendering. Python has none, but a template must not be able to
// exhaust memory or the stack; exceeding one raises a TemplateError.
constexpr size_t kMaxStringBytes = size_t{64} << 20;
constexpr size_t kMaxListItems = size_t{1} << 22;
constexpr int kMaxValueDepth = 512;  // nesting of lists/dicts (and of repr() through objects)

// 1-based line and column (in code points) of a construct in the template source.
struct Location {
  int line = 0;
  int column = 0;
};

inline std::string location_prefix(const std::string& origin, Location loc) {
  return origin + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": ";
}

[[noreturn]] inline void throw_at(const std::string& origin, Location loc,
                                  const std::string& message) {
  throw furlong::Error(location_prefix(origin, loc) + message);
}

}  // namespace furlong::tokenizer::jinja
