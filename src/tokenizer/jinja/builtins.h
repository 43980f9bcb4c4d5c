// Builtins the evaluator dispatches to: filters (filters.cpp), tests (predicates.cpp) and the
// global names transformers' environment defines (globals.cpp): range, dict, namespace,
// raise_exception, strftime_now.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace furlong::tokenizer::jinja {

Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
bool apply_test(const std::string& name, const Value& value, CallArgs& args);

// namespace(): the one mutable object templates can write to (`set ns.x = ...`).
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::optional<Value> get_attr(const std::string& name) const override;
  void set_attr(const std::string& name, Value value) override;
  std::string repr() const override;
  // Drops all attributes (breaks reference cycles through the namespace).
  void clear() { attrs_.items.clear(); }

 private:
  DictData attrs_;
};

// The namespaces created during one render. The evaluator clears them all at the end, so that
// cycles (a namespace holding itself) and long chains are freed without deep recursion.
using NamespaceRegistry = std::vector<std::shared_ptr<Namespace>>;

// Name -> value of every global, fresh for each render; namespace() records what it creates in
// `registry`, which must outlive the render.
std::vector<std::pair<std::string, Value>> make_globals(NamespaceRegistry* registry);

// The `loop` variable of a for loop.
class LoopObject : public Object {
 public:
  explicit LoopObject(std::shared_ptr<const std::vector<Value>> items) : items_(std::move(items)) {}
  void set_index(size_t i) { index_ = i; }
  std::string type_name() const override { return "LoopContext"; }
  std::optional<Value> get_attr(const std::string& name) const override;
  std::string repr() const override;

 private:
  std::shared_ptr<const std::vector<Value>> items_;  // the iterated (filtered) items
  size_t index_ = 0;
  mutable std::shared_ptr<std::optional<Value>> last_changed_ =
      std::make_shared<std::optional<Value>>();
};

}  // namespace furlong::tokenizer::jinja
