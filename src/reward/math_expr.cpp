#include "reward/math_expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <set>
#include <string>

namespace furlong::reward {
namespace {

struct ParseFailure {};

// Known multi-letter names (functions and pi), longest first where one prefixes another.
constexpr const char* kKnownNames[] = {"sqrt", "sin", "cos", "tan", "log", "exp", "ln", "pi"};

// Recursive descent over the expression text; throws ParseFailure on any error (caught at the
// entry point, so callers never see it). Depth is bounded so hostile input cannot overflow the
// stack.
class Evaluator {
 public:
  Evaluator(std::string_view text, const std::map<char, double>& vars) : s_(text), vars_(vars) {}

  double parse_all() {
    double v = expression();
    if (pos_ != s_.size()) throw ParseFailure{};
    return v;
  }

 private:
  static constexpr int kMaxDepth = 200;

  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) {
      if (++depth > kMaxDepth) throw ParseFailure{};
    }
    ~DepthGuard() { --depth; }
    int& depth;
  };

  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool accept(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  bool starts_primary() const {
    char c = peek();
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '(' || c == '[' ||
           std::isalpha(static_cast<unsigned char>(c));
  }

  double expression() {
    DepthGuard guard(depth_);
    double v = term();
    while (true) {
      if (accept('+')) {
        v += term();
      } else if (accept('-')) {
        v -= term();
      } else {
        return v;
      }
    }
  }

  double term() {
    double v = unary();
    while (true) {
      if (peek() == '*' && !(pos_ + 1 < s_.size() && s_[pos_ + 1] == '*')) {
        ++pos_;
        v *= unary();
      } else if (accept('/')) {
        v /= unary();
      } else if (starts_primary()) {
        v *= power();  // implicit multiplication binds like *
      } else {
        return v;
      }
    }
  }

  double unary() {
    DepthGuard guard(depth_);
    if (accept('-')) return -unary();
    if (accept('+')) return unary();
    return power();
  }

  bool accept_power_operator() {
    if (accept('^')) return true;
    if (peek() == '*' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*') {
      pos_ += 2;
      return true;
    }
    return false;
  }

  double power() {
    DepthGuard guard(depth_);
    double base = primary();
    if (accept_power_operator()) return std::pow(base, unary());  // right-associative
    return base;
  }

  double number() {
    size_t start = pos_;
    while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    if (accept('.')) {
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (pos_ - start == 1 && s_[start] == '.') throw ParseFailure{};
    // An exponent only when digits follow (so 2e stays 2*e).
    if (peek() == 'e') {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
        pos_ = p;
        while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
      }
    }
    return std::strtod(std::string(s_.substr(start, pos_ - start)).c_str(), nullptr);
  }

  // Known multi-letter names at the current position (longest first), else "".
  std::string_view known_name() const {
    for (const char* name : kKnownNames) {
      if (s_.substr(pos_).starts_with(name)) return name;
    }
    return {};
  }

  double apply_function(std::string_view name, double x) const {
    if (name == "sqrt") return std::sqrt(x);
    if (name == "sin") return std::sin(x);
    if (name == "cos") return std::cos(x);
    if (name == "tan") return std::tan(x);
    if (name == "log" || name == "ln") return std::log(x);
    return std::exp(x);
  }

  double primary() {
    DepthGuard guard(depth_);
    char c = peek();
    if (accept('(')) {
      double v = expression();
      if (!accept(')')) throw ParseFailure{};
      return v;
    }
    if (accept('[')) {
      double v = expression();
      if (!accept(']')) throw ParseFailure{};
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (!std::isalpha(static_cast<unsigned char>(c))) throw ParseFailure{};
    std::string_view name = known_name();
    if (name == "pi") {
      pos_ += 2;
      return std::numbers::pi;
    }
    if (!name.empty()) {
      pos_ += name.size();
      // sin(x)^2 is (sin x)^2: the argument is the next primary (a parenthesized expression,
      // or a number or letter as in "sqrt2"); a following ^ applies to the result.
      return apply_function(name, primary());
    }
    ++pos_;
    auto it = vars_.find(c);
    if (it == vars_.end()) throw ParseFailure{};
    return it->second;
  }

  std::string_view s_;
  const std::map<char, double>& vars_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// Letters that act as variables: every letter outside the known names.
std::set<char> variable_letters(std::string_view expr) {
  std::set<char> letters;
  for (size_t i = 0; i < expr.size();) {
    bool skipped = false;
    for (const char* name : kKnownNames) {
      if (expr.substr(i).starts_with(name)) {
        i += std::string_view(name).size();
        skipped = true;
        break;
      }
    }
    if (skipped) continue;
    if (std::isalpha(static_cast<unsigned char>(expr[i]))) letters.insert(expr[i]);
    ++i;
  }
  return letters;
}

}  // namespace

std::optional<double> evaluate_math_expression(std::string_view expr,
                                               const std::map<char, double>& variables) {
  if (expr.empty() || expr.size() > 2000) return std::nullopt;
  try {
    return Evaluator(expr, variables).parse_all();
  } catch (const ParseFailure&) {
    return std::nullopt;
  }
}

namespace {
// Whether the text has a decimal literal ("0.5", ".5", "1e3"): sympy reads those as Floats.
bool has_float_literal(std::string_view expr) {
  for (size_t i = 0; i < expr.size(); ++i) {
    const bool digit_before = i > 0 && std::isdigit(static_cast<unsigned char>(expr[i - 1]));
    const bool digit_after =
        i + 1 < expr.size() && std::isdigit(static_cast<unsigned char>(expr[i + 1]));
    if (expr[i] == '.' && (digit_before || digit_after)) return true;
    if (expr[i] == 'e' && digit_before && digit_after) return true;
  }
  return false;
}
}  // namespace

bool numerically_equivalent(std::string_view a, std::string_view b) {
  // Probe points: irrational-looking values away from poles of common expressions, one of them
  // negative (sqrt(x^2) is not x). Letter k (1-based) is shifted by 0.1318 k so that different
  // letters differ; the negative probe stays negative for up to six letters.
  constexpr double kProbes[] = {0.5772156649, 1.4142135623, 2.7182818284, -0.8660254037};
  std::set<char> letters = variable_letters(a);
  for (char c : variable_letters(b)) letters.insert(c);
  // Exact expressions: sympy proves identities symbolically, so agreement up to double rounding
  // (1e-9 relative) stands for simplify(a - b) == 0. With a decimal literal sympy computes in
  // 53-bit Floats and only an exactly zero difference is equal (0.1+0.2 vs 0.3 is not), which
  // double arithmetic reproduces with a zero tolerance.
  const double tolerance = has_float_literal(a) || has_float_literal(b) ? 0.0 : 1e-9;
  int finite_points = 0;
  for (double probe : kProbes) {
    std::map<char, double> vars;
    int k = 0;
    for (char c : letters) vars[c] = probe + 0.1318 * (++k);
    auto va = evaluate_math_expression(a, vars);
    auto vb = evaluate_math_expression(b, vars);
    if (!va || !vb) return false;
    const bool fa = std::isfinite(*va), fb = std::isfinite(*vb);
    if (fa != fb) return false;
    if (!fa) continue;
    double scale = std::max({1.0, std::fabs(*va), std::fabs(*vb)});
    if (std::fabs(*va - *vb) > tolerance * scale) return false;
    ++finite_points;
    if (letters.empty()) break;  // constant expressions: one point decides
  }
  return finite_points > 0;
}

}  // namespace furlong::reward
