#!/usr/bin/env python3
"""Architecture rules as a check (run by `make lint` and CI).

1. Layering: a file in src/<layer>/ may include furlong headers only from its own layer and
   the layers it is allowed to link (transitively), as in docs/architecture.md.
2. Size: source files stay under 1500 lines (hard); over 800 is reported as a warning.
"""
import pathlib
import re
import sys

DEPS = {
    "core": [],
    "config": ["core"],
    "io": ["core"],
    "tokenizer": ["core"],
    "kernels": ["core"],
    "models": ["kernels", "io", "core"],
    "dist": ["core"],
    "fsdp": ["models", "dist", "core"],
    "optim": ["dist", "core"],
    "engine": ["models", "tokenizer", "dist", "core"],
    "rl": ["core"],
    "rollout": ["engine", "tokenizer", "rl", "core"],
    "train": ["config", "io", "tokenizer", "models", "dist", "fsdp", "optim", "engine", "rl",
              "rollout", "core"],
    "app": ["train", "config", "io", "tokenizer", "models", "dist", "fsdp", "optim", "engine",
            "rl", "rollout", "core"],
}
HARD_LIMIT, SOFT_LIMIT = 1500, 800


def closure(layer):
    seen, todo = set(), [layer]
    while todo:
        for dep in DEPS[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen | {layer}


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    include = re.compile(r'^\s*#\s*include\s*"([a-z_]+)/')
    errors, warnings = [], []
    for path in sorted((root / "src").rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu"):
            continue
        rel = path.relative_to(root / "src")
        if len(rel.parts) < 2:
            continue
        layer = rel.parts[0]
        if layer not in DEPS:
            errors.append(f"src/{rel}: folder '{layer}' is not a known layer (add it to DEPS)")
            continue
        allowed = closure(layer)
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            m = include.match(line)
            if m and m.group(1) in DEPS and m.group(1) not in allowed:
                errors.append(f"src/{rel}:{n}: layer '{layer}' must not include "
                              f"'{m.group(1)}/' (allowed: {', '.join(sorted(allowed))})")
        if len(lines) > HARD_LIMIT:
            errors.append(f"src/{rel}: {len(lines)} lines (hard limit {HARD_LIMIT})")
        elif len(lines) > SOFT_LIMIT:
            warnings.append(f"src/{rel}: {len(lines)} lines (soft limit {SOFT_LIMIT})")
    for w in warnings:
        print("warning:", w)
    for e in errors:
        print("error:", e)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
