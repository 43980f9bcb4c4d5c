// Jinja filters with jinja2 3.1's semantics, plus transformers' own tojson (json.dumps with
// ensure_ascii=False and optional indent/separators/sort_keys). Filters that jinja2 returns as
// generators (map, select, unique, reverse, ...) return lists here.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/pystr.h"

namespace furlong::tokenizer::jinja {
namespace {

using FilterFn = Value (*)(const Value& v, CallArgs& args);

Value str_value(std::string s) {
  return Value::string(std::move(s));
}

// make_attrgetter: "a.b.0" looks up a, then b, then item 0 (items first, then attributes).
Value lookup_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value cur = item;
  for (const auto& part : pystr::split(attribute.as_string(), std::string("."), -1, false)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value::integer(std::stoll(part)))
                 : get_item(cur, Value::string(part));
  }
  return cur;
}

Value lower_if_string(const Value& v) {
  return v.is_string() ? Value::string(pystr::lower(v.as_string())) : v;
}

// ---- conversions -------------------------------------------------------------------------

// Python int(str, base) for base 10 (whitespace, sign and underscores allowed).
std::optional<int64_t> parse_int(std::string s, int base) {
  s = pystr::strip(s, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isalnum((unsigned char)s[i - 1])) continue;
    digits.push_back(s[i]);
  }
  bool neg = false;
  size_t p = 0;
  if (p < digits.size() && (digits[p] == '+' || digits[p] == '-')) neg = digits[p++] == '-';
  if (base == 16 && digits.compare(p, 2, "0x") == 0) p += 2;
  if (base == 8 && digits.compare(p, 2, "0o") == 0) p += 2;
  if (base == 2 && digits.compare(p, 2, "0b") == 0) p += 2;
  if (p >= digits.size()) return std::nullopt;
  int64_t v = 0;
  auto res = std::from_chars(digits.data() + p, digits.data() + digits.size(), v, base);
  if (res.ec != std::errc() || res.ptr != digits.data() + digits.size()) return std::nullopt;
  return neg ? -v : v;
}

// Python float(str): whitespace, underscores, inf/nan accepted.
std::optional<double> parse_float(const std::string& text) {
  std::string s = pystr::lower(pystr::strip(text, std::nullopt, true, true));
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  bool neg = s[0] == '-';
  std::string body = (s[0] == '-' || s[0] == '+') ? s.substr(1) : s;
  if (body == "inf" || body == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return std::nan("");
  double v = 0;
  auto res = std::from_chars(s.data() + (s[0] == '+' ? 1 : 0), s.data() + s.size(), v);
  if (res.ptr != s.data() + s.size()) return std::nullopt;
  if (res.ec == std::errc::result_out_of_range) return neg ? -HUGE_VAL : HUGE_VAL;
  return v;
}

Value int_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("int", args, {"default", "base"});
  Value dflt = a[0].value_or(Value::integer(0));
  int base = a[1] ? static_cast<int>(int_arg(*a[1], "base")) : 10;
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(*d));
  }
  return dflt;
}

Value float_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("float", args, {"default"});
  Value dflt = a[0].value_or(Value::number(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  return dflt;
}

Value round_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("round", args, {"precision", "method"});
  int64_t precision = a[0] ? int_arg(*a[0], "precision") : 0;
  std::string method = a[1] ? str_arg(*a[1], "method") : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    fail("FilterArgumentError: method must be common, ceil or floor");
  if (!v.is_number()) fail("TypeError: type " + type_name(v) + " doesn't define __round__ method");
  precision = std::clamp<int64_t>(precision, -400, 400);
  double x = v.as_float();
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method != "common") {
    double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value::number(r / scale);
  }
  if (v.is_integral()) {
    if (precision >= 0) return Value::integer(v.as_int());
    return Value::integer(static_cast<int64_t>(std::nearbyint(x / std::pow(10.0, -precision)) *
                                               std::pow(10.0, -precision)));
  }
  if (!std::isfinite(x)) return v;
  if (precision < 0) {
    double f = std::pow(10.0, static_cast<double>(-precision));
    return Value::number(std::nearbyint(x / f) * f);
  }
  // printf rounds the exact binary value half-to-even, as Python's round() does.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
  double r = 0;
  std::from_chars(buf, buf + std::strlen(buf), r);
  return Value::number(r);
}

// ---- strings -----------------------------------------------------------------------------

Value indent_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("indent", args, {"width", "first", "blank"});
  std::string indention;
  if (a[0] && a[0]->is_string())
    indention = a[0]->as_string();
  else
    indention = std::string(
        static_cast<size_t>(std::clamp<int64_t>(a[0] ? int_arg(*a[0], "width") : 4, 0, 1 << 20)),
        ' ');
  bool first = a[1] && truthy(*a[1]);
  bool blank = a[2] && truthy(*a[2]);
  std::vector<std::string> lines = pystr::splitlines(to_str(v) + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    bool indent = i > 0 && (blank || !lines[i].empty());
    out += (indent ? indention : "") + lines[i];
    if (out.size() > kMaxStringBytes) fail("MemoryError: indented string is too large");
  }
  if (first) out = indention + out;
  return str_value(std::move(out));
}

Value title_filter(const Value& v, CallArgs& args) {
  bind_args("title", args, {});
  // jinja2 capitalizes each run that follows one of - ( { [ < or whitespace.
  std::u32string t = pystr::decode(to_str(v));
  auto is_sep = [](char32_t c) {
    return pystr::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  bool word_start = true;
  for (auto& c : t) {
    if (is_sep(c)) {
      word_start = true;
      continue;
    }
    c = word_start ? pystr::to_upper(c) : pystr::to_lower(c);
    word_start = false;
  }
  return str_value(pystr::encode(t));
}

Value escape_filter(const Value& v, CallArgs& args) {
  bind_args("escape", args, {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return str_value(std::move(out));
}

Value wordcount_filter(const Value& v, CallArgs& args) {
  bind_args("wordcount", args, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : pystr::decode(to_str(v))) {
    bool w = pystr::is_alpha(c) || pystr::is_digit(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

// transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
Value tojson_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions opt;
  opt.ensure_ascii = a[0] && truthy(*a[0]);
  opt.sort_keys = a[3] && truthy(*a[3]);
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string())
      opt.indent = a[1]->as_string();
    else
      opt.indent = std::string(
          static_cast<size_t>(std::clamp<int64_t>(int_arg(*a[1], "indent"), 0, 4096)), ' ');
    opt.item_separator = ",";
  }
  if (a[2] && !a[2]->is_none()) {
    std::vector<Value> seps = iterate(*a[2]);
    if (seps.size() != 2)
      fail("ValueError: separators must be an (item_separator, key_separator) pair");
    opt.item_separator = str_arg(seps[0], "item separator");
    opt.key_separator = str_arg(seps[1], "key separator");
  }
  return str_value(to_json(v, opt));
}

// ---- sequences ---------------------------------------------------------------------------

Value join_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("join", args, {"d", "attribute"});
  std::string sep = a[0] ? to_str(*a[0]) : "";
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(a[1] && !a[1]->is_none() ? lookup_path(item, *a[1]) : item);
    if (out.size() > kMaxStringBytes) fail("MemoryError: joined string is too large");
  }
  return str_value(std::move(out));
}

Value first_filter(const Value& v, CallArgs& args) {
  bind_args("first", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value last_filter(const Value& v, CallArgs& args) {
  bind_args("last", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value items_filter(const Value& v, CallArgs& args) {
  bind_args("items", args, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({k, val}, true));
  return Value::list(std::move(out));
}

Value map_filter(const Value& v, CallArgs& args) {
  if (!truthy(v)) return Value::list({});
  std::vector<Value> out;
  bool by_attribute =
      args.positional.empty() && !args.keyword.empty() && args.keyword[0].first == "attribute";
  if (by_attribute || (args.positional.empty() && !args.keyword.empty())) {
    auto a = bind_args("map", args, {"attribute", "default"});
    if (!a[0]) fail("FilterArgumentError: map requires a filter argument");
    for (const auto& item : iterate(v)) {
      Value got = lookup_path(item, *a[0]);
      if (got.is_undefined() && a[1] && !a[1]->is_none()) got = *a[1];
      out.push_back(got);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) fail("FilterArgumentError: map requires a filter argument");
  std::string name = str_arg(args.positional[0], "map filter name");
  if (!is_supported_filter(name)) fail("unsupported filter '" + name + "'");
  for (const auto& item : iterate(v)) {
    CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
    out.push_back(apply_filter(name, item, rest));
  }
  return Value::list(std::move(out));
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result == keep.
Value select_items(const Value& v, CallArgs& args, bool keep, bool by_attr) {
  if (!truthy(v)) return Value::list({});
  size_t off = by_attr ? 1 : 0;
  if (by_attr && args.positional.empty())
    fail("FilterArgumentError: Missing parameter for attribute name");
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    Value subject = by_attr ? lookup_path(item, args.positional[0]) : item;
    bool result;
    if (args.positional.size() > off) {
      std::string test = str_arg(args.positional[off], "test name");
      if (!is_supported_test(test)) fail("unsupported test '" + test + "'");
      CallArgs rest{{args.positional.begin() + off + 1, args.positional.end()}, args.keyword};
      result = apply_test(test, subject, rest);
    } else {
      result = truthy(subject);
    }
    if (result == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value unique_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a[0] && truthy(*a[0]);
  std::vector<Value> seen, out;
  for (const auto& item : iterate(v)) {
    Value key = a[1] && !a[1]->is_none() ? lookup_path(item, *a[1]) : item;
    if (!case_sensitive) key = lower_if_string(key);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
      continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value sort_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = a[0] && truthy(*a[0]);
  bool case_sensitive = a[1] && truthy(*a[1]);
  std::vector<std::pair<std::vector<Value>, Value>> keyed;
  std::vector<Value> attrs;
  if (a[2] && a[2]->is_string())
    for (const auto& p : pystr::split(a[2]->as_string(), std::string(","), -1, false))
      attrs.push_back(Value::string(p));
  else if (a[2] && !a[2]->is_none())
    attrs.push_back(*a[2]);
  for (const auto& item : iterate(v)) {
    std::vector<Value> key;
    if (attrs.empty()) key.push_back(item);
    for (const auto& at : attrs) key.push_back(lookup_path(item, at));
    if (!case_sensitive)
      for (auto& k : key) k = lower_if_string(k);
    keyed.emplace_back(std::move(key), item);
  }
  auto less = [](const std::vector<Value>& x, const std::vector<Value>& y) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], "<") < 0;
    }
    return false;
  };
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value dictsort_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("dictsort", args, {"case_sensitive", "by", "reverse"});
  bool case_sensitive = a[0] && truthy(*a[0]);
  std::string by = a[1] ? str_arg(*a[1], "by") : "key";
  if (by != "key" && by != "value")
    fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  bool reverse = a[2] && truthy(*a[2]);
  if (!v.is_dict()) fail("TypeError: dictsort needs a mapping");
  std::vector<Value> items;
  for (const auto& [k, val] : v.as_dict().items) items.push_back(Value::list({k, val}, true));
  size_t pos = by == "key" ? 0 : 1;
  auto key = [&](const Value& item) {
    const Value& k = item.as_list().items[pos];
    return case_sensitive ? k : lower_if_string(k);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x), "<") < 0 : compare(key(x), key(y), "<") < 0;
  });
  return Value::list(std::move(items));
}

Value min_max(const Value& v, CallArgs& args, bool want_max) {
  auto a = bind_args(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool case_sensitive = a[0] && truthy(*a[0]);
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = a[1] && !a[1]->is_none() ? lookup_path(item, *a[1]) : item;
    return case_sensitive ? k : lower_if_string(k);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = compare(key(items[i]), key(items[best]), want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value sum_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("sum", args, {"attribute", "start"});
  Value total = a[1].value_or(Value::integer(0));
  for (const auto& item : iterate(v))
    total = binary_op(BinaryOp::kAdd, total,
                      a[0] && !a[0]->is_none() ? lookup_path(item, *a[0]) : item);
  return total;
}

Value reverse_filter(const Value& v, CallArgs& args) {
  bind_args("reverse", args, {});
  if (v.is_string()) {
    std::u32string t = pystr::decode(v.as_string());
    std::reverse(t.begin(), t.end());
    return str_value(pystr::encode(t));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value batch_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("batch", args, {"linecount", "fill_with"});
  if (!a[0]) fail("TypeError: batch() missing 1 required positional argument: 'linecount'");
  int64_t n = int_arg(*a[0], "linecount");
  if (n <= 0) fail("ValueError: batch size must be positive");
  std::vector<Value> out, cur;
  for (const auto& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (a[1] && !a[1]->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*a[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value attr_filter(const Value& v, CallArgs& args) {
  auto a = bind_args("attr", args, {"name"});
  if (!a[0]) fail("TypeError: attr() missing 1 required positional argument: 'name'");
  std::string name = str_arg(*a[0], "attribute name");
  if (v.is_undefined()) fail_undefined(v);
  if (auto m = builtin_method(v, name)) return *m;
  if (v.is_object())
    if (auto got = v.as_object()->get_attr(name)) return *got;
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

Value format_filter(const Value& v, CallArgs& args) {
  if (!args.keyword.empty()) fail("unsupported: format filter with keyword arguments");
  return str_value(percent_format(to_str(v), Value::list(args.positional, true)));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"abs",
       [](const Value& v, CallArgs& a) {
         bind_args("abs", a, {});
         if (v.is_float()) return Value::number(std::fabs(v.as_float()));
         return v.is_integral() && v.as_int() < 0 ? unary_op(UnaryOp::kNeg, v)
                                                  : unary_op(UnaryOp::kPos, v);
       }},
      {"attr", attr_filter},
      {"batch", batch_filter},
      {"capitalize",
       [](const Value& v, CallArgs& a) {
         bind_args("capitalize", a, {});
         return str_value(pystr::capitalize(to_str(v)));
       }},
      {"center",
       [](const Value& v, CallArgs& a) {
         auto b = bind_args("center", a, {"width"});
         CallArgs inner{{b[0].value_or(Value::integer(80))}, {}};
         return call_value(*builtin_method(Value::string(to_str(v)), "center"), inner);
       }},
      {"count",
       [](const Value& v, CallArgs& a) {
         bind_args("count", a, {});
         return Value::integer(length(v));
       }},
      {"length",
       [](const Value& v, CallArgs& a) {
         bind_args("length", a, {});
         return Value::integer(length(v));
       }},
      {"default",
       [](const Value& v, CallArgs& a) {
         auto b = bind_args("default", a, {"default_value", "boolean"});
         bool use_default = v.is_undefined() || (b[1] && truthy(*b[1]) && !truthy(v));
         return use_default ? b[0].value_or(Value::string("")) : v;
       }},
      {"dictsort", dictsort_filter},
      {"escape", escape_filter},
      {"first", first_filter},
      {"float", float_filter},
      {"format", format_filter},
      {"indent", indent_filter},
      {"int", int_filter},
      {"items", items_filter},
      {"join", join_filter},
      {"last", last_filter},
      {"list",
       [](const Value& v, CallArgs& a) {
         bind_args("list", a, {});
         return Value::list(iterate(v));
       }},
      {"lower",
       [](const Value& v, CallArgs& a) {
         bind_args("lower", a, {});
         return str_value(pystr::lower(to_str(v)));
       }},
      {"map", map_filter},
      {"max", [](const Value& v, CallArgs& a) { return min_max(v, a, true); }},
      {"min", [](const Value& v, CallArgs& a) { return min_max(v, a, false); }},
      {"reject", [](const Value& v, CallArgs& a) { return select_items(v, a, false, false); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return select_items(v, a, false, true); }},
      {"replace",
       [](const Value& v, CallArgs& a) {
         auto b = bind_args("replace", a, {"old", "new", "count"});
         if (!b[0] || !b[1])
           fail("TypeError: replace() missing required arguments 'old' and 'new'");
         int64_t count = b[2] && !b[2]->is_none() ? int_arg(*b[2], "count") : -1;
         return str_value(pystr::replace(to_str(v), to_str(*b[0]), to_str(*b[1]), count));
       }},
      {"reverse", reverse_filter},
      {"round", round_filter},
      {"safe",
       [](const Value& v, CallArgs& a) {
         bind_args("safe", a, {});
         return str_value(to_str(v));
       }},
      {"select", [](const Value& v, CallArgs& a) { return select_items(v, a, true, false); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return select_items(v, a, true, true); }},
      {"sort", sort_filter},
      {"string",
       [](const Value& v, CallArgs& a) {
         bind_args("string", a, {});
         return str_value(to_str(v));
       }},
      {"sum", sum_filter},
      {"title", title_filter},
      {"tojson", tojson_filter},
      {"trim",
       [](const Value& v, CallArgs& a) {
         auto b = bind_args("trim", a, {"chars"});
         std::optional<std::string> chars;
         if (b[0] && !b[0]->is_none()) chars = str_arg(*b[0], "trim chars");
         return str_value(pystr::strip(to_str(v), chars, true, true));
       }},
      {"unique", unique_filter},
      {"upper",
       [](const Value& v, CallArgs& a) {
         bind_args("upper", a, {});
         return str_value(pystr::upper(to_str(v)));
       }},
      {"wordcount", wordcount_filter},
  };
  return table;
}

const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table = {{"d", "default"}, {"e", "escape"}};
  return table;
}

}  // namespace

bool is_supported_filter(const std::string& name) {
  return filters().count(name) > 0 || aliases().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  auto alias = aliases().find(name);
  const std::string& real = alias == aliases().end() ? name : alias->second;
  auto it = filters().find(real);
  if (it == filters().end()) fail("unsupported filter '" + name + "'");
  return it->second(input, args);
}

}  // namespace furlong::tokenizer::jinja
