#include "config/flags.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/json_util.h"
#include "core/strings.h"

namespace furlong::config {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_bool(const std::string& text, const std::string& source) {
  std::string v = lower(text);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  FURLONG_FAIL(source, ": expected true or false, got '", text, "'");
}

int64_t parse_int(const std::string& text, const std::string& source) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  FURLONG_CHECK(ec != std::errc::result_out_of_range || ptr != end, source, ": ",
                truncate_for_message(text), " is outside the 64-bit integer range [",
                std::numeric_limits<int64_t>::min(), ", ", std::numeric_limits<int64_t>::max(),
                "]");
  FURLONG_CHECK(ec == std::errc() && ptr == end && !text.empty(), source,
                ": expected an integer, got '", truncate_for_message(text), "'");
  return value;
}

double parse_float(const std::string& text, const std::string& source) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  FURLONG_CHECK(!text.empty() && end == text.c_str() + text.size(), source,
                ": expected a number, got '", text, "'");
  return value;
}

bool is_none(const std::string& text) {
  std::string v = lower(text);
  return v == "none" || v == "null" || v == "~";
}

std::string format_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A YAML mapping as JSON, for string flags whose value is a JSON object (miles'
// --train-env-vars, --apply-chat-template-kwargs). Plain scalars follow YAML's core schema
// (null, booleans, integers, floats, else strings); quoted scalars stay strings.
OrderedJson yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      OrderedJson object = OrderedJson::object();
      for (const auto& kv : node) object[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return object;
    }
    case YAML::NodeType::Sequence: {
      OrderedJson array = OrderedJson::array();
      for (const auto& item : node) array.push_back(yaml_to_json(item));
      return array;
    }
    case YAML::NodeType::Scalar:
      break;
    default:
      return nullptr;
  }
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
  if (text.empty() || text == "~" || lower(text) == "null") return nullptr;
  if (lower(text) == "true") return true;
  if (lower(text) == "false") return false;
  int64_t integer = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), integer);
  if (ec == std::errc() && ptr == text.data() + text.size()) return integer;
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (end == text.c_str() + text.size()) return number;
  return text;
}

const std::string& single(const std::vector<std::string>& values, const std::string& source) {
  FURLONG_CHECK(values.size() == 1, source, ": expected one value, got ", values.size());
  return values[0];
}

std::string type_placeholder(const Flag& f) {
  switch (f.type) {
    case FlagType::kBool:
      return "";
    case FlagType::kInt:
      return "INT";
    case FlagType::kFloat:
      return "FLOAT";
    case FlagType::kString:
      return f.choices.empty() ? "STR" : "{" + join(f.choices, ",") + "}";
    case FlagType::kIntList:
      return "INT [INT ...]";
    case FlagType::kStringList:
      return "STR [STR ...]";
  }
  return "";
}

}  // namespace

bool is_none_value(const std::string& text) {
  return is_none(text);
}

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

Flag& FlagSet::add_flag(Flag flag) {
  FURLONG_ASSERT(find(flag.name) == nullptr, "flag --", flag.name, " registered twice");
  flag.group = group_;
  flags_.push_back(std::move(flag));
  return flags_.back();
}

Flag* FlagSet::find(const std::string& name) {
  for (auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

void record_given(Flag& flag, bool* was_set) {
  auto set = flag.set;
  flag.set = [set, was_set](const std::vector<std::string>& values, const std::string& source) {
    set(values, source);
    *was_set = true;
  };
}

Flag& FlagSet::add(const std::string& name, bool* field, const std::string& help) {
  return add_flag({name,
                   FlagType::kBool,
                   help,
                   "",
                   *field ? "true" : "false",
                   {},
                   false,
                   false,
                   [field](const std::vector<std::string>& v, const std::string& src) {
                     *field = parse_bool(single(v, src), src);
                   }});
}

Flag& FlagSet::add(const std::string& name, int64_t* field, const std::string& help) {
  return add_flag({name,
                   FlagType::kInt,
                   help,
                   "",
                   std::to_string(*field),
                   {},
                   false,
                   false,
                   [field](const std::vector<std::string>& v, const std::string& src) {
                     *field = parse_int(single(v, src), src);
                   }});
}

Flag& FlagSet::add(const std::string& name, double* field, const std::string& help) {
  return add_flag({name,
                   FlagType::kFloat,
                   help,
                   "",
                   format_double(*field),
                   {},
                   false,
                   false,
                   [field](const std::vector<std::string>& v, const std::string& src) {
                     *field = parse_float(single(v, src), src);
                   }});
}

Flag& FlagSet::add(const std::string& name, std::string* field, const std::string& help) {
  return add_flag({name,
                   FlagType::kString,
                   help,
                   "",
                   *field,
                   {},
                   false,
                   false,
                   [field](const std::vector<std::string>& v, const std::string& src) {
                     *field = single(v, src);
                   }});
}

// An optional field: "none" (or "null", "~") resets it; anything else goes through `parse`.
template <typename T, typename Parse, typename Format>
Flag optional_flag(const std::string& name, std::optional<T>* field, const std::string& help,
                   FlagType type, Parse parse, Format format) {
  Flag flag{name, type, help, "", *field ? format(**field) : "", {}, false, true, nullptr};
  flag.set = [field, parse](const std::vector<std::string>& v, const std::string& src) {
    const auto& s = single(v, src);
    if (is_none(s)) {
      field->reset();
    } else {
      *field = parse(s, src);
    }
  };
  return flag;
}

Flag& FlagSet::add(const std::string& name, std::optional<int64_t>* field,
                   const std::string& help) {
  return add_flag(optional_flag(name, field, help, FlagType::kInt, parse_int,
                                [](int64_t v) { return std::to_string(v); }));
}

Flag& FlagSet::add(const std::string& name, std::optional<double>* field, const std::string& help) {
  return add_flag(optional_flag(name, field, help, FlagType::kFloat, parse_float, format_double));
}

Flag& FlagSet::add(const std::string& name, std::optional<std::string>* field,
                   const std::string& help) {
  return add_flag(optional_flag(
      name, field, help, FlagType::kString,
      [](const std::string& s, const std::string&) { return s; },
      [](const std::string& s) { return s; }));
}

Flag& FlagSet::add(const std::string& name, std::vector<int64_t>* field, const std::string& help) {
  std::vector<std::string> text;
  for (auto v : *field) text.push_back(std::to_string(v));
  return add_flag({name,
                   FlagType::kIntList,
                   help,
                   "",
                   join(text, " "),
                   {},
                   false,
                   false,
                   [field](const std::vector<std::string>& v, const std::string& src) {
                     field->clear();
                     for (const auto& s : v) field->push_back(parse_int(s, src));
                   }});
}

Flag& FlagSet::add(const std::string& name, std::vector<std::string>* field,
                   const std::string& help) {
  return add_flag(
      {name,
       FlagType::kStringList,
       help,
       "",
       join(*field, " "),
       {},
       false,
       false,
       [field](const std::vector<std::string>& v, const std::string& src) { *field = v; }});
}

void FlagSet::apply(Flag& flag, const std::vector<std::string>& values, const std::string& source,
                    const std::string& origin) {
  flag.set(values, source);
  if (!flag.choices.empty()) {
    for (const auto& v : values) {
      bool ok = std::find(flag.choices.begin(), flag.choices.end(), v) != flag.choices.end();
      FURLONG_CHECK(ok, source, ": invalid choice '", v, "' (choose from ",
                    join(flag.choices, ", "), ")");
    }
  }
  set_by_[flag.name] = origin;
}

std::string FlagSet::origin(const std::string& name) const {
  auto it = set_by_.find(name);
  return it == set_by_.end() ? "default" : it->second;
}

void FlagSet::fail_unknown(const std::string& name, const std::string& where) const {
  std::vector<std::string> names;
  for (const auto& f : flags_) names.push_back(f.name);
  auto hint = closest_match(name, names);
  FURLONG_FAIL("unknown flag --", truncate_for_message(name),
               hint ? " (did you mean --" + *hint + "?)" : "", "; see `", where, " --help`");
}

void FlagSet::apply_yaml_file(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    FURLONG_FAIL("--config ", path, ": cannot open the YAML file");
  } catch (const YAML::Exception& e) {
    FURLONG_FAIL(path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": invalid YAML: ", e.msg);
  }
  if (!root || root.IsNull()) return;  // an empty file sets nothing
  FURLONG_CHECK(root.IsMap(), path, ": the YAML config must be a mapping of flag names to values");
  std::vector<std::string> known;
  for (const auto& f : flags_) {
    std::string underscored = f.name;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    known.push_back(underscored);
  }
  std::vector<std::pair<std::string, YAML::Node>> entries;
  std::vector<std::string> unknown;
  for (const auto& kv : root) {
    auto key = kv.first.as<std::string>();
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    if (find(name) == nullptr) {
      auto hint = closest_match(key, known);
      unknown.push_back("'" + truncate_for_message(key) + "'" +
                        (hint ? " (did you mean '" + *hint + "'?)" : ""));
    } else {
      entries.emplace_back(name, kv.second);
    }
  }
  std::sort(unknown.begin(), unknown.end());
  FURLONG_CHECK(unknown.empty(), path,
                ": unknown key(s) in the YAML config: ", join(unknown, ", "));
  for (auto& [name, node] : entries) {
    Flag& flag = *find(name);
    std::string source = path + ": key '" + name + "'";
    std::vector<std::string> values;
    if (node.IsNull()) {
      values.push_back("none");
    } else if (node.IsMap()) {
      FURLONG_CHECK(flag.type == FlagType::kString, source,
                    ": expected a single value, got a mapping");
      values.push_back(yaml_to_json(node).dump());
    } else if (node.IsSequence()) {
      FURLONG_CHECK(flag.type == FlagType::kIntList || flag.type == FlagType::kStringList, source,
                    ": expected a single value, got a list");
      for (const auto& item : node) {
        FURLONG_CHECK(item.IsScalar(), source, ": list items must be scalars");
        values.push_back(item.as<std::string>());
      }
    } else {
      FURLONG_CHECK(node.IsScalar(), source, ": expected a scalar value");
      values.push_back(node.as<std::string>());
    }
    apply(flag, values, source, "yaml");
  }
}

bool FlagSet::parse(const std::vector<std::string>& args) {
  struct Assignment {
    Flag* flag;
    std::vector<std::string> values;
    std::string source;
  };
  std::vector<Assignment> cli;
  std::optional<std::string> yaml_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help_text().c_str(), stdout);
      return false;
    }
    FURLONG_CHECK(arg.rfind("--", 0) == 0 && arg.size() > 2, command_, ": unexpected argument '",
                  arg, "' (flags start with --; see `", command_, " --help`)");
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::string source = "--" + name;
    if (name == "config" && yaml_enabled_ && find("config") == nullptr) {
      FURLONG_CHECK(inline_value || i + 1 < args.size(), "--config: missing the YAML file path");
      yaml_path = inline_value ? *inline_value : args[++i];
      continue;
    }
    Flag* flag = find(name);
    if (flag == nullptr && name.rfind("no-", 0) == 0) {
      Flag* positive = find(name.substr(3));
      if (positive != nullptr && positive->type == FlagType::kBool) {
        FURLONG_CHECK(!inline_value, source, ": takes no value");
        cli.push_back({positive, {"false"}, source});
        continue;
      }
    }
    if (flag == nullptr) fail_unknown(name, command_);
    std::vector<std::string> values;
    if (flag->type == FlagType::kBool) {
      values.push_back(inline_value.value_or("true"));
    } else if (flag->type == FlagType::kIntList || flag->type == FlagType::kStringList) {
      if (inline_value) {
        values = split(*inline_value, ',');
      } else {
        while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) values.push_back(args[++i]);
      }
      FURLONG_CHECK(!values.empty(), source, ": expects at least one value");
    } else if (inline_value) {
      values.push_back(*inline_value);
    } else {
      FURLONG_CHECK(i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0, source,
                    ": missing value (", type_placeholder(*flag), ")");
      values.push_back(args[++i]);
    }
    cli.push_back({flag, std::move(values), source});
  }
  if (yaml_path) apply_yaml_file(*yaml_path);
  for (auto& a : cli) apply(*a.flag, a.values, a.source, "cli");
  for (const auto& f : flags_) {
    FURLONG_CHECK(!f.required || was_set(f.name), command_, ": missing required flag --", f.name,
                  " (", f.help, ")");
  }
  return true;
}

std::string FlagSet::help_text() const {
  std::ostringstream os;
  os << "usage: " << command_ << " [flags]\n";
  if (!summary_.empty()) os << "\n" << summary_ << "\n";
  std::string current_group;
  for (const auto& f : flags_) {
    if (f.group != current_group) {
      current_group = f.group;
      os << "\n" << current_group << ":\n";
    }
    std::string lhs =
        f.type == FlagType::kBool ? "--[no-]" + f.name : "--" + f.name + " " + type_placeholder(f);
    os << "  " << lhs;
    if (lhs.size() < 34) {
      os << std::string(34 - lhs.size(), ' ');
    } else {
      os << "\n" << std::string(36, ' ');
    }
    os << f.help;
    if (f.required) {
      os << " (required)";
    } else if (!f.default_text.empty()) {
      os << " (default: " << f.default_text << ")";
    }
    os << "\n";
  }
  if (yaml_enabled_) {
    os << "\n  --config FILE                     YAML file of flag values (keys as flag names,\n"
          "                                    '_' or '-'); the command line overrides it\n";
  }
  return os.str();
}

std::string FlagSet::markdown_reference() const {
  std::ostringstream os;
  os << "## `" << command_ << "`\n\n";
  if (!summary_.empty()) os << summary_ << "\n\n";
  std::string current_group;
  for (const auto& f : flags_) {
    if (f.group != current_group) {
      current_group = f.group;
      os << "\n**" << current_group
         << "**\n\n| flag | value | default | meaning |\n|---|---|---|---|\n";
    }
    std::string flag = f.type == FlagType::kBool ? "`--[no-]" + f.name + "`" : "`--" + f.name + "`";
    std::string value = f.type == FlagType::kBool ? "bool" : type_placeholder(f);
    std::string def =
        f.required ? "required" : (f.default_text.empty() ? "" : "`" + f.default_text + "`");
    os << "| " << flag << " | " << value << " | " << def << " | " << f.help << " |\n";
  }
  if (yaml_enabled_)
    os << "\n`--config FILE` reads flag values from YAML; the command line wins.\n";
  os << "\n";
  return os.str();
}

}  // namespace furlong::config
