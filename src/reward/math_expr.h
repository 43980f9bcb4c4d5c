// A small numeric evaluator for normalized math answers: the stand-in for the sympy step of the
// math grader ("simplify(a - b) == 0"). Expressions use + - * / ^ (or **), parentheses,
// implicit multiplication (2x, 2(3), (a)(b), 2sqrt(3)), the functions sqrt sin cos tan log ln
// exp, the constant pi, and single-letter variables (a run of letters that is not a known name is
// a product of letters, as sympy's split_symbols does). Two expressions are equivalent when they
// agree at several fixed points of their variables (see numerically_equivalent).
#pragma once

#include <map>
#include <optional>
#include <string_view>

namespace furlong::reward {

// The value of `expr` with the given letter values; nullopt if it does not parse (any syntax
// outside the grammar) or uses a letter without a value. Never throws for bad input.
std::optional<double> evaluate_math_expression(std::string_view expr,
                                               const std::map<char, double>& variables);

// True iff both parse and agree at every probe point where either is finite, and they are
// finite together at least once. Agreement is |a - b| <= 1e-9 * max(1, |a|, |b|) for exact
// expressions and exact equality when either has a decimal literal (sympy's Float semantics:
// 0.1+0.2 is not 0.3, 0.5x is x/2). Known difference from sympy: a Float combined with an
// irrational (2^0.5 vs sqrt(2)) is equal here when the doubles agree, never in sympy.
bool numerically_equivalent(std::string_view a, std::string_view b);

}  // namespace furlong::reward
