// Tree-walking evaluator; see evaluator.h. Errors raised while evaluating a node are reported
// at that node: TemplateError from value operations is caught at the innermost expression or
// statement and rethrown as furlong::Error with the node's location.
#include "tokenizer/jinja/evaluator.h"

#include <memory>
#include <new>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/ops.h"

namespace furlong::tokenizer::jinja {
namespace {

// Variables of one scope; lookups walk up to the globals.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent_.get())
      for (const auto& [k, v] : s->vars_)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars_) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars_.emplace_back(name, std::move(value));
  }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

// Deepest recursion of statement/expression evaluation (macro calls multiply the nesting the
// parser allows); keeps hostile templates far from the stack limit.
constexpr int kMaxNesting = 1500;

class Evaluator {
 public:
  Evaluator(const Template& tmpl, const Limits& limits) : tmpl_(tmpl), limits_(limits) {}

  ~Evaluator() {
    for (auto& ns : namespaces_) ns->clear();
  }

  std::string render(const DictData& context) {
    auto globals = std::make_shared<Scope>(nullptr);
    for (auto& [name, value] : make_globals(&namespaces_)) globals->set(name, std::move(value));
    auto scope = std::make_shared<Scope>(globals);
    for (const auto& [k, v] : context.items) {
      if (!k.is_string()) fail("context keys must be strings");
      scope->set(k.as_string(), v);
    }
    std::string out;
    exec_body(tmpl_.body, scope, out);
    return out;
  }

 private:
  const Template& tmpl_;
  const Limits& limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;
  const Value* block_input_ = nullptr;  // input of a filter chain with a null operand
  NamespaceRegistry namespaces_;        // cleared last, see NamespaceRegistry

  // Counts one level of evaluation recursion while alive.
  class Nesting {
   public:
    explicit Nesting(Evaluator& e) : e_(e) {
      if (++e_.nesting_ > kMaxNesting) {
        --e_.nesting_;
        fail("render aborted: evaluation nested deeper than " + std::to_string(kMaxNesting));
      }
    }
    ~Nesting() { --e_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Evaluator& e_;
  };

  void step() {
    if (++steps_ > limits_.max_steps)
      fail("render aborted: more than " + std::to_string(limits_.max_steps) +
           " evaluation steps (infinite or huge loop?)");
  }

  // Large values cost steps in proportion to their size, so the step limit also bounds the
  // work of templates that build huge strings or lists in a loop.
  void charge(const Value& v) {
    size_t size = v.is_string() ? v.as_string().size() / 1024
                  : v.is_list() ? v.as_list().items.size() / 64
                                : 0;
    if (size > 0) {
      steps_ += static_cast<int64_t>(size);
      step();
    }
  }

  void append(std::string& out, const std::string& text) {
    if (out.size() + text.size() > limits_.max_output_bytes)
      fail("render aborted: output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
    out += text;
  }

  // ---- statements ----

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& stmt : body) {
      Flow flow = exec(*stmt, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    try {
      Nesting nesting(*this);
      step();
      return exec_inner(stmt, scope, out);
    } catch (const TemplateError& e) {
      throw_at(tmpl_.origin, stmt.loc, e.what());
    }
  }

  Flow exec_inner(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        append(out, static_cast<const TextStmt&>(stmt).text);
        break;
      case Stmt::Kind::kOutput:
        append(out, to_str(eval(*static_cast<const OutputStmt&>(stmt).expr, scope)));
        break;
      case Stmt::Kind::kIf:
        return exec_if(static_cast<const IfStmt&>(stmt), scope, out);
      case Stmt::Kind::kFor:
        exec_for(static_cast<const ForStmt&>(stmt), scope, out);
        break;
      case Stmt::Kind::kSet: {
        const auto& s = static_cast<const SetStmt&>(stmt);
        assign(s.target, eval(*s.value, scope), scope);
        break;
      }
      case Stmt::Kind::kSetBlock:
        exec_set_block(static_cast<const SetBlockStmt&>(stmt), scope);
        break;
      case Stmt::Kind::kMacro:
        define_macro(static_cast<const MacroStmt&>(stmt), scope);
        break;
      case Stmt::Kind::kCallBlock:
        append(out, to_str(exec_call_block(static_cast<const CallBlockStmt&>(stmt), scope)));
        break;
      case Stmt::Kind::kFilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(stmt);
        append(out, to_str(filter_text(*s.filter, render_body(s.body, scope), scope)));
        break;
      }
      case Stmt::Kind::kWith: {
        const auto& s = static_cast<const WithStmt&>(stmt);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, value] : s.assignments)
          assign(target, eval(*value, inner), inner);
        return exec_body(s.body, inner, out);
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return exec_body(static_cast<const ScopeStmt&>(stmt).body, scope, out);
    }
    return Flow::kNormal;
  }

  Flow exec_if(const IfStmt& s, const ScopePtr& scope, std::string& out) {
    for (const auto& [test, body] : s.branches)
      if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
    return exec_body(s.otherwise, scope, out);
  }

  void exec_for(const ForStmt& s, const ScopePtr& scope, std::string& out) {
    std::vector<Value> all = iterate(eval(*s.iterable, scope));
    auto items = std::make_shared<std::vector<Value>>();
    for (auto& item : all) {
      if (s.filter) {  // `loop` is not visible in the filter, only the targets
        auto probe = std::make_shared<Scope>(scope);
        assign(s.target, item, probe);
        if (!truthy(eval(*s.filter, probe))) continue;
      }
      items->push_back(std::move(item));
    }
    if (items->empty()) {
      exec_body(s.otherwise, scope, out);
      return;
    }
    auto loop = std::make_shared<LoopObject>(items);
    Value loop_value = Value::object(loop);
    for (size_t i = 0; i < items->size(); ++i) {
      step();
      loop->set_index(i);
      auto iteration = std::make_shared<Scope>(scope);
      iteration->set("loop", loop_value);
      assign(s.target, (*items)[i], iteration);
      if (exec_body(s.body, iteration, out) == Flow::kBreak) break;
    }
  }

  void assign(const Target& target, const Value& value, const ScopePtr& scope) {
    switch (target.kind) {
      case Target::Kind::kName:
        scope->set(target.name, value);
        return;
      case Target::Kind::kNamespaceAttr: {
        const Value* ns = scope->find(target.name);
        if (ns == nullptr || !ns->is_object() ||
            dynamic_cast<Namespace*>(ns->as_object().get()) == nullptr)
          fail("cannot assign attribute on non-namespace object '" + target.name + "'");
        ns->as_object()->set_attr(target.attr, value);
        return;
      }
      case Target::Kind::kTuple: {
        std::vector<Value> parts = iterate(value);
        size_t want = target.items.size();
        if (parts.size() < want)
          fail("ValueError: not enough values to unpack (expected " + std::to_string(want) +
               ", got " + std::to_string(parts.size()) + ")");
        if (parts.size() > want)
          fail("ValueError: too many values to unpack (expected " + std::to_string(want) + ")");
        for (size_t i = 0; i < want; ++i) assign(target.items[i], parts[i], scope);
        return;
      }
    }
  }

  std::string render_body(const Body& body, const ScopePtr& scope) {
    std::string text;
    exec_body(body, scope, text);
    return text;
  }

  // Applies a filter chain whose innermost operand is null to `text`.
  Value filter_text(const Expr& chain, std::string text, const ScopePtr& scope) {
    Value input = Value::string(std::move(text));
    const Value* saved = block_input_;
    block_input_ = &input;
    Value result;
    try {
      result = eval(chain, scope);
    } catch (...) {
      block_input_ = saved;
      throw;
    }
    block_input_ = saved;
    return result;
  }

  void exec_set_block(const SetBlockStmt& s, const ScopePtr& scope) {
    std::string text = render_body(s.body, scope);
    Value value = s.filter ? filter_text(*s.filter, std::move(text), scope) : Value::string(text);
    assign(s.target, value, scope);
  }

  // ---- macros ----

  Value make_body_callable(const std::string& name, const std::vector<Parameter>& params,
                           const Body& body, const ScopePtr& scope) {
    std::weak_ptr<Scope> weak = scope;
    const auto* p = &params;
    const auto* b = &body;
    return Value::callable(name, [this, name, weak, p, b](CallArgs& args) {
      return invoke(name, *p, *b, weak, args);
    });
  }

  void define_macro(const MacroStmt& m, const ScopePtr& scope) {
    scope->set(m.name, make_body_callable("macro '" + m.name + "'", m.params, m.body, scope));
  }

  Value invoke(const std::string& name, const std::vector<Parameter>& params, const Body& body,
               const std::weak_ptr<Scope>& weak, CallArgs& args) {
    ScopePtr parent = weak.lock();
    if (!parent) fail(name + " called after the scope that defined it ended");
    if (call_depth_ >= limits_.max_call_depth)
      fail("render aborted: macro calls nested deeper than " +
           std::to_string(limits_.max_call_depth));
    auto scope = std::make_shared<Scope>(parent);
    std::vector<std::pair<std::string, Value>> keywords = args.keyword;
    for (size_t i = 0; i < params.size(); ++i) {
      const Parameter& param = params[i];
      auto kw = std::find_if(keywords.begin(), keywords.end(),
                             [&](const auto& kv) { return kv.first == param.name; });
      if (i < args.positional.size()) {
        if (kw != keywords.end())
          fail(name + " got multiple values for argument '" + param.name + "'");
        scope->set(param.name, args.positional[i]);
      } else if (kw != keywords.end()) {
        scope->set(param.name, kw->second);
        keywords.erase(kw);
      } else if (param.default_value) {
        scope->set(param.name, eval(*param.default_value, scope));
      } else {
        scope->set(param.name, Value::undefined("parameter '" + param.name + "' was not provided"));
      }
    }
    std::vector<Value> extra;
    for (size_t i = params.size(); i < args.positional.size(); ++i)
      extra.push_back(args.positional[i]);
    scope->set("varargs", Value::list(std::move(extra), true));
    DictData kwargs;
    for (auto& [k, v] : keywords) {
      if (k == "caller")
        scope->set("caller", v);
      else
        kwargs.set(Value::string(k), v);
    }
    scope->set("kwargs", Value::dict(std::move(kwargs)));
    ++call_depth_;
    std::string out;
    try {
      exec_body(body, scope, out);
    } catch (...) {
      --call_depth_;
      throw;
    }
    --call_depth_;
    return Value::string(std::move(out));
  }

  Value exec_call_block(const CallBlockStmt& s, const ScopePtr& scope) {
    const auto& call = static_cast<const CallExpr&>(*s.call);
    Value callee = eval(*call.callee, scope);
    CallArgs args = eval_args(call.args, scope);
    args.keyword.emplace_back("caller", make_body_callable("caller", s.params, s.body, scope));
    return call_value(callee, args);
  }

  // ---- expressions ----

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      Nesting nesting(*this);
      step();
      Value v = eval_inner(e, scope);
      charge(v);
      return v;
    } catch (const TemplateError& err) {
      throw_at(tmpl_.origin, e.loc, err.what());
    }
  }

  CallArgs eval_args(const Arguments& a, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& p : a.positional) args.positional.push_back(eval(*p, scope));
    for (const auto& [k, v] : a.keyword) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return static_cast<const LiteralExpr&>(e).value;
      case Expr::Kind::kName: {
        const auto& name = static_cast<const NameExpr&>(e).name;
        if (const Value* v = scope->find(name)) return *v;
        return Value::undefined("'" + name + "' is undefined");
      }
      case Expr::Kind::kList: {
        const auto& l = static_cast<const ListExpr&>(e);
        std::vector<Value> items;
        for (const auto& item : l.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), l.is_tuple);
      }
      case Expr::Kind::kDict: {
        DictData d;
        for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
          Value key = eval(*k, scope);
          if (key.is_list() || key.is_dict() || key.is_undefined())
            fail("TypeError: unhashable type: '" + type_name(key) + "'");
          d.set(std::move(key), eval(*v, scope));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::kUnary: {
        const auto& u = static_cast<const UnaryExpr&>(e);
        return unary_op(u.op, eval(*u.operand, scope));
      }
      case Expr::Kind::kBinary:
        return eval_binary(static_cast<const BinaryExpr&>(e), scope);
      case Expr::Kind::kConcat: {
        std::string s;
        for (const auto& part : static_cast<const ConcatExpr&>(e).parts) {
          s += to_str(eval(*part, scope));
          if (s.size() > kMaxStringBytes) fail("MemoryError: string is too large");
        }
        return Value::string(std::move(s));
      }
      case Expr::Kind::kCompare:
        return eval_compare(static_cast<const CompareExpr&>(e), scope);
      case Expr::Kind::kCondition: {
        const auto& c = static_cast<const ConditionExpr&>(e);
        if (truthy(eval(*c.test, scope))) return eval(*c.then, scope);
        if (c.otherwise) return eval(*c.otherwise, scope);
        return Value::undefined("the inline if-expression evaluated to false and has no else");
      }
      case Expr::Kind::kAttribute: {
        const auto& a = static_cast<const AttributeExpr&>(e);
        return get_attr(eval(*a.object, scope), a.name);
      }
      case Expr::Kind::kItem:
        return eval_item(static_cast<const ItemExpr&>(e), scope);
      case Expr::Kind::kSlice:
        fail("unsupported: a slice inside a tuple subscript");
      case Expr::Kind::kCall: {
        const auto& c = static_cast<const CallExpr&>(e);
        Value callee = eval(*c.callee, scope);
        CallArgs args = eval_args(c.args, scope);
        return call_value(callee, args);
      }
      case Expr::Kind::kFilter: {
        const auto& f = static_cast<const FilterExpr&>(e);
        Value input;
        if (f.operand)
          input = eval(*f.operand, scope);
        else if (block_input_)
          input = *block_input_;
        CallArgs args = eval_args(f.args, scope);
        return apply_filter(f.name, input, args);
      }
      case Expr::Kind::kTest: {
        const auto& t = static_cast<const TestExpr&>(e);
        Value value = eval(*t.operand, scope);
        CallArgs args = eval_args(t.args, scope);
        return Value::boolean(apply_test(t.name, value, args));
      }
    }
    fail("internal error: unknown expression");
  }

  Value eval_binary(const BinaryExpr& b, const ScopePtr& scope) {
    Value left = eval(*b.lhs, scope);
    if (b.op == BinaryOp::kAnd) return truthy(left) ? eval(*b.rhs, scope) : left;
    if (b.op == BinaryOp::kOr) return truthy(left) ? left : eval(*b.rhs, scope);
    return binary_op(b.op, left, eval(*b.rhs, scope));
  }

  Value eval_compare(const CompareExpr& c, const ScopePtr& scope) {
    Value left = eval(*c.first, scope);
    for (const auto& [op, expr] : c.rest) {
      Value right = eval(*expr, scope);
      if (!compare_op(op, left, right)) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  Value eval_item(const ItemExpr& i, const ScopePtr& scope) {
    Value obj = eval(*i.object, scope);
    if (i.index->kind != Expr::Kind::kSlice) return get_item(obj, eval(*i.index, scope));
    const auto& s = static_cast<const SliceExpr&>(*i.index);
    Value start, stop, step_value;
    if (s.start) start = eval(*s.start, scope);
    if (s.stop) stop = eval(*s.stop, scope);
    if (s.step) step_value = eval(*s.step, scope);
    return get_slice(obj, s.start ? &start : nullptr, s.stop ? &stop : nullptr,
                     s.step ? &step_value : nullptr);
  }
};

}  // namespace

std::string render_template(const Template& tmpl, const DictData& context, const Limits& limits) {
  try {
    return Evaluator(tmpl, limits).render(context);
  } catch (const TemplateError& e) {
    throw furlong::Error(tmpl.origin + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw furlong::Error(tmpl.origin + ": out of memory while rendering");
  } catch (const std::length_error&) {
    throw furlong::Error(tmpl.origin + ": value too large while rendering");
  }
}

}  // namespace furlong::tokenizer::jinja
