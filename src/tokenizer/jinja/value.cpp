// Template values: Python truthiness, str()/repr(), equality and ordering, iteration, and the
// JSON bridge (context in, tojson out). See value.h.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/pystr.h"

namespace furlong::tokenizer::jinja {

// ---- construction -------------------------------------------------------------------------

namespace {

int nesting(const Value& v) {
  if (v.is_list()) return v.as_list().depth;
  if (v.is_dict()) return v.as_dict().depth;
  return 0;
}

int checked_depth(int child_depth) {
  if (child_depth + 1 > kMaxValueDepth)
    fail("value nesting is too deep (more than " + std::to_string(kMaxValueDepth) + " levels)");
  return child_depth + 1;
}

}  // namespace

Value Value::list(std::vector<Value> items, bool is_tuple) {
  if (items.size() > kMaxListItems)
    fail("MemoryError: list longer than " + std::to_string(kMaxListItems) + " items");
  auto data = std::make_shared<ListData>();
  int deepest = 0;
  for (const auto& item : items) deepest = std::max(deepest, nesting(item));
  data->depth = checked_depth(deepest);
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  return Value(Storage(std::shared_ptr<const ListData>(std::move(data))));
}

Value Value::dict(DictData data) {
  int deepest = 0;
  for (const auto& [k, v] : data.items) deepest = std::max({deepest, nesting(k), nesting(v)});
  data.depth = checked_depth(deepest);
  return Value(
      Storage(std::shared_ptr<const DictData>(std::make_shared<DictData>(std::move(data)))));
}

const std::string& Value::undefined_hint() const {
  static const std::string kNone;
  const auto& hint = std::get<Undefined>(data_).hint;
  return hint ? *hint : kNone;
}

Value Value::callable(std::string name, NativeFunction fn) {
  auto data = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn)});
  return Value(Storage(std::shared_ptr<const CallableData>(std::move(data))));
}

double Value::as_float() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

void Object::set_attr(const std::string& name, Value) {
  fail("cannot assign attribute '" + name + "' on a '" + type_name() +
       "' object (only namespace() objects accept `set obj.attr = ...`)");
}

// ---- descriptions ------------------------------------------------------------------------

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kObject:
      return v.as_object()->type_name();
  }
  return "?";
}

std::string undefined_message(const Value& v) {
  const std::string& hint = v.undefined_hint();
  return hint.empty() ? "value is undefined" : hint;
}

void fail_undefined(const Value& v) {
  fail("UndefinedError: " + undefined_message(v));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().items.empty();
    case Value::Kind::kCallable:
    case Value::Kind::kObject:
      return true;
  }
  return false;
}

namespace {

// repr() recursion, which objects (namespaces) can make cyclic: bounded per thread.
thread_local int repr_depth = 0;

class ReprDepth {
 public:
  ReprDepth() {
    if (++repr_depth > kMaxValueDepth) {
      --repr_depth;
      fail("RecursionError: maximum recursion depth exceeded while getting the repr of an object");
    }
  }
  ~ReprDepth() { --repr_depth; }
  ReprDepth(const ReprDepth&) = delete;
  ReprDepth& operator=(const ReprDepth&) = delete;
};

void check_size(const std::string& out) {
  if (out.size() > kMaxStringBytes)
    fail("MemoryError: string longer than " + std::to_string(kMaxStringBytes) + " bytes");
}

}  // namespace

std::string repr(const Value& v) {
  ReprDepth guard;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return pystr::format_float(v.as_float());
    case Value::Kind::kString:
      return pystr::repr(v.as_string());
    case Value::Kind::kList: {
      const auto& l = v.as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr(l.items[i]);
        check_size(out);
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      return out + (l.is_tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(val);
        check_size(out);
      }
      return out + "}";
    }
    case Value::Kind::kCallable:
      return "<function " + v.as_callable().name + ">";
    case Value::Kind::kObject:
      return v.as_object()->repr();
  }
  return "";
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_string()) return v.as_string();
  return repr(v);
}

// ---- comparison --------------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (&x == &y) return true;  // identity implies equality, as in Python's containers
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, val] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !equals(val, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    case Value::Kind::kObject:
      return a.as_object() == b.as_object();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral())
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail(std::string("TypeError: '") + op + "' not supported between instances of '" + type_name(a) +
       "' and '" + type_name(b) + "'");
}

// ---- containers --------------------------------------------------------------------------

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      if (static_cast<size_t>(pystr::length(v.as_string())) > kMaxListItems)
        fail("MemoryError: string too long to iterate");
      std::vector<Value> chars;
      for (char32_t c : pystr::decode(v.as_string())) {
        std::string s;
        pystr::append_utf8(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default:
      fail("TypeError: '" + type_name(v) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return pystr::length(v.as_string());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    default:
      fail("TypeError: object of type '" + type_name(v) + "' has no len()");
  }
}

// ---- JSON --------------------------------------------------------------------------------

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail("JSON value nesting is too deep");
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case T::number_float:
      return Value::number(j.get<double>());
    case T::string:
      return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      DictData d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items())
        d.items.emplace_back(Value::string(k), from_json_at(e, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      fail("unsupported JSON value of type " + std::string(j.type_name()));
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 1);
}

namespace {

void json_escape(std::string& out, const std::string& s, bool ensure_ascii) {
  char buf[16];
  out.push_back('"');
  for (char32_t c : pystr::decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c > 0xFFFF) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)),
                      unsigned(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      }
      out += buf;
    } else {
      pystr::append_utf8(out, c);
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return pystr::format_float(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.as_string();
    case Value::Kind::kFloat:
      return json_float(k.as_float());
    case Value::Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    default:
      fail("TypeError: keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

struct JsonWriter {
  const JsonDumpOptions& opt;
  std::string out;
  int depth = 0;

  void newline(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *opt.indent;
  }

  // Opens a container, writes each element with `write_one(i)`, closes it.
  template <typename Fn>
  void container(char open, char close, size_t n, Fn&& write_one) {
    if (n == 0) {
      out.push_back(open);
      out.push_back(close);
      return;
    }
    if (++depth > 512) fail("ValueError: JSON nesting too deep");
    out.push_back(open);
    if (opt.indent) newline(depth);
    for (size_t i = 0; i < n; ++i) {
      if (i) {
        out += opt.item_separator;
        if (opt.indent) newline(depth);
      }
      write_one(i);
    }
    --depth;
    if (opt.indent) newline(depth);
    out.push_back(close);
  }

  void write_dict(const DictData& d) {
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : d.items) items.push_back(&kv);
    if (opt.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
        return compare(a->first, b->first, "<") < 0;
      });
    }
    container('{', '}', items.size(), [&](size_t i) {
      json_escape(out, json_key(items[i]->first), opt.ensure_ascii);
      out += opt.key_separator;
      write(items[i]->second);
    });
  }

  void write(const Value& v) {
    check_size(out);
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return;
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out += json_float(v.as_float());
        return;
      case Value::Kind::kString:
        json_escape(out, v.as_string(), opt.ensure_ascii);
        return;
      case Value::Kind::kList: {
        const auto& items = v.as_list().items;
        container('[', ']', items.size(), [&](size_t i) { write(items[i]); });
        return;
      }
      case Value::Kind::kDict:
        write_dict(v.as_dict());
        return;
      default:
        fail("TypeError: Object of type " + type_name(v) + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  JsonWriter w{options, {}, 0};
  w.write(v);
  return std::move(w.out);
}

}  // namespace furlong::tokenizer::jinja
