// LaTeX math to plain text, for comparing math answers (the role pylatexenc's LatexNodes2Text
// plays in miles' grader): \frac{a}{b} -> a/b (a part that is not a plain number or name gets
// parentheses), \sqrt{x} -> sqrt(x), \sqrt[n]{x} -> (x)^(1/(n)), \pi -> pi, \infty -> inf,
// \cdot and \times -> *, \text{..}/\mathrm{..}/... -> their content, \left/\right/spacing
// dropped, {groups} -> their content, other macros dropped (their arguments stay).
// Never throws; nesting deeper than a bound is left as raw text.
#pragma once

#include <string>
#include <string_view>

namespace furlong::reward {

std::string latex_to_text(std::string_view latex);

}  // namespace furlong::reward
