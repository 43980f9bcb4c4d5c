// Methods of str, dict and list values (`s.split(',')`, `d.items()`, ...), bound to their
// receiver. Python attributes we do not implement are callables that raise "unsupported", so a
// template that only tests for them still renders; modifying list/dict methods are Undefined,
// as in jinja2's ImmutableSandboxedEnvironment.
#include <algorithm>
#include <map>

#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/pystr.h"

namespace furlong::tokenizer::jinja {
namespace {

using StrMethod = Value (*)(const std::string& self, CallArgs& args);
using ListMethod = Value (*)(const Value& self, CallArgs& args);

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::list(std::move(items));
}

std::optional<std::string> opt_str(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  return str_arg(*v, what);
}

// startswith/endswith: the argument is a string or a tuple of strings.
Value affix_test(const std::string& self, CallArgs& args, const char* fn, bool prefix) {
  auto a = bind_args(fn, args, {"prefix"});
  if (!a[0]) fail(std::string("TypeError: ") + fn + "() takes at least 1 argument (0 given)");
  std::vector<Value> options;
  if (a[0]->is_list() && a[0]->as_list().is_tuple)
    options = a[0]->as_list().items;
  else
    options.push_back(*a[0]);
  for (const auto& o : options) {
    std::string p = str_arg(o, std::string(fn) + " argument");
    bool hit =
        prefix ? self.compare(0, p.size(), p) == 0 && self.size() >= p.size()
               : self.size() >= p.size() && self.compare(self.size() - p.size(), p.size(), p) == 0;
    if (hit) return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value strip_method(const std::string& self, CallArgs& args, bool left, bool right) {
  auto a = bind_args("strip", args, {"chars"});
  return Value::string(pystr::strip(self, opt_str(a[0], "strip arg"), left, right));
}

Value split_method(const std::string& self, CallArgs& args, bool from_right) {
  auto a = bind_args("split", args, {"sep", "maxsplit"});
  int64_t maxsplit = a[1] ? int_arg(*a[1], "maxsplit") : -1;
  return str_list(pystr::split(self, opt_str(a[0], "separator"), maxsplit, from_right));
}

Value find_method(const std::string& self, CallArgs& args, bool from_right, bool raise) {
  auto a = bind_args("find", args, {"sub"});
  if (!a[0]) fail("TypeError: find() takes at least 1 argument (0 given)");
  int64_t i = pystr::find(self, str_arg(*a[0], "find argument"), from_right);
  if (i < 0 && raise) fail("ValueError: substring not found");
  return Value::integer(i);
}

template <bool (*Pred)(char32_t)>
Value char_class(const std::string& self, CallArgs& args) {
  bind_args("is...", args, {});
  std::u32string t = pystr::decode(self);
  return Value::boolean(!t.empty() && std::all_of(t.begin(), t.end(), Pred));
}

bool alnum(char32_t c) {
  return pystr::is_alpha(c) || pystr::is_digit(c);
}

// islower/isupper: at least one cased character and none of the other case.
Value case_test(const std::string& self, CallArgs& args, bool want_lower) {
  bind_args(want_lower ? "islower" : "isupper", args, {});
  bool any_cased = false;
  for (char32_t c : pystr::decode(self)) {
    if (!pystr::is_cased(c)) continue;
    any_cased = true;
    bool is_lower = pystr::to_upper(c) != c || c == 0xDF;
    if (is_lower != want_lower) return Value::boolean(false);
  }
  return Value::boolean(any_cased);
}

Value pad(const std::string& self, CallArgs& args, int where) {  // -1 ljust, 0 center, 1 rjust
  auto a = bind_args("pad", args, {"width", "fillchar"});
  if (!a[0]) fail("TypeError: missing width argument");
  int64_t width = int_arg(*a[0], "width");
  std::u32string fill = a[1] ? pystr::decode(str_arg(*a[1], "fillchar")) : U" ";
  if (fill.size() != 1) fail("TypeError: The fill character must be exactly one character long");
  int64_t len = pystr::length(self);
  if (width <= len) return Value::string(self);
  if (width > static_cast<int64_t>(kMaxStringBytes / 4)) fail("MemoryError: width is too large");
  int64_t total = width - len;
  int64_t left = where < 0 ? 0 : (where > 0 ? total : total / 2 + (total & width & 1));
  std::string l = pystr::encode(std::u32string(static_cast<size_t>(left), fill[0]));
  std::string r = pystr::encode(std::u32string(static_cast<size_t>(total - left), fill[0]));
  return Value::string(l + self + r);
}

Value partition(const std::string& self, CallArgs& args, bool from_right) {
  auto a = bind_args("partition", args, {"sep"});
  if (!a[0]) fail("TypeError: partition() takes exactly one argument (0 given)");
  std::string sep = str_arg(*a[0], "separator");
  if (sep.empty()) fail("ValueError: empty separator");
  size_t pos = from_right ? self.rfind(sep) : self.find(sep);
  if (pos == std::string::npos) {
    if (from_right)
      return Value::list({Value::string(""), Value::string(""), Value::string(self)}, true);
    return Value::list({Value::string(self), Value::string(""), Value::string("")}, true);
  }
  return Value::list({Value::string(self.substr(0, pos)), Value::string(sep),
                      Value::string(self.substr(pos + sep.size()))},
                     true);
}

const std::map<std::string, StrMethod>& str_methods() {
  static const std::map<std::string, StrMethod> methods = {
      {"startswith",
       [](const std::string& s, CallArgs& a) { return affix_test(s, a, "startswith", true); }},
      {"endswith",
       [](const std::string& s, CallArgs& a) { return affix_test(s, a, "endswith", false); }},
      {"strip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, true, true); }},
      {"lstrip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, true, false); }},
      {"rstrip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, false, true); }},
      {"split", [](const std::string& s, CallArgs& a) { return split_method(s, a, false); }},
      {"rsplit", [](const std::string& s, CallArgs& a) { return split_method(s, a, true); }},
      {"splitlines",
       [](const std::string& s, CallArgs& a) {
         auto b = bind_args("splitlines", a, {"keepends"});
         return str_list(pystr::splitlines(s, b[0] && truthy(*b[0])));
       }},
      {"upper",
       [](const std::string& s, CallArgs& a) {
         bind_args("upper", a, {});
         return Value::string(pystr::upper(s));
       }},
      {"lower",
       [](const std::string& s, CallArgs& a) {
         bind_args("lower", a, {});
         return Value::string(pystr::lower(s));
       }},
      {"title",
       [](const std::string& s, CallArgs& a) {
         bind_args("title", a, {});
         return Value::string(pystr::title(s));
       }},
      {"capitalize",
       [](const std::string& s, CallArgs& a) {
         bind_args("capitalize", a, {});
         return Value::string(pystr::capitalize(s));
       }},
      {"swapcase",
       [](const std::string& s, CallArgs& a) {
         bind_args("swapcase", a, {});
         return Value::string(pystr::swapcase(s));
       }},
      {"replace",
       [](const std::string& s, CallArgs& a) {
         auto b = bind_args("replace", a, {"old", "new", "count"});
         if (!b[0] || !b[1]) fail("TypeError: replace() takes at least 2 arguments");
         int64_t count = b[2] ? int_arg(*b[2], "count") : -1;
         return Value::string(
             pystr::replace(s, str_arg(*b[0], "old"), str_arg(*b[1], "new"), count));
       }},
      {"find", [](const std::string& s, CallArgs& a) { return find_method(s, a, false, false); }},
      {"rfind", [](const std::string& s, CallArgs& a) { return find_method(s, a, true, false); }},
      {"index", [](const std::string& s, CallArgs& a) { return find_method(s, a, false, true); }},
      {"rindex", [](const std::string& s, CallArgs& a) { return find_method(s, a, true, true); }},
      {"count",
       [](const std::string& s, CallArgs& a) {
         auto b = bind_args("count", a, {"sub"});
         if (!b[0]) fail("TypeError: count() takes at least 1 argument (0 given)");
         return Value::integer(pystr::count(s, str_arg(*b[0], "count argument")));
       }},
      {"join",
       [](const std::string& s, CallArgs& a) {
         auto b = bind_args("join", a, {"iterable"});
         if (!b[0]) fail("TypeError: join() takes exactly one argument (0 given)");
         std::string out;
         bool first = true;
         for (const auto& item : iterate(*b[0])) {
           if (!first) out += s;
           first = false;
           out += str_arg(item, "sequence item");
           if (out.size() > kMaxStringBytes) fail("MemoryError: joined string is too large");
         }
         return Value::string(std::move(out));
       }},
      {"isdigit", char_class<pystr::is_digit>},
      {"isdecimal", char_class<pystr::is_digit>},
      {"isnumeric", char_class<pystr::is_digit>},
      {"isalpha", char_class<pystr::is_alpha>},
      {"isalnum", char_class<alnum>},
      {"isspace", char_class<pystr::is_space>},
      {"islower", [](const std::string& s, CallArgs& a) { return case_test(s, a, true); }},
      {"isupper", [](const std::string& s, CallArgs& a) { return case_test(s, a, false); }},
      {"removeprefix",
       [](const std::string& s, CallArgs& a) {
         auto b = bind_args("removeprefix", a, {"prefix"});
         std::string p = b[0] ? str_arg(*b[0], "prefix") : "";
         return Value::string(s.rfind(p, 0) == 0 ? s.substr(p.size()) : s);
       }},
      {"removesuffix",
       [](const std::string& s, CallArgs& a) {
         auto b = bind_args("removesuffix", a, {"suffix"});
         std::string p = b[0] ? str_arg(*b[0], "suffix") : "";
         bool hit =
             !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
         return Value::string(hit ? s.substr(0, s.size() - p.size()) : s);
       }},
      {"ljust", [](const std::string& s, CallArgs& a) { return pad(s, a, -1); }},
      {"center", [](const std::string& s, CallArgs& a) { return pad(s, a, 0); }},
      {"rjust", [](const std::string& s, CallArgs& a) { return pad(s, a, 1); }},
      {"partition", [](const std::string& s, CallArgs& a) { return partition(s, a, false); }},
      {"rpartition", [](const std::string& s, CallArgs& a) { return partition(s, a, true); }},
  };
  return methods;
}

// Python str attributes that exist but are not implemented here.
const char* const kUnimplementedStr[] = {"casefold",   "encode",    "expandtabs",   "format",
                                         "format_map", "isascii",   "isidentifier", "isprintable",
                                         "istitle",    "maketrans", "translate",    "zfill"};

Value items_of(const DictData& d, int which) {  // 0 items, 1 keys, 2 values
  std::vector<Value> out;
  out.reserve(d.items.size());
  for (const auto& [k, v] : d.items) {
    if (which == 0)
      out.push_back(Value::list({k, v}, true));
    else
      out.push_back(which == 1 ? k : v);
  }
  return Value::list(std::move(out));
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  auto bind = [&](auto fn) {
    return Value::callable("dict." + name, [self, fn](CallArgs& a) { return fn(self, a); });
  };
  if (name == "items" || name == "keys" || name == "values") {
    int which = name == "items" ? 0 : (name == "keys" ? 1 : 2);
    return bind([which, name](const Value& d, CallArgs& a) {
      bind_args(name, a, {});
      return items_of(d.as_dict(), which);
    });
  }
  if (name == "get") {
    return bind([](const Value& d, CallArgs& a) {
      auto b = bind_args("get", a, {"key", "default"});
      if (!b[0]) fail("TypeError: get expected at least 1 argument, got 0");
      const Value* v = d.as_dict().find(*b[0]);
      return v ? *v : b[1].value_or(Value::none());
    });
  }
  if (name == "copy") return bind([](const Value& d, CallArgs&) { return d; });
  if (name == "fromkeys")
    return Value::callable("dict.fromkeys",
                           [](CallArgs&) -> Value { fail("unsupported method dict.fromkeys"); });
  static const char* kMutating[] = {"clear", "pop", "popitem", "setdefault", "update"};
  for (const char* m : kMutating)
    if (name == m)
      return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe");
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, const std::string& name) {
  if (name == "count" || name == "index") {
    bool is_count = name == "count";
    return Value::callable("list." + name, [self, is_count](CallArgs& a) {
      auto b = bind_args(is_count ? "count" : "index", a, {"value"});
      if (!b[0]) fail("TypeError: missing argument");
      const auto& items = self.as_list().items;
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], *b[0])) continue;
        if (!is_count) return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (!is_count) fail("ValueError: " + repr(*b[0]) + " is not in list");
      return Value::integer(n);
    });
  }
  if (name == "copy" && !self.as_list().is_tuple)
    return Value::callable("list.copy", [self](CallArgs&) { return self; });
  static const char* kMutating[] = {"append", "clear",  "extend",  "insert",
                                    "pop",    "remove", "reverse", "sort"};
  if (!self.as_list().is_tuple)
    for (const char* m : kMutating)
      if (name == m)
        return Value::undefined("access to attribute '" + name + "' of 'list' object is unsafe");
  return std::nullopt;
}

}  // namespace

std::optional<Value> builtin_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    auto it = str_methods().find(name);
    if (it != str_methods().end()) {
      StrMethod fn = it->second;
      std::string self = obj.as_string();
      return Value::callable("str." + name, [self, fn](CallArgs& a) { return fn(self, a); });
    }
    for (const char* m : kUnimplementedStr)
      if (name == m)
        return Value::callable("str." + name, [name](CallArgs&) -> Value {
          fail("unsupported method str." + name + "()");
        });
    return std::nullopt;
  }
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  return std::nullopt;
}

}  // namespace furlong::tokenizer::jinja
