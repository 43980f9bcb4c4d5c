// --rm-type final_number: "the last number in the response is the answer", for datasets whose
// labels are plain numbers and whose responses do not use \boxed{}. A furlong extra (miles has no
// such type).
//
// A number is an optional minus sign ('-' or U+2212, not preceded by a letter or digit, so
// "5-3" holds 3), digits with optional thousands groups ("1,234,567": one to three digits, then
// groups of exactly three), and an optional fraction (".5" after the digits). A period with no
// digit after it ends the number ("The answer is 19." holds 19). Text inside "<|...|>" (special
// tokens such as <|im_end|> or <|reserved_special_token_5|>) holds no numbers.
#pragma once

#include <optional>
#include <string_view>

namespace furlong::reward {

// The value of the last number in `text`, nullopt if it holds none.
std::optional<double> last_number(std::string_view text);

// The value of a label that is one number in the grammar above ("42", "42.0", "-3", "1,234"),
// surrounding whitespace and a leading '+' allowed; nullopt for anything else.
std::optional<double> parse_number_label(std::string_view label);

// 1 if the last number of `response` equals the label's value (19 == 19.0), else 0 (also when
// the response holds no number). A label that is not a number is a furlong::Error naming it.
double final_number_reward(std::string_view response, std::string_view label);

}  // namespace furlong::reward
