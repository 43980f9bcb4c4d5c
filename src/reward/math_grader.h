// The math answer grader behind --rm-type math / deepscaler, following miles'
// rm_hub math utilities (the Hendrycks MATH / PRM800K graders):
//   * the answer is the content of the last \boxed{...} (braces matched; nothing if the box is
//     unbalanced or written without braces; \fbox is not accepted);
//   * it is correct if the MATH-style string normalization ("mathd": \left/\right, \dfrac,
//     units after "\text{ ", \%, \$, degrees, "x = " prefixes, \frac12, a/b, 0.5) makes both
//     sides equal, or if the second normalization (\text{} units, commas, words like "million",
//     LaTeX rendered to plain text, lowercase) does, or, element by element over tuples, the
//     expressions are equivalent: unreduced fractions must match exactly, an integer answer needs
//     an integer, everything else is compared numerically (math_expr.h; sympy in miles) under
//     miles' guard (at most two unknown letters, no "^{" / "^(" / multi-digit exponents).
// Every function accepts arbitrary text (malformed LaTeX included) and never throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace furlong::reward {

// Content of the last "\boxed{...}" of `text`, or nullopt (no \boxed, unbalanced braces, or the
// last \boxed not followed directly by "{").
std::optional<std::string> last_boxed_content(std::string_view text);

// The MATH ("mathd") normalization of an answer.
std::string mathd_normalize(std::string_view answer);
// The second (sympy-side) normalization of an answer.
std::string sympy_normalize(std::string_view answer);

// mathd equality, or sympy-style equivalence, of a given answer and the ground truth.
bool grade_math_answer(std::string_view given, std::string_view ground_truth);

// --rm-type math: 1 if the last \boxed answer of the response grades correct against the label
// (itself unwrapped when boxed), else 0. An empty label scores 0.
double math_reward(std::string_view response, std::string_view label);
// --rm-type deepscaler: grade only the text after the last "</think>" (or after the first
// "###Response", up to the next one); 0 when neither marker is present.
double deepscaler_reward(std::string_view response, std::string_view label);

}  // namespace furlong::reward
