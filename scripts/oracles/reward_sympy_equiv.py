"""Oracle for furlong's numeric answer equivalence (src/reward/math_expr.cpp).

Usage: reward_sympy_equiv.py <pairs.json> <out.json>

pairs.json: [[a, b], ...] normalized answers ("^" for powers, implicit multiplication allowed).
out.json:   [true/false, ...]: whether sympy.simplify(a - b) == 0, parsing both as miles' math
grader does (standard transformations plus implicit multiplication/application, "^" -> "**").
A pair sympy cannot parse or simplify counts as not equal.
"""

import json
import sys

import sympy
from sympy.parsing import sympy_parser


def parse(text):
    transformations = sympy_parser.standard_transformations + (
        sympy_parser.implicit_multiplication_application,
    )
    return sympy_parser.parse_expr(text.replace("^", "**"), transformations=transformations)


def equal(a, b):
    try:
        return bool(sympy.simplify(parse(f"({a})-({b})")) == 0)
    except Exception:
        return False


def main():
    pairs = json.load(open(sys.argv[1]))
    json.dump([equal(a, b) for a, b in pairs], open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
