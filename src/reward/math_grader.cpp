#include "reward/math_grader.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "reward/latex_text.h"
#include "reward/math_expr.h"
#include "reward/text_util.h"

namespace furlong::reward {
namespace {

// ---- the mathd normalization (Hendrycks MATH _strip_string) --------------------------------

// "\text{...}" around the whole answer (Python: re.search(r"^\\text\{(.+?)\}$")).
std::optional<std::string> text_wrapped_content(std::string_view s) {
  constexpr std::string_view kOpen = "\\text{";
  if (s.size() < kOpen.size() + 2 || !s.starts_with(kOpen) || s.back() != '}') return std::nullopt;
  std::string_view inner = s.substr(kOpen.size(), s.size() - kOpen.size() - 1);
  if (inner.find('\n') != std::string_view::npos) return std::nullopt;
  return std::string(inner);
}

// Units described after "\text{ " are cut; two or more of them is a failure (Python asserts).
std::optional<std::string> remove_right_units(const std::string& s) {
  std::vector<std::string> parts = py_split(s, "\\text{ ");
  if (parts.size() == 1) return s;
  if (parts.size() != 2) return std::nullopt;
  return parts[0];
}

// "\sqrt3" -> "\sqrt{3}"; a \sqrt at the very end is a failure.
std::optional<std::string> fix_sqrt(const std::string& s) {
  if (s.find("\\sqrt") == std::string::npos) return s;
  std::vector<std::string> parts = py_split(s, "\\sqrt");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.empty()) return std::nullopt;
    if (p[0] != '{') {
      out += "\\sqrt{" + p.substr(0, 1) + "}" + p.substr(1);
    } else {
      out += "\\sqrt" + p;
    }
  }
  return out;
}

// "\frac12" -> "\frac{1}{2}", "\frac1{72}" -> "\frac{1}{72}"; a \frac with fewer than two
// characters after it leaves the whole string unchanged.
std::string fix_fracs(const std::string& s) {
  std::vector<std::string> parts = py_split(s, "\\frac");
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    out += "\\frac";
    if (!p.empty() && p[0] == '{') {
      out += p;
      continue;
    }
    if (p.size() < 2) return s;
    std::string a(1, p[0]), b(1, p[1]), rest = p.substr(2);
    out += b != "{" ? "{" + a + "}{" + b + "}" + rest : "{" + a + "}" + b + rest;
  }
  return out;
}

bool is_canonical_int(std::string_view s) {
  if (s.starts_with('-')) s.remove_prefix(1);
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "3/4" -> "\frac{3}{4}" when both sides are plain integers.
std::string fix_a_slash_b(const std::string& s) {
  std::vector<std::string> parts = py_split(s, "/");
  if (parts.size() != 2 || !is_canonical_int(parts[0]) || !is_canonical_int(parts[1])) return s;
  if (parts[1] == "-0" || parts[0] == "-0") return s;
  return "\\frac{" + parts[0] + "}{" + parts[1] + "}";
}

std::optional<std::string> strip_string(std::string s) {
  s = replace_all(s, "\n", "");
  s = replace_all(s, "\\!", "");
  s = replace_all(s, "\\\\", "\\");
  s = replace_all(s, "tfrac", "frac");
  s = replace_all(s, "dfrac", "frac");
  s = replace_all(s, "\\left", "");
  s = replace_all(s, "\\right", "");
  s = replace_all(s, "^{\\circ}", "");
  s = replace_all(s, "^\\circ", "");
  s = replace_all(s, "\\$", "");
  auto units = remove_right_units(s);
  if (!units) return std::nullopt;
  s = replace_all(*units, "\\%", "");
  s = replace_all(s, " .", " 0.");
  s = replace_all(s, "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  std::vector<std::string> eq = py_split(s, "=");
  if (eq.size() == 2 && eq[0].size() <= 2) s = eq[1];
  auto sqrt_fixed = fix_sqrt(s);
  if (!sqrt_fixed) return std::nullopt;
  s = replace_all(*sqrt_fixed, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

// ---- the sympy-side normalization ---------------------------------------------------------

// re.sub(f"{unit}(es)?(s)? *(\^[0-9]+)?", "", s)
std::string remove_unit_words(std::string s) {
  static const char* const kUnits[] = {"degree", "cm",   "centimeter", "meter", "mile",  "second",
                                       "minute", "hour", "day",        "week",  "month", "year",
                                       "foot",   "feet", "inch",       "yard"};
  for (const char* unit : kUnits) {
    const std::string_view u(unit);
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
      if (std::string_view(s).substr(i).starts_with(u)) {
        size_t j = i + u.size();
        if (s.compare(j, 2, "es") == 0) j += 2;
        if (j < s.size() && s[j] == 's') ++j;
        while (j < s.size() && s[j] == ' ') ++j;
        if (j + 1 < s.size() && s[j] == '^' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
          j += 2;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
        i = j;
      } else {
        out += s[i++];
      }
    }
    s = std::move(out);
  }
  return s;
}

// re.sub(pattern, "", s) for "^ *\circ" and ",\! *".
std::string remove_circ_and_thin_commas(std::string s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '^') {
      size_t j = i + 1;
      while (j < s.size() && s[j] == ' ') ++j;
      if (s.compare(j, 5, "\\circ") == 0) {
        i = j + 5;
        continue;
      }
    }
    out += s[i++];
  }
  s = std::move(out);
  out.clear();
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, ",\\!") == 0) {
      i += 3;
      while (i < s.size() && s[i] == ' ') ++i;
      continue;
    }
    out += s[i++];
  }
  return out;
}

// re.sub("([0-9]) +([0-9])", "\\1+\\2", s): "7 3/4" -> "7+3/4".
std::string inject_mixed_number_plus(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (is_digit(s[i])) {
      size_t j = i + 1;
      while (j < s.size() && s[j] == ' ') ++j;
      if (j > i + 1 && j < s.size() && is_digit(s[j])) {
        out += s[i];
        out += '+';
        out += s[j];
        i = j + 1;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

bool is_int_value(double x) {
  return std::isfinite(x) && std::fabs(x - std::nearbyint(x)) <= 1e-7;
}

std::string int_text(double x) {
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.0f", x);
  return buf;
}

bool str_is_int(const std::string& s) {
  auto v = parse_python_float(strip_formatted_commas(s));
  return v && is_int_value(*v);
}

std::string str_to_int(const std::string& s) {
  double v = *parse_python_float(strip_formatted_commas(s));
  return int_text(std::trunc(v));
}

// r"^-?[0-9]+.?/0*[1-9][0-9]*.?$"
bool is_frac(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  size_t digits = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == digits) return false;
  // Backtracking over ".?" before "/": the optional character is any but a newline.
  auto rest_ok = [&](size_t slash) {
    if (slash >= s.size() || s[slash] != '/') return false;
    size_t k = slash + 1;
    while (k < s.size() && s[k] == '0') ++k;
    if (k >= s.size() || s[k] < '1' || s[k] > '9') return false;
    ++k;
    while (k < s.size() && is_digit(s[k])) ++k;
    if (k == s.size()) return true;
    return k + 1 == s.size() && s[k] != '\n';
  };
  if (rest_ok(i)) return true;
  return i < s.size() && s[i] != '\n' && rest_ok(i + 1);
}

std::vector<std::string> split_tuple(const std::string& raw) {
  std::string expr = strip_formatted_commas(raw);
  if (expr.empty()) return {};
  constexpr std::string_view kTupleChars = "()[]";
  auto is_tuple_char = [&](char c) { return kTupleChars.find(c) != std::string_view::npos; };
  if (expr.size() > 2 && is_tuple_char(expr.front()) && is_tuple_char(expr.back())) {
    std::string inner = expr.substr(1, expr.size() - 2);
    bool nested = false;
    for (char c : inner) nested = nested || is_tuple_char(c);
    if (!nested) {
      std::vector<std::string> elems;
      for (const std::string& e : py_split(inner, ",")) elems.push_back(py_strip(e));
      return elems;
    }
  }
  return {expr};
}

// miles' guard before handing an expression to sympy.
bool should_allow_eval(const std::string& expr) {
  std::string letters_only = replace_all(replace_all(expr, "sqrt", ""), "frac", "");
  std::set<char> letters;
  for (char c : letters_only)
    if (std::isalpha(static_cast<unsigned char>(c))) letters.insert(c);
  if (letters.size() > 2) return false;
  if (expr.find("^{") != std::string::npos || expr.find("^(") != std::string::npos) return false;
  for (size_t i = 0; i + 1 < expr.size(); ++i) {
    if (expr[i] != '^' || !is_digit(expr[i + 1])) continue;
    size_t j = i + 1;
    while (j < expr.size() && is_digit(expr[j])) ++j;
    if (j - i - 1 >= 2) return false;                     // \^[0-9][0-9]+
    if (j < expr.size() && expr[j] == '^') return false;  // \^[0-9]+\^
  }
  return true;
}

bool equal_under_evaluation(const std::string& ground_truth, const std::string& given) {
  if (!should_allow_eval("(" + ground_truth + ")-(" + given + ")")) return false;
  return numerically_equivalent(ground_truth, given);
}

bool grade_sympy_style(std::string_view given, std::string_view ground_truth) {
  const std::string gt = sympy_normalize(ground_truth);
  const std::string g = sympy_normalize(given);
  if (gt == g) return true;
  if (g.empty()) return false;
  std::vector<std::string> gt_elems = split_tuple(gt), g_elems = split_tuple(g);
  if (gt_elems.size() > 1 && (gt.front() != g.front() || gt.back() != g.back())) return false;
  if (gt_elems.size() != g_elems.size()) return false;
  for (size_t i = 0; i < gt_elems.size(); ++i) {
    const std::string &a = gt_elems[i], &b = g_elems[i];
    bool ok;
    if (is_frac(a) && is_frac(b)) {
      ok = a == b;  // an unreduced fraction is not accepted for a reduced one
    } else if (str_is_int(a) != str_is_int(b)) {
      ok = false;  // an integer answer needs an integer
    } else {
      ok = equal_under_evaluation(a, b);
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> last_boxed_content(std::string_view text) {
  size_t idx = text.rfind("\\boxed");
  if (idx == std::string_view::npos) return std::nullopt;
  int open = 0;
  for (size_t i = idx; i < text.size(); ++i) {
    if (text[i] == '{') ++open;
    if (text[i] == '}' && --open == 0) {
      std::string_view boxed = text.substr(idx, i + 1 - idx);
      constexpr std::string_view kPrefix = "\\boxed{";
      if (!boxed.starts_with(kPrefix)) return std::nullopt;
      return std::string(boxed.substr(kPrefix.size(), boxed.size() - kPrefix.size() - 1));
    }
  }
  return std::nullopt;
}

std::string mathd_normalize(std::string_view answer) {
  std::string s = py_strip(answer);
  if (auto inner = text_wrapped_content(s)) s = py_strip(*inner);
  auto stripped = strip_string(s);
  return stripped ? *stripped : s;
}

std::string sympy_normalize(std::string_view answer) {
  std::string s(answer);
  if (auto inner = text_wrapped_content(s)) s = *inner;
  s = replace_all(s, "\\%", "%");
  s = replace_all(s, "\\$", "$");
  s = replace_all(s, "$", "");
  s = replace_all(s, "%", "");
  s = replace_all(s, " or ", " , ");
  s = replace_all(s, " and ", " , ");
  s = replace_all(s, "million", "*10^6");
  s = replace_all(s, "billion", "*10^9");
  s = replace_all(s, "trillion", "*10^12");
  s = remove_unit_words(std::move(s));
  s = remove_circ_and_thin_commas(std::move(s));
  if (s.size() >= 2 && s.front() == '{' && s.back() == '}') s = s.substr(1, s.size() - 2);
  if (auto v = parse_python_float(s); v && is_int_value(*v)) s = int_text(std::nearbyint(*v));
  if (s.find('\\') != std::string::npos) s = latex_to_text(s);
  // "- *" -> "-"
  std::string compact;
  for (size_t i = 0; i < s.size(); ++i) {
    compact += s[i];
    if (s[i] == '-')
      while (i + 1 < s.size() && s[i + 1] == ' ') ++i;
  }
  s = inject_mixed_number_plus(compact);
  s = replace_all(s, " ", "");
  s = replace_all(replace_all(s, "{", ""), "}", "");
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (str_is_int(s)) s = str_to_int(s);
  return s;
}

bool grade_math_answer(std::string_view given, std::string_view ground_truth) {
  if (mathd_normalize(ground_truth) == mathd_normalize(given)) return true;
  return grade_sympy_style(given, ground_truth);
}

namespace {
bool grade_boxed(std::string_view solution, std::string_view label) {
  if (label.empty()) return false;
  std::optional<std::string> truth(std::in_place, label);
  if (label.find("\\boxed") != std::string_view::npos) truth = last_boxed_content(label);
  if (!truth) return false;
  std::optional<std::string> given = solution.find("\\boxed") != std::string_view::npos
                                         ? last_boxed_content(solution)
                                         : std::nullopt;
  if (!given) return false;
  return grade_math_answer(*given, *truth);
}
}  // namespace

double math_reward(std::string_view response, std::string_view label) {
  return grade_boxed(response, label) ? 1.0 : 0.0;
}

double deepscaler_reward(std::string_view response, std::string_view label) {
  std::string_view solution;
  if (size_t think = response.rfind("</think>"); think != std::string_view::npos) {
    solution = response.substr(think + 8);
  } else if (size_t marker = response.find("###Response"); marker != std::string_view::npos) {
    solution = response.substr(marker + 11);
    if (size_t next = solution.find("###Response"); next != std::string_view::npos) {
      solution = solution.substr(0, next);
    }
  } else {
    return 0.0;
  }
  return grade_boxed(solution, label) ? 1.0 : 0.0;
}

}  // namespace furlong::reward
