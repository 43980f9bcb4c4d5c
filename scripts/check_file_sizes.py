#!/usr/bin/env python3
"""File-size caps (run by `make lint` and CI): a source file under src/, tests/ or bench/ over
800 lines is reported as a warning, over 1500 lines is an error.

The layering rule is not checked here: the build enforces it (cmake/FurlongTargets.cmake gives
each library an include root that holds only the headers of the layers below it).
"""
import pathlib
import sys

HARD_LIMIT, SOFT_LIMIT = 1500, 800


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    errors, warnings = [], []
    for top in ("src", "tests", "bench"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".h", ".cpp", ".cu"):
                continue
            n = len(path.read_text(encoding="utf-8").splitlines())
            rel = path.relative_to(root)
            if n > HARD_LIMIT:
                errors.append(f"{rel}: {n} lines (hard limit {HARD_LIMIT})")
            elif n > SOFT_LIMIT:
                warnings.append(f"{rel}: {n} lines (soft limit {SOFT_LIMIT})")
    for w in warnings:
        print("warning:", w)
    for e in errors:
        print("error:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
