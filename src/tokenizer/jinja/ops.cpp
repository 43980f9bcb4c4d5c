// Python operator semantics and jinja2's lookup rules; see ops.h.
#include "tokenizer/jinja/ops.h"

#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/pystr.h"

namespace furlong::tokenizer::jinja {
namespace {

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail(std::string("TypeError: unsupported operand type(s) for ") + op + ": '" + type_name(a) +
       "' and '" + type_name(b) + "'");
}

Value checked_int(bool overflow, int64_t v) {
  if (overflow) fail("OverflowError: integer result does not fit in 64 bits");
  return Value::integer(v);
}

// Python's float floor division and modulo (results carry the divisor's sign).
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0.0) fail("ZeroDivisionError: float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

std::pair<int64_t, int64_t> int_divmod(int64_t x, int64_t y) {
  if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) fail("OverflowError: integer result does not fit in 64 bits");
  int64_t q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    --q;
    r += y;
  }
  return {q, r};
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.as_list().is_tuple);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size())
      fail("MemoryError: string repetition is too large");
    std::string out;
    out.reserve(s.size() * n);
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > kMaxListItems / items.size())
    fail("MemoryError: list repetition is too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

Value add(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    int64_t r = 0;
    bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
    return checked_int(overflow, r);
  }
  if (a.is_number() && b.is_number()) return Value::number(a.as_float() + b.as_float());
  if (a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > kMaxStringBytes)
      fail("MemoryError: string is too large");
    return Value::string(a.as_string() + b.as_string());
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    if (a.as_list().items.size() + b.as_list().items.size() > kMaxListItems)
      fail("MemoryError: list is too long");
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return Value::list(std::move(items), a.as_list().is_tuple);
  }
  unsupported_operands("+", a, b);
}

Value multiply(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    int64_t r = 0;
    bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    return checked_int(overflow, r);
  }
  if (a.is_number() && b.is_number()) return Value::number(a.as_float() * b.as_float());
  if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
  if (a.is_integral() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
  unsupported_operands("*", a, b);
}

Value power(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    int64_t base = a.as_int(), exp = b.as_int(), result = 1;
    while (exp > 0) {
      if (exp & 1) {
        if (__builtin_mul_overflow(result, base, &result)) checked_int(true, 0);
      }
      exp >>= 1;
      if (exp > 0 && __builtin_mul_overflow(base, base, &base)) checked_int(true, 0);
    }
    return Value::integer(result);
  }
  if (a.is_number() && b.is_number()) {
    double x = a.as_float(), y = b.as_float();
    if (x == 0.0 && y < 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) fail("ValueError: negative number to a fractional power");
    double r = std::pow(x, y);
    if (std::isinf(r) && !std::isinf(x))
      fail("OverflowError: (34, 'Numerical result out of range')");
    return Value::number(r);
  }
  unsupported_operands("**", a, b);
}

Value divide(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kMod && a.is_string()) return Value::string(percent_format(a.as_string(), b));
  const char* sym = op == BinaryOp::kDiv ? "/" : (op == BinaryOp::kFloorDiv ? "//" : "%");
  if (!a.is_number() || !b.is_number()) unsupported_operands(sym, a, b);
  if (op == BinaryOp::kDiv) {
    if (b.as_float() == 0.0) fail("ZeroDivisionError: division by zero");
    return Value::number(a.as_float() / b.as_float());
  }
  if (a.is_integral() && b.is_integral()) {
    auto [q, r] = int_divmod(a.as_int(), b.as_int());
    return Value::integer(op == BinaryOp::kFloorDiv ? q : r);
  }
  auto [q, r] = float_divmod(a.as_float(), b.as_float());
  return Value::number(op == BinaryOp::kFloorDiv ? q : r);
}

// Python slice bounds for a sequence of length n (PySlice_AdjustIndices).
std::vector<int64_t> slice_indices(int64_t n, const Value* start, const Value* stop,
                                   const Value* step) {
  auto opt = [](const Value* v) -> std::optional<int64_t> {
    if (v == nullptr || v->is_none()) return std::nullopt;
    if (!v->is_integral()) fail("TypeError: slice indices must be integers or None");
    return v->as_int();
  };
  int64_t st = opt(step).value_or(1);
  if (st == 0) fail("ValueError: slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t b = clamp(opt(start), st < 0 ? n - 1 : 0);
  int64_t e = clamp(opt(stop), st < 0 ? -1 : n);
  std::vector<int64_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(i);
  return out;
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

}  // namespace

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  switch (op) {
    case BinaryOp::kAdd:
      return add(a, b);
    case BinaryOp::kSub:
      if (a.is_integral() && b.is_integral()) {
        int64_t r = 0;
        bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
        return checked_int(overflow, r);
      }
      if (a.is_number() && b.is_number()) return Value::number(a.as_float() - b.as_float());
      unsupported_operands("-", a, b);
    case BinaryOp::kMul:
      return multiply(a, b);
    case BinaryOp::kDiv:
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod:
      return divide(op, a, b);
    case BinaryOp::kPow:
      return power(a, b);
    default:
      fail("internal error: logical operator evaluated as arithmetic");
  }
}

Value unary_op(UnaryOp op, const Value& v) {
  if (op == UnaryOp::kNot) return Value::boolean(!truthy(v));
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number())
    fail(std::string("TypeError: bad operand type for unary ") + (op == UnaryOp::kNeg ? "-" : "+") +
         ": '" + type_name(v) + "'");
  if (v.is_float()) return Value::number(op == UnaryOp::kNeg ? -v.as_float() : v.as_float());
  if (op == UnaryOp::kPos) return Value::integer(v.as_int());
  return checked_int(v.as_int() == INT64_MIN, -v.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string())
        fail("TypeError: 'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.as_list().items)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    default:
      fail("TypeError: argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool compare_op(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return equals(a, b);
    case CompareOp::kNe:
      return !equals(a, b);
    case CompareOp::kLt:
      return compare(a, b, "<") < 0;
    case CompareOp::kLe:
      return compare(a, b, "<=") <= 0;
    case CompareOp::kGt:
      return compare(a, b, ">") > 0;
    case CompareOp::kGe:
      return compare(a, b, ">=") >= 0;
    case CompareOp::kIn:
      return contains(b, a);
    case CompareOp::kNotIn:
      return !contains(b, a);
  }
  return false;
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (name.rfind("__", 0) == 0) {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                            "' object is unsafe");
  }
  if (auto method = builtin_method(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_object()) {
    if (auto v = obj.as_object()->get_attr(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t n = length(obj);
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.as_list().items[static_cast<size_t>(i)];
      const std::string& text = obj.as_string();
      size_t pos = 0, n_bytes = 0;
      char32_t cp = 0;
      for (int64_t k = 0; k <= i; ++k) {
        pos += n_bytes;
        n_bytes = pystr::code_point_at(text, pos, cp);
      }
      return Value::string(text.substr(pos, n_bytes));
    }
    return Value::undefined("'" + type_name(obj) + " object' has no element " +
                            std::to_string(key.as_int()));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string())
    return Value::undefined("'" + type_name(obj) + " object' cannot be sliced");
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (int64_t i : slice_indices(static_cast<int64_t>(items.size()), start, stop, step))
      out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  std::u32string text = pystr::decode(obj.as_string());
  std::u32string out;
  for (int64_t i : slice_indices(static_cast<int64_t>(text.size()), start, stop, step))
    out.push_back(text[static_cast<size_t>(i)]);
  return Value::string(pystr::encode(out));
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) fail("TypeError: '" + type_name(callee) + "' object is not callable");
  return callee.as_callable().fn(args);
}

std::vector<std::optional<Value>> bind_args(const std::string& function, CallArgs& args,
                                            std::initializer_list<const char*> params) {
  std::vector<const char*> names(params);
  std::vector<std::optional<Value>> out(names.size());
  if (args.positional.size() > names.size())
    fail("TypeError: " + function + "() takes at most " + std::to_string(names.size()) +
         " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < names.size() && key != names[i]) ++i;
    if (i == names.size())
      fail("TypeError: " + function + "() got an unexpected keyword argument '" + key + "'");
    if (out[i])
      fail("TypeError: " + function + "() got multiple values for argument '" + key + "'");
    out[i] = value;
  }
  return out;
}

int64_t int_arg(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_integral())
    fail("TypeError: " + what + " must be an integer, not '" + type_name(v) + "'");
  return v.as_int();
}

std::string str_arg(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail("TypeError: " + what + " must be a string, not '" + type_name(v) + "'");
  return v.as_string();
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> values;
  if (args.is_list() && args.as_list().is_tuple)
    values = args.as_list().items;
  else
    values.push_back(args);
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) fail("ValueError: incomplete format");
    int precision = -1;
    if (fmt[i] == '.') {
      precision = 0;
      while (++i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
        precision = std::min(precision * 10 + (fmt[i] - '0'), 100);
      if (i >= fmt.size()) fail("ValueError: incomplete format");
    }
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= values.size()) fail("TypeError: not enough arguments for format string");
    const Value& v = values[next++];
    if (conv == 's') {
      std::string s = to_str(v);
      out += precision >= 0 ? pystr::encode(pystr::decode(s).substr(0, precision)) : s;
    } else if (conv == 'r') {
      out += repr(v);
    } else if (conv == 'd' || conv == 'i') {
      if (!v.is_number())
        fail("TypeError: %d format: a real number is required, not " + type_name(v));
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int());
    } else if (conv == 'f') {
      if (!v.is_number()) fail("TypeError: must be real number, not " + type_name(v));
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", precision < 0 ? 6 : precision, v.as_float());
      out += buf;
    } else {
      fail(std::string("unsupported format conversion '%") + conv + "'");
    }
  }
  if (next < values.size() && args.is_list() && args.as_list().is_tuple)
    fail("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace furlong::tokenizer::jinja
