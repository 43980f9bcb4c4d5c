// Syntax tree of a parsed template. Nodes carry their source location so that runtime errors
// name the line and column of the construct that failed. Nodes are immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/errors.h"
#include "tokenizer/jinja/value.h"

namespace furlong::tokenizer::jinja {

// ---- expressions -------------------------------------------------------------------------

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,  // list or tuple display
    kDict,
    kUnary,
    kBinary,
    kConcat,
    kCompare,
    kCondition,
    kAttribute,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest
  };
  Expr(Kind k, Location l) : kind(k), loc(l) {}
  virtual ~Expr() = default;
  const Kind kind;
  const Location loc;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(Location l, Value v) : Expr(Kind::kLiteral, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(Location l, std::string n) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(Location l, bool tuple) : Expr(Kind::kList, l), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictExpr : Expr {
  explicit DictExpr(Location l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

enum class UnaryOp { kNeg, kPos, kNot };
struct UnaryExpr : Expr {
  UnaryExpr(Location l, UnaryOp o, ExprPtr e)
      : Expr(Kind::kUnary, l), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kAnd, kOr };
struct BinaryExpr : Expr {
  BinaryExpr(Location l, BinaryOp o, ExprPtr a, ExprPtr b)
      : Expr(Kind::kBinary, l), op(o), lhs(std::move(a)), rhs(std::move(b)) {}
  BinaryOp op;
  ExprPtr lhs, rhs;
};

// a ~ b ~ c: str() of each part, joined.
struct ConcatExpr : Expr {
  explicit ConcatExpr(Location l) : Expr(Kind::kConcat, l) {}
  std::vector<ExprPtr> parts;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
// Chained like Python: a < b < c means a < b and b < c.
struct CompareExpr : Expr {
  CompareExpr(Location l, ExprPtr f) : Expr(Kind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

// `then if test else otherwise`; a missing else yields Undefined.
struct ConditionExpr : Expr {
  ConditionExpr(Location l, ExprPtr t, ExprPtr a, ExprPtr b)
      : Expr(Kind::kCondition, l),
        test(std::move(t)),
        then(std::move(a)),
        otherwise(std::move(b)) {}
  ExprPtr test, then, otherwise;
};

struct AttributeExpr : Expr {
  AttributeExpr(Location l, ExprPtr o, std::string n)
      : Expr(Kind::kAttribute, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct ItemExpr : Expr {
  ItemExpr(Location l, ExprPtr o, ExprPtr i)
      : Expr(Kind::kItem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;  // may be a SliceExpr
};

struct SliceExpr : Expr {
  explicit SliceExpr(Location l) : Expr(Kind::kSlice, l) {}
  ExprPtr start, stop, step;  // each may be null
};

struct CallExpr : Expr {
  CallExpr(Location l, ExprPtr c) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

// operand | name(args). A null operand stands for the input of a {% filter %} block or of
// {% set x | f %}...{% endset %}.
struct FilterExpr : Expr {
  FilterExpr(Location l, ExprPtr o, std::string n)
      : Expr(Kind::kFilter, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Arguments args;
};

struct TestExpr : Expr {
  TestExpr(Location l, ExprPtr o, std::string n)
      : Expr(Kind::kTest, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Arguments args;
};

// ---- statements --------------------------------------------------------------------------

// An assignment target: a name, a (nested) tuple of names, or namespace.attr.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;           // kName; the namespace variable for kNamespaceAttr
  std::string attr;           // kNamespaceAttr
  std::vector<Target> items;  // kTuple
  Location loc;
};

struct Stmt {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kWith,
    kBreak,
    kContinue,
    kScope  // a body rendered in place ({% generation %})
  };
  Stmt(Kind k, Location l) : kind(k), loc(l) {}
  virtual ~Stmt() = default;
  const Kind kind;
  const Location loc;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(Location l, std::string t) : Stmt(Kind::kText, l), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(Location l, ExprPtr e) : Stmt(Kind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(Location l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif, ...
  Body otherwise;
};

struct ForStmt : Stmt {
  explicit ForStmt(Location l) : Stmt(Kind::kFor, l) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body;
  Body otherwise;  // runs when no item was iterated
};

struct SetStmt : Stmt {
  SetStmt(Location l, Target t, ExprPtr v)
      : Stmt(Kind::kSet, l), target(std::move(t)), value(std::move(v)) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(Location l) : Stmt(Kind::kSetBlock, l) {}
  Target target;
  ExprPtr filter;  // optional FilterExpr chain applied to the captured text
  Body body;
};

struct Parameter {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  explicit MacroStmt(Location l) : Stmt(Kind::kMacro, l) {}
  std::string name;
  std::vector<Parameter> params;
  Body body;
};

// {% call(params) macro(args) %}body{% endcall %}: the macro sees the body as caller().
struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(Location l) : Stmt(Kind::kCallBlock, l) {}
  ExprPtr call;  // a CallExpr
  std::vector<Parameter> params;
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(Location l) : Stmt(Kind::kFilterBlock, l) {}
  ExprPtr filter;  // FilterExpr chain with a null innermost operand
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(Location l) : Stmt(Kind::kWith, l) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct ScopeStmt : Stmt {
  explicit ScopeStmt(Location l) : Stmt(Kind::kScope, l) {}
  Body body;
};

struct Template {
  std::string origin;
  Body body;
};

}  // namespace furlong::tokenizer::jinja
