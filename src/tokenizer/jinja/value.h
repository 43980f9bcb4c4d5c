// Template values: Python's data model as far as chat templates see it. Strings, numbers,
// booleans, None, lists/tuples and insertion-ordered dicts come from the JSON context; callables
// (globals, bound methods, macros), namespace and loop objects, and jinja2's Undefined are made
// while rendering. Lists and dicts are immutable once built (transformers renders in an
// ImmutableSandboxedEnvironment), so they are shared, as are strings (copying a Value is O(1),
// as in Python); only namespace objects change in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace furlong::tokenizer::jinja {

class Value;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // nesting of lists/dicts, bounded by kMaxValueDepth
};

// A dict keeps insertion order (Python 3.7+), which tojson and items() expose.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;  // set by Value::dict
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  // Inserts or overwrites in place (Python dict assignment keeps the original position).
  void set(Value key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Value(CallArgs&)>;

struct CallableData {
  std::string name;  // for messages: "range", "str.split", "macro 'foo'"
  NativeFunction fn;
};

// Objects with attributes: namespace(), the loop variable, ...
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // The attribute, or nullopt when it does not exist.
  virtual std::optional<Value> get_attr(const std::string& name) const = 0;
  // Only namespaces accept assignment; others raise.
  virtual void set_attr(const std::string& name, Value value);
  virtual std::string repr() const = 0;
};

struct Undefined {
  std::shared_ptr<const std::string> hint;  // why it is undefined, for the error it raises
};

struct None {};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kCallable,
    kObject
  };

  Value() : data_(Undefined{}) {}
  static Value undefined(std::string hint = {}) {
    return Value(Storage(Undefined{std::make_shared<const std::string>(std::move(hint))}));
  }
  static Value none() { return Value(Storage(None{})); }
  static Value boolean(bool b) { return Value(Storage(b)); }
  static Value integer(int64_t i) { return Value(Storage(i)); }
  static Value number(double d) { return Value(Storage(d)); }
  static Value string(std::string s) {
    return Value(Storage(std::make_shared<const std::string>(std::move(s))));
  }
  // list() and dict() raise a TemplateError beyond kMaxListItems items or kMaxValueDepth nesting.
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(DictData data);
  static Value callable(std::string name, NativeFunction fn);
  static Value object(std::shared_ptr<Object> obj) { return Value(Storage(std::move(obj))); }

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python numbers: bool is an int subclass.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  bool is_object() const { return kind() == Kind::kObject; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return is_bool() ? int64_t{as_bool()} : std::get<int64_t>(data_); }
  double as_float() const;  // any number
  const std::string& as_string() const {
    return *std::get<std::shared_ptr<const std::string>>(data_);
  }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  const CallableData& as_callable() const {
    return *std::get<std::shared_ptr<const CallableData>>(data_);
  }
  const std::shared_ptr<Object>& as_object() const {
    return std::get<std::shared_ptr<Object>>(data_);
  }
  const std::string& undefined_hint() const;

 private:
  using Storage =
      std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const std::string>,
                   std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
                   std::shared_ptr<const CallableData>, std::shared_ptr<Object>>;
  explicit Value(Storage data) : data_(std::move(data)) {}
  Storage data_;
};

// Python type name ("str", "int", "dict", "NoneType", ...) for messages.
std::string type_name(const Value& v);
// Raises the error an Undefined raises when it is used for anything but printing/testing.
[[noreturn]] void fail_undefined(const Value& v);
// The message that error carries.
std::string undefined_message(const Value& v);

bool truthy(const Value& v);
// str(v) as jinja2 prints it: Undefined -> "", None -> "None", lists/dicts as Python repr.
std::string to_str(const Value& v);
std::string repr(const Value& v);
// Python ==, and <, <=, >, >= (raises TypeError-like errors for unorderable types).
bool equals(const Value& a, const Value& b);
// -1, 0, 1; raises for types Python cannot order.
int compare(const Value& a, const Value& b, const char* op);

// Items of an iterable (list/tuple -> items, dict -> keys, string -> characters,
// Undefined -> empty); raises for non-iterables.
std::vector<Value> iterate(const Value& v);
// Python len(); raises for values without a length.
int64_t length(const Value& v);

// JSON context -> values (objects keep key order).
Value from_json(const nlohmann::ordered_json& j);

// Python json.dumps as transformers' tojson filter calls it.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonDumpOptions& options);

}  // namespace furlong::tokenizer::jinja
