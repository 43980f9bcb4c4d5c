// Global names of transformers' chat-template environment, and the namespace/loop objects.
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/ops.h"

namespace furlong::tokenizer::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value range_fn(CallArgs& args) {
  if (!args.keyword.empty()) fail("TypeError: range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    fail("TypeError: range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = int_arg(p[0], "range() argument");
  } else {
    start = int_arg(p[0], "range() argument");
    stop = int_arg(p[1], "range() argument");
    if (p.size() == 3) step = int_arg(p[2], "range() argument");
  }
  if (step == 0) fail("ValueError: range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange)
      fail(
          "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
          "(100000).");
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs)
Value dict_fn(CallArgs& args) {
  if (args.positional.size() > 1)
    fail("TypeError: dict expected at most 1 argument, got " +
         std::to_string(args.positional.size()));
  DictData d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      for (const auto& item : iterate(src)) {
        std::vector<Value> pair = iterate(item);
        if (pair.size() != 2)
          fail("ValueError: dictionary update sequence element has length " +
               std::to_string(pair.size()) + "; 2 is required");
        d.set(pair[0], pair[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d.set(Value::string(k), v);
  return Value::dict(std::move(d));
}

Value namespace_fn(CallArgs& args, NamespaceRegistry* registry) {
  Value dict = dict_fn(args);
  auto ns = std::make_shared<Namespace>();
  registry->push_back(ns);
  for (const auto& [k, v] : dict.as_dict().items) {
    if (!k.is_string()) fail("TypeError: namespace() keywords must be strings");
    ns->set_attr(k.as_string(), v);
  }
  return Value::object(std::move(ns));
}

Value raise_exception_fn(CallArgs& args) {
  std::string message = args.positional.empty() ? std::string() : to_str(args.positional[0]);
  fail("raise_exception: " + message);
}

Value strftime_now_fn(CallArgs& args) {
  auto a = bind_args("strftime_now", args, {"format"});
  if (!a[0]) fail("TypeError: strftime_now() missing 1 required positional argument: 'format'");
  std::string format = str_arg(*a[0], "strftime_now format");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (format.empty()) return Value::string("");
  std::string buf(256 + format.size() * 16, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  buf.resize(n);
  return Value::string(std::move(buf));
}

Value unsupported_global(const std::string& name) {
  return Value::callable(
      name, [name](CallArgs&) -> Value { fail("unsupported global function '" + name + "'"); });
}

}  // namespace

std::vector<std::pair<std::string, Value>> make_globals(NamespaceRegistry* registry) {
  return {
      {"range", Value::callable("range", range_fn)},
      {"dict", Value::callable("dict", dict_fn)},
      {"namespace",
       Value::callable("namespace", [registry](CallArgs& a) { return namespace_fn(a, registry); })},
      {"raise_exception", Value::callable("raise_exception", raise_exception_fn)},
      {"strftime_now", Value::callable("strftime_now", strftime_now_fn)},
      {"lipsum", unsupported_global("lipsum")},
      {"cycler", unsupported_global("cycler")},
      {"joiner", unsupported_global("joiner")},
  };
}

// ---- namespace ---------------------------------------------------------------------------

std::optional<Value> Namespace::get_attr(const std::string& name) const {
  if (const Value* v = attrs_.find(name)) return *v;
  return std::nullopt;
}

void Namespace::set_attr(const std::string& name, Value value) {
  if (!name.empty() && name[0] == '_')
    fail(
        "SecurityError: Chat templates cannot store underscore-prefixed attributes on a "
        "namespace, but got '" +
        name + "'. Please rename the attribute.");
  attrs_.set(Value::string(name), std::move(value));
}

std::string Namespace::repr() const {
  return "<Namespace " + jinja::repr(Value::dict(attrs_)) + ">";
}

// ---- loop --------------------------------------------------------------------------------

std::optional<Value> LoopObject::get_attr(const std::string& name) const {
  const auto n = static_cast<int64_t>(items_->size());
  const auto i = static_cast<int64_t>(index_);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") {
    if (i == 0) return Value::undefined("there is no previous item");
    return (*items_)[index_ - 1];
  }
  if (name == "nextitem") {
    if (i + 1 >= n) return Value::undefined("there is no next item");
    return (*items_)[index_ + 1];
  }
  if (name == "cycle") {
    size_t index = index_;
    return Value::callable("loop.cycle", [index](CallArgs& args) {
      if (args.positional.empty()) fail("TypeError: no items for cycling given");
      return args.positional[index % args.positional.size()];
    });
  }
  if (name == "changed") {
    auto state = last_changed_;
    return Value::callable("loop.changed", [state](CallArgs& args) {
      Value current = Value::list(args.positional);
      bool changed = !state->has_value() || !equals(**state, current);
      *state = current;
      return Value::boolean(changed);
    });
  }
  return std::nullopt;
}

std::string LoopObject::repr() const {
  return "<LoopContext " + std::to_string(index_ + 1) + "/" + std::to_string(items_->size()) + ">";
}

}  // namespace furlong::tokenizer::jinja
