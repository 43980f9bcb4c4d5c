// Recursive-descent parser for the Jinja subset; grammar and precedence as in parser.h.
#include "tokenizer/jinja/parser.h"

#include <algorithm>

#include "tokenizer/jinja/lexer.h"

namespace furlong::tokenizer::jinja {
namespace {

// Deepest nesting of expressions/blocks accepted; keeps recursion (here and when rendering)
// far from the stack limit on hostile input.
constexpr int kMaxDepth = 1200;

const char* const kUnsupportedTags[] = {"block",     "extends",    "include", "import",
                                        "from",      "autoescape", "do",      "trans",
                                        "pluralize", "endtrans",   "debug"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& origin)
      : toks_(std::move(tokens)), origin_(origin) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != TokenType::kEof) fail_here("unexpected " + describe(cur()));
    return body;
  }

 private:
  std::vector<Token> toks_;
  const std::string& origin_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  struct OpenBlock {
    std::string tag;
    Location loc;
  };
  std::vector<OpenBlock> open_;

  // Counts nesting while alive; every recursive or chained construct takes one step.
  class Depth {
   public:
    explicit Depth(Parser& p) : p_(p) { add(); }
    ~Depth() { p_.depth_ -= added_; }
    Depth(const Depth&) = delete;
    Depth& operator=(const Depth&) = delete;
    void add() {
      ++added_;
      if (++p_.depth_ > kMaxDepth) p_.fail_here("template nesting is too deep");
    }

   private:
    Parser& p_;
    int added_ = 0;
  };

  // ---- token helpers ----

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_name(const Token& t, std::string_view s) const {
    return t.type == TokenType::kName && t.text == s;
  }
  bool is_name(std::string_view s) const { return is_name(cur(), s); }
  bool is_op(std::string_view s) const {
    return cur().type == TokenType::kOperator && cur().text == s;
  }
  bool skip_name(std::string_view s) {
    if (!is_name(s)) return false;
    advance();
    return true;
  }
  bool skip_op(std::string_view s) {
    if (!is_op(s)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail_at(Location loc, const std::string& msg) const {
    throw_at(origin_, loc, msg);
  }
  [[noreturn]] void fail_here(const std::string& msg) const { fail_at(cur().loc, msg); }

  void expect_op(std::string_view s) {
    if (!skip_op(s)) fail_here("expected '" + std::string(s) + "', got " + describe(cur()));
  }
  void expect_type(TokenType type, const char* what) {
    if (cur().type != type) {
      if (cur().type == TokenType::kEof) fail_eof();
      fail_here(std::string("expected ") + what + ", got " + describe(cur()));
    }
    advance();
  }
  const Token& expect_name() {
    if (cur().type != TokenType::kName) fail_here("expected a name, got " + describe(cur()));
    const Token& t = cur();
    advance();
    return t;
  }
  void expect_name(std::string_view s) {
    if (!skip_name(s)) fail_here("expected '" + std::string(s) + "', got " + describe(cur()));
  }

  [[noreturn]] void fail_eof() const {
    std::string msg = "unexpected end of template";
    if (!open_.empty()) {
      const auto& b = open_.back();
      msg += "; the '" + b.tag + "' block opened at line " + std::to_string(b.loc.line) +
             ", column " + std::to_string(b.loc.column) + " is never closed";
    }
    fail_here(msg);
  }

  // ---- statements ----

  // Parses until a {% tag %} named in `end_tags` (left as the current token) or the end.
  Body subparse(const std::vector<std::string>& end_tags) {
    Body body;
    while (cur().type != TokenType::kEof) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        body.push_back(std::make_unique<TextStmt>(t.loc, t.text));
        advance();
      } else if (t.type == TokenType::kVariableBegin) {
        advance();
        auto expr = parse_tuple(false, true, {}, false);
        body.push_back(std::make_unique<OutputStmt>(t.loc, std::move(expr)));
        expect_type(TokenType::kVariableEnd, "'}}'");
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (cur().type == TokenType::kName &&
            std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end())
          return body;
        body.push_back(parse_statement());
        expect_type(TokenType::kBlockEnd, "'%}'");
      } else {
        fail_here("unexpected " + describe(t));
      }
    }
    if (!end_tags.empty()) fail_eof();
    return body;
  }

  // The body of a block up to one of `end_tags`; the current token is then the end tag name.
  Body parse_block_body(const std::vector<std::string>& end_tags) {
    skip_op(":");
    expect_type(TokenType::kBlockEnd, "'%}'");
    return subparse(end_tags);
  }

  // Same, consuming the end tag name (its '%}' is consumed by the enclosing subparse).
  Body parse_block_body_until(const std::string& end_tag) {
    Body body = parse_block_body({end_tag});
    advance();
    return body;
  }

  StmtPtr parse_statement() {
    Depth depth(*this);
    const Token& t = cur();
    if (t.type != TokenType::kName) fail_here("expected a tag name, got " + describe(t));
    std::string tag = t.text;
    Location loc = t.loc;
    for (const char* bad : kUnsupportedTags)
      if (tag == bad) fail_at(loc, "unsupported tag '" + tag + "'");
    open_.push_back({tag, loc});
    StmtPtr stmt = parse_tag(tag, loc);
    open_.pop_back();
    return stmt;
  }

  StmtPtr parse_tag(const std::string& tag, Location loc) {
    if (tag == "if") return parse_if(loc);
    if (tag == "for") return parse_for(loc);
    if (tag == "set") return parse_set(loc);
    if (tag == "macro") return parse_macro(loc);
    if (tag == "call") return parse_call_block(loc);
    if (tag == "filter") return parse_filter_block(loc);
    if (tag == "with") return parse_with(loc);
    if (tag == "print") return parse_print(loc);
    if (tag == "generation") {
      advance();
      auto stmt = std::make_unique<ScopeStmt>(loc);
      stmt->body = parse_block_body_until("endgeneration");
      return stmt;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(loc, "'" + tag + "' outside of a loop");
      advance();
      return std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue,
                                    loc);
    }
    if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif")
      fail_at(loc, "unexpected tag '" + tag + "' (no open block expects it here)");
    fail_at(loc, "unsupported tag '" + tag + "'");
  }

  StmtPtr parse_if(Location loc) {
    advance();
    auto stmt = std::make_unique<IfStmt>(loc);
    while (true) {
      auto test = parse_tuple(false, false, {}, false);
      Body body = parse_block_body({"elif", "else", "endif"});
      stmt->branches.emplace_back(std::move(test), std::move(body));
      std::string next = cur().text;
      advance();
      if (next == "elif") continue;
      if (next == "else") stmt->otherwise = parse_block_body_until("endif");
      return stmt;
    }
  }

  StmtPtr parse_for(Location loc) {
    advance();
    auto stmt = std::make_unique<ForStmt>(loc);
    stmt->target = parse_assign_target(true, false, "in");
    expect_name("in");
    stmt->iterable = parse_tuple(false, false, "recursive", false);
    if (skip_name("if")) stmt->filter = parse_expression(true);
    if (is_name("recursive")) fail_here("unsupported: recursive for loops");
    ++loop_depth_;
    stmt->body = parse_block_body({"endfor", "else"});
    --loop_depth_;
    std::string next = cur().text;
    advance();
    if (next == "else") stmt->otherwise = parse_block_body_until("endfor");
    return stmt;
  }

  StmtPtr parse_set(Location loc) {
    advance();
    Target target = parse_assign_target(true, true, "");
    if (skip_op("="))
      return std::make_unique<SetStmt>(loc, std::move(target), parse_tuple(false, true, {}, false));
    auto stmt = std::make_unique<SetBlockStmt>(loc);
    stmt->target = std::move(target);
    if (is_op("|")) stmt->filter = parse_filter(nullptr, false);
    stmt->body = parse_block_body_until("endset");
    return stmt;
  }

  std::vector<Parameter> parse_signature() {
    std::vector<Parameter> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      Parameter p;
      p.name = expect_name().text;
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
      } else if (!params.empty() && params.back().default_value) {
        fail_here("non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro(Location loc) {
    advance();
    auto stmt = std::make_unique<MacroStmt>(loc);
    stmt->name = expect_name().text;
    stmt->params = parse_signature();
    int saved = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_block_body_until("endmacro");
    loop_depth_ = saved;
    return stmt;
  }

  StmtPtr parse_call_block(Location loc) {
    advance();
    auto stmt = std::make_unique<CallBlockStmt>(loc);
    if (is_op("(")) stmt->params = parse_signature();
    stmt->call = parse_expression(true);
    if (stmt->call->kind != Expr::Kind::kCall) fail_at(loc, "expected a call in {% call %}");
    int saved = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_block_body_until("endcall");
    loop_depth_ = saved;
    return stmt;
  }

  StmtPtr parse_filter_block(Location loc) {
    advance();
    auto stmt = std::make_unique<FilterBlockStmt>(loc);
    stmt->filter = parse_filter(nullptr, true);
    stmt->body = parse_block_body_until("endfilter");
    return stmt;
  }

  StmtPtr parse_with(Location loc) {
    advance();
    auto stmt = std::make_unique<WithStmt>(loc);
    while (cur().type != TokenType::kBlockEnd) {
      if (!stmt->assignments.empty()) expect_op(",");
      Target target = parse_assign_target(true, false, "");
      expect_op("=");
      stmt->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    stmt->body = parse_block_body_until("endwith");
    return stmt;
  }

  StmtPtr parse_print(Location loc) {
    advance();
    auto stmt = std::make_unique<ScopeStmt>(loc);
    while (cur().type != TokenType::kBlockEnd) {
      if (!stmt->body.empty()) expect_op(",");
      Location at = cur().loc;
      stmt->body.push_back(std::make_unique<OutputStmt>(at, parse_expression(true)));
    }
    return stmt;
  }

  // ---- assignment targets ----

  Target parse_target_primary(bool with_namespace) {
    Target t;
    t.loc = cur().loc;
    if (is_op("(")) {
      advance();
      t = parse_target_tuple(with_namespace, "", true);
      expect_op(")");
      return t;
    }
    if (cur().type != TokenType::kName) fail_here("can't assign to " + describe(cur()));
    const Token& name = cur();
    static const char* kConstants[] = {"true", "false", "True", "False", "none", "None"};
    for (const char* c : kConstants)
      if (name.text == c) fail_here("can't assign to constant '" + name.text + "'");
    t.name = name.text;
    advance();
    if (with_namespace && is_op(".")) {
      advance();
      t.kind = Target::Kind::kNamespaceAttr;
      t.attr = expect_name().text;
    }
    return t;
  }

  Target parse_target_tuple(bool with_namespace, std::string_view end_name, bool parens) {
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.loc = cur().loc;
    bool is_tuple = false;
    while (true) {
      if (!tuple.items.empty()) expect_op(",");
      if (cur().type == TokenType::kBlockEnd || is_op(")") || is_op("=") ||
          (!end_name.empty() && is_name(end_name)))
        break;
      Depth depth(*this);
      tuple.items.push_back(parse_target_primary(with_namespace));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (tuple.items.size() == 1) return std::move(tuple.items[0]);
      if (!parens || !tuple.items.empty()) fail_here("expected an assignment target");
    }
    return tuple;
  }

  // `name`, `a, b`, `(a, b), c`, or (with_namespace) `ns.attr`.
  Target parse_assign_target(bool with_tuple, bool with_namespace, std::string_view end_name) {
    if (!with_tuple) return parse_target_primary(with_namespace);
    return parse_target_tuple(with_namespace, end_name, false);
  }

  // ---- expressions ----

  bool is_tuple_end(std::string_view extra_end) const {
    if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd || is_op(")"))
      return true;
    return !extra_end.empty() && is_name(extra_end);
  }

  // Comma-separated expressions; a tuple when there is a comma.
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::string_view extra_end,
                      bool explicit_parens) {
    Location loc = cur().loc;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) {
        if (cur().type == TokenType::kEof) fail_eof();
        fail_here("expected an expression, got " + describe(cur()));
      }
    }
    auto tuple = std::make_unique<ListExpr>(loc, true);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Depth depth(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    Depth depth(*this);
    Location loc = cur().loc;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      depth.add();
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      expr = std::make_unique<ConditionExpr>(loc, std::move(test), std::move(expr),
                                             std::move(otherwise));
    }
    return expr;
  }

  template <typename Next>
  ExprPtr parse_logical(const char* word, BinaryOp op, Next next) {
    Depth depth(*this);
    ExprPtr left = (this->*next)();
    while (is_name(word)) {
      Location loc = cur().loc;
      advance();
      depth.add();
      left = std::make_unique<BinaryExpr>(loc, op, std::move(left), (this->*next)());
    }
    return left;
  }
  ExprPtr parse_or() { return parse_logical("or", BinaryOp::kOr, &Parser::parse_and); }
  ExprPtr parse_and() { return parse_logical("and", BinaryOp::kAnd, &Parser::parse_not); }

  ExprPtr parse_not() {
    Depth depth(*this);
    if (is_name("not")) {
      Location loc = cur().loc;
      advance();
      return std::make_unique<UnaryExpr>(loc, UnaryOp::kNot, parse_not());
    }
    return parse_compare();
  }

  std::optional<CompareOp> compare_op() const {
    if (cur().type == TokenType::kOperator) {
      static const std::pair<const char*, CompareOp> kOps[] = {
          {"==", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
          {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
      for (const auto& [text, op] : kOps)
        if (cur().text == text) return op;
    }
    if (is_name("in")) return CompareOp::kIn;
    if (is_name("not") && is_name(peek(), "in")) return CompareOp::kNotIn;
    return std::nullopt;
  }

  ExprPtr parse_compare() {
    Depth depth(*this);
    Location loc = cur().loc;
    ExprPtr expr = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (auto op = compare_op()) {
      advance();
      if (*op == CompareOp::kNotIn) advance();
      depth.add();
      if (!cmp) cmp = std::make_unique<CompareExpr>(loc, std::move(expr));
      cmp->rest.emplace_back(*op, parse_math1());
    }
    if (cmp) return cmp;
    return expr;
  }

  ExprPtr parse_binary_chain(const std::vector<std::pair<const char*, BinaryOp>>& ops,
                             ExprPtr (Parser::*next)()) {
    Depth depth(*this);
    ExprPtr left = (this->*next)();
    while (cur().type == TokenType::kOperator) {
      auto it = std::find_if(ops.begin(), ops.end(),
                             [&](const auto& p) { return cur().text == p.first; });
      if (it == ops.end()) break;
      Location loc = cur().loc;
      advance();
      depth.add();
      left = std::make_unique<BinaryExpr>(loc, it->second, std::move(left), (this->*next)());
    }
    return left;
  }

  ExprPtr parse_math1() {
    return parse_binary_chain({{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub}},
                              &Parser::parse_concat);
  }

  ExprPtr parse_concat() {
    Depth depth(*this);
    Location loc = cur().loc;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto concat = std::make_unique<ConcatExpr>(loc);
    concat->parts.push_back(std::move(first));
    while (skip_op("~")) {
      depth.add();
      concat->parts.push_back(parse_math2());
    }
    return concat;
  }

  ExprPtr parse_math2() {
    return parse_binary_chain({{"*", BinaryOp::kMul},
                               {"/", BinaryOp::kDiv},
                               {"//", BinaryOp::kFloorDiv},
                               {"%", BinaryOp::kMod}},
                              &Parser::parse_pow);
  }

  ExprPtr parse_pow() {
    return parse_binary_chain({{"**", BinaryOp::kPow}}, &Parser::parse_unary_filtered);
  }

  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    Location loc = cur().loc;
    ExprPtr node;
    if (skip_op("-")) {
      node = std::make_unique<UnaryExpr>(loc, UnaryOp::kNeg, parse_unary(false));
    } else if (skip_op("+")) {
      node = std::make_unique<UnaryExpr>(loc, UnaryOp::kPos, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node), depth);
    if (with_filter) node = parse_filter_expr(std::move(node), depth);
    return node;
  }

  ExprPtr parse_primary() {
    Depth depth(*this);
    const Token& t = cur();
    Location loc = t.loc;
    switch (t.type) {
      case TokenType::kName: {
        advance();
        if (t.text == "true" || t.text == "True")
          return std::make_unique<LiteralExpr>(loc, Value::boolean(true));
        if (t.text == "false" || t.text == "False")
          return std::make_unique<LiteralExpr>(loc, Value::boolean(false));
        if (t.text == "none" || t.text == "None")
          return std::make_unique<LiteralExpr>(loc, Value::none());
        return std::make_unique<NameExpr>(loc, t.text);
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        return std::make_unique<LiteralExpr>(loc, Value::string(std::move(s)));
      }
      case TokenType::kInteger:
        advance();
        return std::make_unique<LiteralExpr>(loc, Value::integer(t.int_value));
      case TokenType::kFloat:
        advance();
        return std::make_unique<LiteralExpr>(loc, Value::number(t.float_value));
      case TokenType::kOperator:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      case TokenType::kEof:
        fail_eof();
      default:
        break;
    }
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    Location loc = cur().loc;
    advance();
    auto list = std::make_unique<ListExpr>(loc, false);
    while (!is_op("]")) {
      if (!list->items.empty()) expect_op(",");
      if (is_op("]")) break;
      list->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return list;
  }

  ExprPtr parse_dict() {
    Location loc = cur().loc;
    advance();
    auto dict = std::make_unique<DictExpr>(loc);
    while (!is_op("}")) {
      if (!dict->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      dict->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr node, Depth& depth) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
      depth.add();
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node, Depth& depth) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
      depth.add();
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    Location loc = cur().loc;
    if (skip_op(".")) {
      const Token& t = cur();
      if (t.type == TokenType::kName) {
        advance();
        return std::make_unique<AttributeExpr>(loc, std::move(node), t.text);
      }
      if (t.type != TokenType::kInteger) fail_here("expected a name or number after '.'");
      advance();
      return std::make_unique<ItemExpr>(
          loc, std::move(node), std::make_unique<LiteralExpr>(t.loc, Value::integer(t.int_value)));
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail_at(loc, "expected a subscript expression");
    if (args.size() == 1)
      return std::make_unique<ItemExpr>(loc, std::move(node), std::move(args[0]));
    auto tuple = std::make_unique<ListExpr>(loc, true);
    tuple->items = std::move(args);
    return std::make_unique<ItemExpr>(loc, std::move(node), std::move(tuple));
  }

  // An index or a slice `start:stop:step` (each part optional).
  ExprPtr parse_subscribed() {
    Location loc = cur().loc;
    ExprPtr first;
    if (!is_op(":")) {
      first = parse_expression(true);
      if (!is_op(":")) return first;
    }
    advance();  // ':'
    auto slice = std::make_unique<SliceExpr>(loc);
    slice->start = std::move(first);
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
    return slice;
  }

  Arguments parse_call_args() {
    Arguments args;
    Location open = cur().loc;
    expect_op("(");
    while (!is_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail_here("unsupported: *args/**kwargs in calls");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
          peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail_at(open, "positional argument follows keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr node) {
    Location loc = node->loc;  // errors of a call point at its callee
    auto call = std::make_unique<CallExpr>(loc, std::move(node));
    call->args = parse_call_args();
    return call;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(".")) name += "." + expect_name().text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    Depth depth(*this);
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      Location loc = cur().loc;
      std::string name = parse_dotted_name();
      if (!is_supported_filter(name)) fail_at(loc, "unsupported filter '" + name + "'");
      auto filter = std::make_unique<FilterExpr>(loc, std::move(node), name);
      if (is_op("(")) filter->args = parse_call_args();
      node = std::move(filter);
      depth.add();
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    advance();  // 'is'
    bool negated = skip_name("not");
    Location loc = cur().loc;
    std::string name = parse_dotted_name();
    if (!is_supported_test(name)) fail_at(loc, "unsupported test '" + name + "'");
    auto test = std::make_unique<TestExpr>(loc, std::move(node), name);
    bool arg_start = cur().type == TokenType::kName || cur().type == TokenType::kString ||
                     cur().type == TokenType::kInteger || cur().type == TokenType::kFloat ||
                     is_op("[") || is_op("{");
    if (is_op("(")) {
      test->args = parse_call_args();
    } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("cannot chain multiple tests with 'is'");
      Depth depth(*this);
      test->args.positional.push_back(parse_postfix(parse_primary(), depth));
    }
    if (negated) return std::make_unique<UnaryExpr>(loc, UnaryOp::kNot, std::move(test));
    return test;
  }
};

}  // namespace

std::unique_ptr<Template> parse_template(std::string_view source, const std::string& origin) {
  auto tmpl = std::make_unique<Template>();
  tmpl->origin = origin;
  Parser parser(tokenize(source, tmpl->origin), tmpl->origin);
  tmpl->body = parser.parse_all();
  return tmpl;
}

}  // namespace furlong::tokenizer::jinja
