// Command-line flags bound to fields of components' options structs, with YAML --config files.
//
// A FlagSet is a table: each entry binds a flag name (miles' spelling, e.g. "global-batch-size")
// to one field; the field's value at registration is the default. Parsing applies, in order,
// defaults < YAML file (--config, keys spelled with '_' as miles writes them, or '-') < command
// line. Every boolean flag has a negated form (--fused-kernels, --no-fused-kernels). Unknown
// flags and YAML keys are errors with a did-you-mean hint. The same table renders --help and the
// markdown CLI reference.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace furlong::config {

enum class FlagType { kBool, kInt, kFloat, kString, kIntList, kStringList };

// "none", "null" or "~" (any case): the value that resets an optional field.
bool is_none_value(const std::string& text);

struct Flag {
  std::string name;  // without dashes: "global-batch-size"
  FlagType type = FlagType::kString;
  std::string help;
  std::string group;
  std::string default_text;  // as shown in help ("" for none)
  std::vector<std::string> choices;
  bool required = false;
  bool optional_value = false;  // std::optional field: "none" resets it
  // Parses `value` (already split for lists) into the field; `source` names where it came from.
  std::function<void(const std::vector<std::string>& values, const std::string& source)> set;
};

// Makes `flag` also record that it was given (either polarity, CLI or YAML), so that a default
// implied by other flags yields to an explicit choice.
void record_given(Flag& flag, bool* was_set);

class FlagSet {
 public:
  // `command` is the subcommand name shown in usage and errors ("furlong score").
  explicit FlagSet(std::string command, std::string summary = "");

  // Each returns the Flag so callers can add choices / mark it required.
  Flag& add(const std::string& name, bool* field, const std::string& help);
  Flag& add(const std::string& name, int64_t* field, const std::string& help);
  Flag& add(const std::string& name, double* field, const std::string& help);
  Flag& add(const std::string& name, std::string* field, const std::string& help);
  Flag& add(const std::string& name, std::optional<int64_t>* field, const std::string& help);
  Flag& add(const std::string& name, std::optional<double>* field, const std::string& help);
  Flag& add(const std::string& name, std::optional<std::string>* field, const std::string& help);
  Flag& add(const std::string& name, std::vector<int64_t>* field, const std::string& help);
  Flag& add(const std::string& name, std::vector<std::string>* field, const std::string& help);

  // An enum field, parsed once here: `choices` are the accepted spellings (aliases allowed),
  // `parse` maps one to its value and fails with a message for anything else (it sees values
  // outside `choices` only through YAML/CLI typos, which apply() also reports). The field's
  // value at registration is the default; its text is the first choice that parses to it.
  template <typename E>
  Flag& add_enum(const std::string& name, E* field, std::vector<std::string> choices,
                 std::function<E(const std::string&)> parse, const std::string& help) {
    std::string default_text;
    for (const auto& c : choices) {
      if (parse(c) == *field) {
        default_text = c;
        break;
      }
    }
    FURLONG_ASSERT(!default_text.empty(), "flag --", name, ": its default is not a choice");
    Flag flag{name,
              FlagType::kString,
              help,
              "",
              default_text,
              std::move(choices),
              false,
              false,
              [field, parse](const std::vector<std::string>& v, const std::string& src) {
                FURLONG_CHECK(v.size() == 1, src, ": expected one value, got ", v.size());
                *field = parse(v[0]);
              }};
    return add_flag(std::move(flag));
  }
  // An optional enum field, shown as a string (STR, no default when unset): "none" (or "null",
  // "~") resets it, anything else goes through `parse`, which lists the choices when it fails.
  template <typename E>
  Flag& add_enum(const std::string& name, std::optional<E>* field,
                 std::function<E(const std::string&)> parse, std::function<std::string(E)> format,
                 const std::string& help) {
    Flag flag{name,
              FlagType::kString,
              help,
              "",
              *field ? format(**field) : std::string(),
              {},
              false,
              true,
              [field, parse](const std::vector<std::string>& v, const std::string& src) {
                FURLONG_CHECK(v.size() == 1, src, ": expected one value, got ", v.size());
                if (is_none_value(v[0])) {
                  field->reset();
                } else {
                  *field = parse(v[0]);
                }
              }};
    return add_flag(std::move(flag));
  }

  // Subsequent add() calls go into this help group.
  void set_group(std::string group) { group_ = std::move(group); }
  // Allow --config <yaml> (on by default).
  void enable_yaml_config(bool enabled) { yaml_enabled_ = enabled; }

  // Parses argv-style arguments (without the program and subcommand names). Returns false if
  // --help was given (help has been printed). Throws furlong::Error on bad input.
  bool parse(const std::vector<std::string>& args);
  // Applies a YAML mapping of flag values (used by parse for --config; exposed for tests).
  void apply_yaml_file(const std::string& path);

  bool was_set(const std::string& name) const { return set_by_.count(name) > 0; }
  // "default", "yaml" or "cli".
  std::string origin(const std::string& name) const;
  const std::vector<Flag>& flags() const { return flags_; }
  const std::string& command() const { return command_; }

  std::string help_text() const;
  std::string markdown_reference() const;

 private:
  Flag& add_flag(Flag flag);
  Flag* find(const std::string& name);
  void apply(Flag& flag, const std::vector<std::string>& values, const std::string& source,
             const std::string& origin);
  [[noreturn]] void fail_unknown(const std::string& name, const std::string& where) const;

  std::string command_;
  std::string summary_;
  std::string group_ = "Options";
  bool yaml_enabled_ = true;
  std::vector<Flag> flags_;
  std::map<std::string, std::string> set_by_;
};

}  // namespace furlong::config
