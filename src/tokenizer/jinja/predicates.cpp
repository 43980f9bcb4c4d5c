// Jinja tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...) with jinja2's
// definitions: `number` includes booleans, `integer` excludes them, `sequence` and `iterable`
// hold for strings, dicts and Undefined.
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/pystr.h"

namespace furlong::tokenizer::jinja {
namespace {

using TestFn = bool (*)(const Value& v, CallArgs& args);

const Value& one_arg(CallArgs& args, const char* test) {
  if (args.positional.size() + args.keyword.size() != 1)
    fail(std::string("TypeError: test '") + test + "' takes exactly one argument");
  return args.positional.empty() ? args.keyword[0].second : args.positional[0];
}

void no_args(CallArgs& args, const char* test) {
  if (!args.positional.empty() || !args.keyword.empty())
    fail(std::string("TypeError: test '") + test + "' takes no arguments");
}

template <CompareOp Op>
bool compare_test(const Value& v, CallArgs& args) {
  return compare_op(Op, v, one_arg(args, "comparison"));
}

int64_t integral(const Value& v, const char* test) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_integral()) fail(std::string("TypeError: test '") + test + "' needs an integer");
  return v.as_int();
}

bool case_test(const Value& v, bool want_lower) {
  bool any = false;
  for (char32_t c : pystr::decode(to_str(v))) {
    if (!pystr::is_cased(c)) continue;
    any = true;
    bool lower = pystr::to_upper(c) != c || c == 0xDF;
    if (lower != want_lower) return false;
  }
  return any;
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"defined",
       [](const Value& v, CallArgs& a) {
         no_args(a, "defined");
         return !v.is_undefined();
       }},
      {"undefined",
       [](const Value& v, CallArgs& a) {
         no_args(a, "undefined");
         return v.is_undefined();
       }},
      {"none",
       [](const Value& v, CallArgs& a) {
         no_args(a, "none");
         return v.is_none();
       }},
      {"boolean",
       [](const Value& v, CallArgs& a) {
         no_args(a, "boolean");
         return v.is_bool();
       }},
      {"true",
       [](const Value& v, CallArgs& a) {
         no_args(a, "true");
         return v.is_bool() && v.as_bool();
       }},
      {"false",
       [](const Value& v, CallArgs& a) {
         no_args(a, "false");
         return v.is_bool() && !v.as_bool();
       }},
      {"integer",
       [](const Value& v, CallArgs& a) {
         no_args(a, "integer");
         return v.is_int();
       }},
      {"float",
       [](const Value& v, CallArgs& a) {
         no_args(a, "float");
         return v.is_float();
       }},
      {"number",
       [](const Value& v, CallArgs& a) {
         no_args(a, "number");
         return v.is_number();
       }},
      {"string",
       [](const Value& v, CallArgs& a) {
         no_args(a, "string");
         return v.is_string();
       }},
      {"mapping",
       [](const Value& v, CallArgs& a) {
         no_args(a, "mapping");
         return v.is_dict();
       }},
      {"sequence",
       [](const Value& v, CallArgs& a) {
         no_args(a, "sequence");
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"iterable",
       [](const Value& v, CallArgs& a) {
         no_args(a, "iterable");
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
       }},
      {"callable",
       [](const Value& v, CallArgs& a) {
         no_args(a, "callable");
         return v.is_callable();
       }},
      {"odd",
       [](const Value& v, CallArgs& a) {
         no_args(a, "odd");
         return integral(v, "odd") % 2 != 0;
       }},
      {"even",
       [](const Value& v, CallArgs& a) {
         no_args(a, "even");
         return integral(v, "even") % 2 == 0;
       }},
      {"divisibleby",
       [](const Value& v, CallArgs& a) {
         int64_t d = integral(one_arg(a, "divisibleby"), "divisibleby");
         if (d == 0) fail("ZeroDivisionError: integer division or modulo by zero");
         return integral(v, "divisibleby") % d == 0;
       }},
      {"lower",
       [](const Value& v, CallArgs& a) {
         no_args(a, "lower");
         return case_test(v, true);
       }},
      {"upper",
       [](const Value& v, CallArgs& a) {
         no_args(a, "upper");
         return case_test(v, false);
       }},
      {"in", [](const Value& v, CallArgs& a) { return contains(one_arg(a, "in"), v); }},
      {"sameas",
       [](const Value& v, CallArgs& a) {
         // Python identity: singletons (None/True/False) compare by value, others by content
         // for immutable scalars and by reference for containers.
         const Value& o = one_arg(a, "sameas");
         if (v.kind() != o.kind()) return false;
         if (v.is_list()) return &v.as_list() == &o.as_list();
         if (v.is_dict()) return &v.as_dict() == &o.as_dict();
         return equals(v, o);
       }},
      {"filter",
       [](const Value& v, CallArgs& a) {
         no_args(a, "filter");
         return v.is_string() && is_supported_filter(v.as_string());
       }},
      {"test",
       [](const Value& v, CallArgs& a) {
         no_args(a, "test");
         return v.is_string() && is_supported_test(v.as_string());
       }},
      {"eq", compare_test<CompareOp::kEq>},
      {"equalto", compare_test<CompareOp::kEq>},
      {"==", compare_test<CompareOp::kEq>},
      {"ne", compare_test<CompareOp::kNe>},
      {"!=", compare_test<CompareOp::kNe>},
      {"lt", compare_test<CompareOp::kLt>},
      {"lessthan", compare_test<CompareOp::kLt>},
      {"<", compare_test<CompareOp::kLt>},
      {"le", compare_test<CompareOp::kLe>},
      {"<=", compare_test<CompareOp::kLe>},
      {"gt", compare_test<CompareOp::kGt>},
      {"greaterthan", compare_test<CompareOp::kGt>},
      {">", compare_test<CompareOp::kGt>},
      {"ge", compare_test<CompareOp::kGe>},
      {">=", compare_test<CompareOp::kGe>},
  };
  return table;
}

}  // namespace

bool is_supported_test(const std::string& name) {
  return tests().count(name) > 0;
}

bool apply_test(const std::string& name, const Value& value, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("unsupported test '" + name + "'");
  return it->second(value, args);
}

}  // namespace furlong::tokenizer::jinja
