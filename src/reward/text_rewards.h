// The non-math built-in rewards of --rm-type: dapo ("Answer:" lines), SQuAD-style token F1
// and exact match. They follow miles' Python graders character for character on ASCII text.
#pragma once

#include <string>
#include <string_view>

#include "core/json_util.h"

namespace furlong::reward {

// DAPO's answer normalization (normalize_final_answer): the text after the last "=", word and
// unit removals, $...$, \text{}, \textbf{}, \overline{}, \boxed{} unwrapped, \fracab and \sqrta
// braced, "1,000" -> "1000".
std::string dapo_normalize_answer(std::string_view answer);
// --rm-type dapo: the last 300 characters of the response; the last "Answer: <x>"
// (case-insensitive) is normalized and compared with str(int(float(normalized label))). Returns
// {"score": 1.0 or -1.0, "acc": bool, "pred": <normalized prediction>} (use --reward-key).
// A label that is not an integer is a furlong::Error naming it.
Json dapo_reward(std::string_view response, std::string_view label);

// SQuAD's normalize_answer: lowercase, drop punctuation, drop the articles a/an/the, collapse
// whitespace.
std::string squad_normalize(std::string_view text);
// --rm-type f1: token-level F1 of the normalized texts (multiset overlap); 0 if either side is
// yes/no/noanswer and they differ.
double f1_reward(std::string_view response, std::string_view label);
// --rm-type exact_match: 1 iff the SQuAD-normalized texts are equal.
double exact_match_reward(std::string_view response, std::string_view label);

}  // namespace furlong::reward
